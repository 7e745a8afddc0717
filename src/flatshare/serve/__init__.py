"""`flatshare serve-sim`: the simulated engine behind a real OpenAI-compatible HTTP server, in wall time.

`tokenizer`, `protocol` and `openai_format` are pure Python; `runner`, `metrics`, `app` and `server`
import vLLM (through `flatshare.sim.engine`), so import them only when serving. The entry point is
`flatshare.serve.server.serve_sim_main`; tests serve `build_sim_app` in a thread with their kit (`tests/kit/net.py`).
"""
