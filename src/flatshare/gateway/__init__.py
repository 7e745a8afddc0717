"""The admission gateway: an OpenAI-compatible proxy over several vLLM servers that watches each one's
KV use and keeps long requests off servers under KV pressure, with tenants, priorities and an audit
trail of every decision. Nothing here imports vLLM.

Pure parts (no I/O; the simulated cluster uses them too): `routing` (features, snapshots, decisions),
`policies` (the routing functions), `calibrate` (thresholds from the first 20% of a run), `scrape`
(reading vLLM's /metrics), `sse` (event framing). State: `backends`. Edges: `poller`, `tokens`,
`tenants`, `inbound`, `proxy`, `relay`, `upstream` + `upstream_native` (HTTP clients to the backends),
`audit`, `metrics`, `app`, `server`, `cli`. Gateway-side baselines: pure `baselines`, driven by
`gating` (with `events`, `POST /gateway/events`). Backends from DNS (a headless Service): `discovery`,
`dnslookup`, `membership`. Settings: `config`, `configfile`. Operator guides: docs/gateway.md,
docs/baselines-gateway.md, docs/deploy.md.
"""
