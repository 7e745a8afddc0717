"""flatshare: latency-critical LLM requests beside heavy agent traffic on shared vLLM GPUs.

Importing this package is cheap: nothing here imports vLLM. Modules that need vLLM
(`flatshare.sim.engine`, `flatshare.scheduler`) import it themselves.
"""

__version__ = "0.1.0"
