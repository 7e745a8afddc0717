"""Helpers for gateway tests: a gateway over given backends, serve-sim backends in-process, SSE reading and
/metrics scraping. Servers, ports, waits and the fake vLLM backend are in the test kit (`kit.net`,
`kit.fake_vllm`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from flatshare.gateway.app import Gateway, build_gateway
from flatshare.gateway.config import BackendConfig, GatewayConfig, PollConfig, TokenConfig
from flatshare.gateway.connections import server_options
from kit.net import ThreadServer

# -- the gateway ------------------------------------------------------------------------------------------
FAST_POLL = PollConfig(interval_s=0.05, timeout_s=0.5, stale_after_s=0.5, unhealthy_after_failures=2)


def gateway_config(urls: list[str], **changes: Any) -> GatewayConfig:
    """A gateway over `urls` (backends named b0, b1, ...) polling fast, counting tokens by estimate."""
    backends = tuple(BackendConfig(url, f"b{i}") for i, url in enumerate(urls))
    defaults: dict[str, Any] = {"poll": FAST_POLL, "tokens": TokenConfig(source="estimate")}
    return GatewayConfig(backends=backends, **{**defaults, **changes})


@contextmanager
def running_gateway(config: GatewayConfig) -> Iterator[tuple[Gateway, str]]:
    gateway = build_gateway(config)
    with ThreadServer(gateway.app, options=server_options(config.clients)) as server:
        yield gateway, server.url


def backend_rows(url: str) -> dict[str, dict[str, Any]]:
    rows = httpx.get(f"{url}/gateway/backends", timeout=5).json()["backends"]
    return {row["name"]: row for row in rows}


def scrape(url: str) -> dict[str, float]:
    """`name{label=value,...}` -> value for every sample on a /metrics page."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=5).text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def read_events(response: httpx.Response) -> list[str]:
    """The `data:` payloads of a streamed response."""
    return [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]


# -- serve-sim in-process -------------------------------------------------------------------------------
@contextmanager
def sim_backends(count: int, **engine: Any) -> Iterator[list[str]]:
    """`count` in-process serve-sim servers (imports vLLM); yields their URLs."""
    from flatshare.serve.server import build_sim_app
    from flatshare.sim.config import EngineConfig
    from flatshare.sim.profile import load_profile

    with ExitStack() as stack:
        urls = []
        for _ in range(count):
            app = build_sim_app(EngineConfig(**engine), load_profile(), seed=0)
            urls.append(stack.enter_context(ThreadServer(app)).url)
        yield urls


# -- the gateway's log ------------------------------------------------------------------------------------
class Records(logging.Handler):
    """Every log record of the gateway and of uvicorn's error logger while installed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def lines(self) -> list[str]:
        """The log as an operator reads it: each record's message and traceback, line by line."""
        formatter = logging.Formatter("%(levelname)s %(name)s: %(message)s")
        return [line for r in self.records for line in formatter.format(r).splitlines()]

    def tracebacks(self) -> list[str]:
        return [line for line in self.lines if line.startswith("Traceback")]


@contextmanager
def captured_logs() -> Iterator[Records]:
    """uvicorn's error logger does not propagate to the root: listen on it and on the root."""
    handler = Records()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn.error")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
