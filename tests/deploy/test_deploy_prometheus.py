"""A real Prometheus (Debian's package, `make system-deps`) scraping a running gateway and two serve-sim
processes: after a short replay through the gateway every Grafana panel query returns data through
Prometheus's HTTP API, the shipped rules load, and killing a backend fires `FlatshareBackendStale`.

Everything listens on 127.0.0.1; Prometheus runs from a temp config and data folder and is stopped by pid.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from deploykit import DEPLOY

from flatshare.gateway.app import build_gateway
from flatshare.gateway.config import BackendConfig, GatewayConfig, PollConfig, ThresholdConfig, TokenConfig
from kit.net import (
    ThreadServer,
    free_port,
    process_exit,
    serve_sim_processes,
    stop_process,
    wait_for,
    wait_healthy,
)

RULES = DEPLOY / "prometheus" / "rules.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "flatshare-gateway.json"
PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(
    not (PROMETHEUS and PROMTOOL),
    reason="Debian's prometheus package is not installed (`make system-deps` installs it where it runs as root)",
)


@needs_prometheus
def test_rules_and_scrape_config_check() -> None:
    for args in (["check", "rules", str(RULES)], ["check", "config", str(DEPLOY / "prometheus.yml")]):
        done = subprocess.run([str(PROMTOOL), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "SUCCESS: 8 rules found"
        in subprocess.run(
            [str(PROMTOOL), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
        ).stdout
    )


def quick_rules(folder: Path) -> Path:
    """rules.yml with every `for:` at 2 s, so alerts fire within a test's bounded wait."""
    yaml = pytest.importorskip("yaml")
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "2s"
    path = folder / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    return path


@contextmanager
def prometheus(folder: Path, gateway: str, backends: list[str]) -> Iterator[str]:
    """Prometheus scraping the gateway (job flatshare-gateway) and the backends (job vllm) every second,
    evaluating the rules every second; its base URL. Stopped by pid at the end."""
    yaml = pytest.importorskip("yaml")
    hostport = [url.removeprefix("http://") for url in backends]
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(quick_rules(folder))],
        "scrape_configs": [
            {
                "job_name": "flatshare-gateway",
                "static_configs": [{"targets": [gateway.removeprefix("http://")]}],
            },
            {"job_name": "vllm", "static_configs": [{"targets": hostport}]},
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (folder / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        exited = process_exit(process, (folder / "prometheus.log").open("rb"))
        deadline = time.monotonic() + 60
        while not _ready(url):
            assert exited() is None, f"prometheus exited: {exited()}"
            assert time.monotonic() < deadline, "prometheus did not become ready in 60 s"
            time.sleep(0.2)
        yield url
    finally:
        stop_process(process)
        log.close()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def query(url: str, expr: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", (expr, answer)
    return list(answer["data"]["result"])


def alerts(url: str) -> list[dict[str, Any]]:
    return list(httpx.get(f"{url}/api/v1/alerts", timeout=10).json()["data"]["alerts"])


def firing(url: str, name: str) -> list[dict[str, str]]:
    return [a["labels"] for a in alerts(url) if a["labels"]["alertname"] == name and a["state"] == "firing"]


def panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]


def replay(gateway: str, out: Path) -> None:
    """A short replay through the gateway (`flatshare replay`: voice callers and agents, streaming)."""
    command = [
        sys.executable,
        "-m",
        "flatshare.cli",
        "replay",
        "--workload",
        "voice-agents:callers=2,agents=4,agent_stagger=0.5,duration=30",
        "--endpoint",
        gateway,
        "--duration",
        "6",
        "--grace",
        "20",
        "--vocab-size",
        "512",
        "--out",
        str(out),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@needs_prometheus
@pytest.mark.vllm
def test_dashboard_queries_return_data_and_a_killed_backend_fires_its_alert(tmp_path: Path) -> None:
    with ExitStack() as stack:
        sims = stack.enter_context(serve_sim_processes(2, "--kv-tokens", "16384", "--max-model-len", "8192"))
        # low thresholds: long prompts meet KV pressure, so every decision reason can show up
        config = GatewayConfig(
            backends=tuple(BackendConfig(sim.url, f"b{i}") for i, sim in enumerate(sims)),
            thresholds=ThresholdConfig(kv_usage=0.02, input_tokens=200),
            poll=PollConfig(interval_s=0.1, timeout_s=0.5, stale_after_s=0.5, unhealthy_after_failures=2),
            tokens=TokenConfig(source="estimate"),
        )
        url = stack.enter_context(ThreadServer(build_gateway(config).app)).url
        prom = stack.enter_context(prometheus(tmp_path, url, [sim.url for sim in sims]))
        wait_for(lambda: len(query(prom, "up == 1")) == 3, 30, "Prometheus to scrape all three targets")

        replay(url, tmp_path / "replay")
        sent = sum(1 for _ in (tmp_path / "replay" / "requests.jsonl").open())
        assert sent >= 5
        wait_for(
            lambda: (
                sum(float(r["value"][1]) for r in query(prom, "flatshare_gateway_decisions_total")) >= sent
            ),
            30,
            "Prometheus to see every decision",
        )
        time.sleep(3)  # a few more scrapes, so every rate() has two points after the replay

        empty = [(title, expr) for title, expr in panel_queries() if not query(prom, expr)]
        assert not empty, empty
        for rule in (
            "flatshare:gateway_backends_healthy:sum",
            "flatshare:gateway_503:ratio_rate1m",
            "flatshare:gateway_kv_pressure_moves:ratio_rate5m",
        ):
            assert query(prom, rule), rule
        assert float(query(prom, "flatshare:gateway_backends_healthy:sum")[0]["value"][1]) == 2
        assert not firing(prom, "FlatshareBackendStale")

        # the planted fault: one backend killed; the gateway marks it stale and unhealthy
        os.kill(sims[1].pid, signal.SIGKILL)
        wait_for(lambda: firing(prom, "FlatshareBackendStale"), 30, "FlatshareBackendStale to fire")
        assert [labels["backend"] for labels in firing(prom, "FlatshareBackendStale")] == ["b1"]
        assert float(query(prom, "flatshare:gateway_backends_healthy:sum")[0]["value"][1]) == 1
        assert not firing(prom, "FlatshareNoHealthyBackend")  # b0 still serves
        wait_healthy(url, 5)
