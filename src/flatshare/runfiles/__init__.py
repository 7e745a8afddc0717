"""Run files: what every run writes and every analysis reads, in one place.

- `records`: the request record format (`ReplayRecord`, version 2), its schema and bounded reader;
  `upgrade`: old record files to it; `sim_records`: the simulated engine's record and its written form;
- `samples`: engine samples (`samples.jsonl`);
- `run`: one run folder (`write_run` / `load_run`; the drivers' `run.json`: `write_replay_run`);
- `files`: output folders, atomic folders and files, JSON and JSONL in the one style of saved files.

It imports nothing else of flatshare but `errors`, `jsonin` (bounded reading) and `safeout` (safe
writing), so every package can use it and none is imported back. Where a run's folder lies and what its
facts say is each experiment's own scheme (`colocation.runs`, `admission.runs`).
"""
