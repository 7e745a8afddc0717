"""The admission gateway: an OpenAI-compatible proxy over several vLLM servers that watches each one's
KV use and keeps long requests off servers under KV pressure, with tenants, priorities and an audit
trail of every decision. Nothing here imports vLLM. The decisions themselves are pure and live in
`flatshare.policy` (routing policies, threshold calibration, gate baselines), which the simulated
cluster calls too; this package is their HTTP side.

Modules (every one is listed here; tests/gateway/test_gateway_layout.py checks it):
- serving: `app` (the Starlette routes), `server` (uvicorn), `command` and `__main__` (the commands),
  `proxy` (one request: admit, count, decide, send), `inbound` (reading a client's request), `relay`
  and `sse` (the answer, whole events at a time), `errors` (the gateway's own refusals), `input_count`
  (input tokens), `tenants` and `access` (who may call and read what), `connections` (per-connection
  limits), `audit` (one JSON line per decision), `telemetry` (the gateway's own /metrics), `admin` and
  `switch` (reading and switching the routing), `events` (`POST /gateway/events`), `gating` (drives a
  `flatshare.policy.gates` baseline on the event loop).
- backends: `backends` (each one's last reading, health, models), `backendlimits` (bounds on what a
  backend may send), `poller` (GET /metrics and /health, read by `flatshare.protocol.prometheus`), `upstream`
  (the client interface), `upstream_httpx` and `upstream_native` (the two HTTP clients to the backends),
  `upstream_make` (picks one), `watch` (background tasks that cannot die
  silently), `discovery`, `dnslookup` and `membership` (backends from DNS, a headless Service).
- settings: `config`, `configfile`; `calibrate_inputs` (what `flatshare calibrate-thresholds` reads) and
  `calibrate_save` (saving its thresholds into a config file).
Operator guides: docs/gateway.md, docs/baselines-gateway.md, docs/deploy.md.
"""
