"""The shared experiment framework: what every experiment (co-location, admission) runs and saves through.

- `rundir`: run folders written atomically, and the JSON/JSONL files inside them;
- `jobs`: a job (condition, seed, picklable parameters) and a failed job's report;
- `executors`: where jobs run, local processes (`local`) or a Ray cluster (`ray`, an optional extra),
  behind one interface. A job's output depends only on its parameters and seed, so both give the same
  files byte for byte.

It imports neither experiment; both import it.
"""
