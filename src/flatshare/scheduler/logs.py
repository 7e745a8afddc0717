"""flatshare's scheduler log lines in vLLM's server log, formatted and filtered as vLLM's own.

vLLM's server configures only its own `vllm` logger (one handler, named `vllm`, with vLLM's format and
`VLLM_LOGGING_LEVEL`). A record of another logger reaches Python's last-resort handler, which prints only
warnings, bare: make-room's start-up line (an INFO record) was never seen in a `vllm serve` log. When vLLM
has configured its handler, `share_vllm_handler` gives the `flatshare.scheduler` loggers that same handler
and level. Elsewhere (the simulator, tests, `VLLM_CONFIGURE_LOGGING=0`) it changes nothing.
"""

from __future__ import annotations

import logging

VLLM_HANDLER = "vllm"  # the handler's name in vLLM's logging config (vllm.logger.DEFAULT_LOGGING_CONFIG)
LOGGER = "flatshare.scheduler"


def share_vllm_handler() -> bool:
    """Attach vLLM's configured handler to the `flatshare.scheduler` logger (once); whether it is attached."""
    vllm_logger = logging.getLogger("vllm")
    handler = next((h for h in vllm_logger.handlers if h.get_name() == VLLM_HANDLER), None)
    logger = logging.getLogger(LOGGER)
    if handler is None:
        return False
    if handler not in logger.handlers:
        logger.addHandler(handler)
        logger.setLevel(vllm_logger.level)
        logger.propagate = False  # as vLLM's own logger: nothing reaches the last-resort handler twice
    return True
