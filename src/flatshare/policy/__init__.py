"""Pure decisions about where and when a request goes: no I/O, no clock, no HTTP. The time, where it
matters, is an argument, so the same functions run in the live gateway (`flatshare.gateway`) and in
virtual time (`flatshare.replay.virtual`, the admission experiment's simulated cluster). Nothing here
imports anything of flatshare but `flatshare.errors` (tests/policy/test_policy_layout.py checks it).

- `load`: `BackendLoad`, the one shape of a backend's load (what a scrape read, its age and health,
  requests sent after it), read by routing policies and gates alike.
- `classes`: the traffic classes (voice turns and agents by vLLM priority) and their default bounds.
- `routing`: what a routing policy sees and says (`RequestFeatures`, `Thresholds`, `RoutingDecision`).
- `policies`: the routing policies (`threshold`, `round-robin`, `least-kv`, ...), `make_policy`.
- `calibrate`: the threshold rule's thresholds from the first part of a run.
- `gates`: gateway-side baselines (`agent-cap`, `abort-resubmit`, `flow-control`, `leaseholder`).
"""
