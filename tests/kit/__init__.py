"""The test kit: helpers shared by tests of several packages (imported as `kit.*`; `tests/` is on the path).

- `kit.net`: `free_port`, `ThreadServer` (an ASGI app under uvicorn in a thread), `wait_for`,
  `wait_healthy` and `serve_sim_processes` (`flatshare serve-sim` as real processes).
- `kit.fake_vllm`: fake vLLM backends, one served over real HTTP (`fake_backend_app`), one behind an
  httpx mock transport with exact timing (`FakeServer`), both speaking the same `/metrics`,
  `/v1/models` and SSE shapes.
"""
