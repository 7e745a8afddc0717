"""The admission experiment (the proposal): does routing long requests away from KV pressure cut the p95
time to first token of co-running short requests?

Several simulated engines (vLLM's own scheduler on a virtual clock) sit behind the same routing functions
the gateway uses (`flatshare.policy.policies`). Runs are saved as raw records; the summary, report and
figures are computed from the saved runs only. See `docs/admission.md`.
"""
