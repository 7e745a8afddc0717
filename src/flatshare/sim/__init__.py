"""The simulated engine: vLLM's own v1 scheduler driven on a virtual clock.

`flatshare.sim.config`, `.profile`, `.requests` and `.tokens` are pure Python and import
no vLLM. `flatshare.sim.engine` (and `.vllm_host`, `.connector`) import vLLM.
"""
