"""`flatshare.serving`: the access log leaves out the poll routes unless told to log them all."""

from __future__ import annotations

import logging

import pytest

from flatshare.errors import InputError
from flatshare.serving import ACCESS_LOGGER, access_log_option, filter_access_log


def _record(path: str) -> logging.LogRecord:
    """A record shaped as uvicorn's access logger writes them."""
    args = ("127.0.0.1:5000", "GET", path, "1.1", 200)
    return logging.LogRecord(ACCESS_LOGGER, logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None)


@pytest.mark.parametrize(("mode", "polls_logged"), [("requests", False), ("all", True)])
def test_poll_routes_are_left_out_in_requests_mode(mode: str, polls_logged: bool) -> None:
    logger = logging.getLogger(ACCESS_LOGGER)
    try:
        filter_access_log(mode)
        assert access_log_option(mode) == {"access_log": True}
        for path in ("/metrics", "/health", "/v1/models", "/metrics?x=1"):
            assert logger.filter(_record(path)) is polls_logged, path
        assert logger.filter(_record("/v1/completions"))
    finally:
        filter_access_log("all")


def test_off_and_unknown_modes() -> None:
    assert access_log_option("off") == {"access_log": False}
    with pytest.raises(InputError, match="--access-log: 'polls' is not one of requests, all, off"):
        access_log_option("polls")
