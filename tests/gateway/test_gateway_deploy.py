"""deploy/: every Grafana query names a metric the gateway or vLLM really exports, or a recording rule the
shipped rules define; Prometheus scrapes the gateway, vLLM and make-room's side port. The make-room panels'
series (`flatshare_make_room_*`, `flatshare_scheduler_*`) are checked against a real scrape of the
scheduler's side port by tests/deploy/test_deploy_prometheus.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from gatewaykit import gateway_config, running_gateway, sim_backends
from prometheus_client.parser import text_string_to_metric_families

from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "flatshare-gateway.json"
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def metric_names(expr: str) -> set[str]:
    """The metric names in a PromQL expression: ours start `flatshare_` (recording rules `flatshare:`),
    vLLM's `vllm:`."""
    without_strings = re.sub(r'"[^"]*"', "", expr)
    return {t for t in NAME.findall(without_strings) if t.startswith(("flatshare_", "flatshare:", "vllm:"))}


SCHEDULER_SERIES = ("flatshare_make_room_", "flatshare_scheduler_")  # make-room's side port, not the gateway


def exported(url: str) -> set[str]:
    page = httpx.get(f"{url}/metrics", timeout=10).text
    return {sample.name for family in text_string_to_metric_families(page) for sample in family.samples}


@pytest.fixture(scope="module")
def gateway_names() -> Iterator[set[str]]:
    with ExitStack() as stack:
        backend = stack.enter_context(ThreadServer(fake_backend_app(FakeState()), log_level="critical"))
        _, url = stack.enter_context(running_gateway(gateway_config([backend.url])))
        assert httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "stream": True}).status_code == 200
        yield exported(url)


def test_every_query_names_a_metric() -> None:
    assert len(queries()) >= 15
    for expr in queries():
        assert metric_names(expr), expr


def test_gateway_queries_name_metrics_the_gateway_exports(gateway_names: set[str]) -> None:
    used = {
        name
        for expr in queries()
        for name in metric_names(expr)
        if name.startswith("flatshare_") and not name.startswith(SCHEDULER_SERIES)
    }
    assert used and used <= gateway_names, used - gateway_names
    assert all(
        name.startswith("flatshare_")
        for name in gateway_names
        if not name.startswith(("python_", "process_"))
    )


def test_recording_rules_the_dashboard_reads_are_defined() -> None:
    yaml = pytest.importorskip("yaml")
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    defined = {rule["record"] for group in rules["groups"] for rule in group["rules"] if "record" in rule}
    used = {name for expr in queries() for name in metric_names(expr) if name.startswith("flatshare:")}
    assert used <= defined, used - defined


@pytest.mark.vllm
def test_vllm_queries_name_metrics_vllm_exports() -> None:
    """Against serve-sim, which exports vLLM's names (the real-server module checks a real vLLM too)."""
    used = {name for expr in queries() for name in metric_names(expr) if name.startswith("vllm:")}
    with sim_backends(1, kv_tokens=4096, max_model_len=4000) as urls:
        httpx.post(f"{urls[0]}/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30)
        names = exported(urls[0])
    assert used and used <= names, used - names


def test_prometheus_scrapes_the_gateway_and_vllm() -> None:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"flatshare-gateway", "vllm", "make-room"}
    assert all(
        job["metrics_path"] == "/metrics" and job["static_configs"][0]["targets"] for job in jobs.values()
    )
    for name in ("datasources.yml", "dashboards.yml"):
        assert yaml.safe_load((DEPLOY / "grafana" / "provisioning" / name).read_text())["apiVersion"] == 1
