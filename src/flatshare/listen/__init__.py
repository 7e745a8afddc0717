"""Hear a call: one voice call of a saved run as a wav (every wait as the run measured it) and a png."""
