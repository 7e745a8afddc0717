"""Replaying workloads: one record format, a virtual-time driver (the simulator) and a wall-clock
driver (any OpenAI-compatible endpoint)."""
