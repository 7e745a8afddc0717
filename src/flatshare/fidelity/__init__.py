"""Simulator fidelity: calibrate the step-time model against a real vLLM server, then replay one
seeded workload against the server and through the simulator and report how far apart they are.

`flatshare.fidelity.fit` (pure: features, non-negative least squares, residuals), `.probes` (HTTP
primitives), `.calibrate` (the probe plan and its run), `.metrics` / `.compare` (pure: what a run
measured, relative errors, bounds from real-vs-real noise), `.runs` (the real and simulated sides),
`.report` and `.figures` (fidelity.json, report.md, the CDF figure), `.command` (the two commands).
Only `.runs` (simulated side) imports vLLM.
"""
