"""The test kit: helpers shared by tests of several packages (imported as `kit.*`; `tests/` is on the path).

- `kit.net`: `free_port`, `ThreadServer` (an ASGI app under uvicorn in a thread), `wait_for`,
  `wait_healthy` and `serve_sim_processes` (`flatshare serve-sim` as real processes).
- `kit.fake_vllm`: fake vLLM backends, one served over real HTTP (`fake_backend_app`), one behind an
  httpx mock transport with exact timing (`FakeServer`), both speaking the same `/metrics`,
  `/v1/models` and SSE shapes.
- `kit.replay`: small hand-built workloads (`session`, `workload`), a capturing ASGI middleware
  (`Capture`) and a record-file check (`checked_records`), for tests that replay workloads.
- `kit.shared_vllm`: the tiny model built once per shape a session and one real vLLM CPU server shared by
  the modules that can live with its settings (fixtures `tiny_models`, `tiny_model`, `tiny_vllm` in
  `tests/conftest.py`, which runs those modules together and stops the server after the last of them).
"""
