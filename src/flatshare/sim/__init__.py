"""The simulated engine: vLLM's own v1 scheduler driven on a virtual clock.

`flatshare.sim.config`, `.profile`, `.requests` and `.tokens` are pure Python and import
no vLLM. `flatshare.sim.engine` (and `.vllm_host`, `.connector`) import vLLM.
"""

import os

# The simulator builds vLLM's scheduler in-process; vLLM's start-up notices about the CPU platform
# are noise here. A user's own VLLM_LOGGING_LEVEL wins.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
