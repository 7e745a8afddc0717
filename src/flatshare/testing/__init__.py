"""Helpers for tests: a tiny local model and a real vLLM CPU server harness."""
