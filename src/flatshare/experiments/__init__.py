"""Experiments: grids of conditions x seeds run on the simulated engine, saved as raw records."""
