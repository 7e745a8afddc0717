"""make-room's log lines reach vLLM's server log (scheduler/logs.py).

Before the fix, make-room's start-up line (INFO, logger `flatshare.scheduler.make_room`) never appeared in
a `vllm serve` log: vLLM configures only its `vllm` logger, so the record fell to Python's last-resort
handler, which drops INFO. tests/test_docs_journey.py checks the line in a real server's log.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from flatshare.scheduler.logs import LOGGER, VLLM_HANDLER, share_vllm_handler

pytestmark = pytest.mark.vllm  # importing the scheduler package imports vLLM


@pytest.fixture
def clean_loggers() -> Iterator[None]:
    vllm_logger, ours = logging.getLogger("vllm"), logging.getLogger(LOGGER)
    saved = (list(vllm_logger.handlers), vllm_logger.level, list(ours.handlers), ours.level, ours.propagate)
    yield
    vllm_logger.handlers[:], vllm_logger.level = saved[0], saved[1]
    ours.handlers[:], ours.level, ours.propagate = saved[2], saved[3], saved[4]


def test_info_line_reaches_vllms_handler(clean_loggers: None) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.set_name(VLLM_HANDLER)
    vllm_logger = logging.getLogger("vllm")
    vllm_logger.handlers[:] = [handler]
    vllm_logger.setLevel(logging.INFO)
    logging.getLogger(LOGGER).handlers[:] = []
    assert share_vllm_handler()
    assert share_vllm_handler()  # a second call adds nothing
    logging.getLogger(f"{LOGGER}.make_room").info("make-room: on, max_victims=2")
    logging.getLogger(f"{LOGGER}.make_room").debug("not at vLLM's level")
    assert stream.getvalue() == "make-room: on, max_victims=2\n"


def test_without_vllms_handler_nothing_changes(clean_loggers: None) -> None:
    logging.getLogger("vllm").handlers[:] = []
    ours = logging.getLogger(LOGGER)
    ours.handlers[:] = []
    assert not share_vllm_handler()
    assert ours.handlers == [] and ours.propagate
