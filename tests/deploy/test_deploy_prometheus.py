"""A real Prometheus (Debian's package, `make system-deps`) scraping a running gateway and two serve-sim
processes running make-room (the simulated engine runs vLLM's scheduler with make-room, whose side port
serves its metrics as in a real `vllm serve`): after a short replay through the gateway every Grafana panel
query returns data through Prometheus's HTTP API, the shipped rules load, a hold bound set far too low
(`max_hold_steps` 1) fires `FlatshareMakeRoomHoldOnBound`, and killing a backend fires
`FlatshareBackendStale`.

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
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from deploykit import DEPLOY

from flatshare.gateway.app import build_gateway
from flatshare.gateway.config import BackendConfig, GatewayConfig, PollConfig, TokenConfig
from flatshare.policy.routing import ThresholdConfig
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
        "SUCCESS: 10 rules found"
        in subprocess.run(
            [str(PROMTOOL), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
        ).stdout
    )


def quick_rules(folder: Path) -> Path:
    """rules.yml with every `for:` at 2 s and every 5-minute rate at 30 s, so alerts fire within a test's
    bounded wait (a 5-minute rate of a test's 30 s of events is a tenth of their rate)."""
    yaml = pytest.importorskip("yaml")
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "2s"
            rule["expr"] = rule["expr"].replace("[5m]", "[30s]")
    path = folder / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    return path


@contextmanager
def prometheus(folder: Path, gateway: str, backends: list[str], side_ports: list[int]) -> Iterator[str]:
    """Prometheus scraping the gateway (job flatshare-gateway), the backends (job vllm) and make-room's side
    ports (job make-room) every second, evaluating the rules every second; its base URL. Stopped by pid at
    the end."""
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
            {
                "job_name": "make-room",
                "static_configs": [{"targets": [f"127.0.0.1:{port}" for port in side_ports]}],
            },
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


def make_room_settings(side_port: int) -> str:
    """make-room holding agents' decode too, with its hold bound set far too low (every held step is
    followed by a release), and its metrics on `side_port`."""
    make_room = {"enabled": True, "hold_decode": True, "max_hold_steps": 1}
    return json.dumps({"make_room": make_room, "flatshare_metrics": {"port": side_port}})


def hold_burst(backend: str) -> None:
    """Three agents (priority 10) decoding 300 tokens each, and a voice turn (priority 0) of 60 tokens
    that arrives while they decode: make-room holds them for the turn's first 48 tokens."""

    def complete(prompt_start: int, priority: int, max_tokens: int) -> None:
        body = {
            "model": "sim",
            "prompt": list(range(prompt_start, prompt_start + 400)),
            "max_tokens": max_tokens,
            "priority": priority,
        }
        httpx.post(f"{backend}/v1/completions", json=body, timeout=120).raise_for_status()

    with ThreadPoolExecutor(4) as pool:
        agents = [pool.submit(complete, 5 + 400 * i, 10, 300) for i in range(3)]
        time.sleep(0.5)
        voice = pool.submit(complete, 3000, 0, 60)
        for future in [*agents, voice]:
            future.result()


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
        "12",  # the voice callers' first turns come after up to 5 s of stagger and their first speech
        "--grace",
        "60",  # an upper bound: the replay ends with its last request
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
        side_ports = [free_port(), free_port()]
        sims = stack.enter_context(
            serve_sim_processes(
                2,
                *("--kv-tokens", "16384", "--max-model-len", "8192", "--scheduler", "make-room"),
                *("--policy", "priority", "--speed", "4"),  # an agent's long reply ends inside the grace
                each=lambda i: ("--additional-config", make_room_settings(side_ports[i])),
            )
        )
        # low thresholds: long prompts meet KV pressure, so every decision reason can show up
        config = GatewayConfig(
            backends=tuple(BackendConfig(sim.url, f"b{i}") for i, sim in enumerate(sims)),
            thresholds=ThresholdConfig(kv_usage=0.02, input_tokens=200),
            poll=PollConfig(interval_s=0.1, timeout_s=0.5, stale_after_s=0.5, unhealthy_after_failures=2),
            tokens=TokenConfig(source="estimate"),
        )
        url = stack.enter_context(ThreadServer(build_gateway(config).app)).url
        prom = stack.enter_context(prometheus(tmp_path, url, [sim.url for sim in sims], side_ports))
        wait_for(lambda: len(query(prom, "up == 1")) == 5, 30, "Prometheus to scrape all five targets")

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
            "flatshare:make_room_hold_bound_releases:rate5m",
        ):
            assert query(prom, rule), rule
        assert float(query(prom, "flatshare:gateway_backends_healthy:sum")[0]["value"][1]) == 2
        assert not firing(prom, "FlatshareBackendStale")
        # make-room's planted fault: a voice turn beside decoding agents on b0, held on a bound of one step
        hold_burst(sims[0].url)
        waits = 'flatshare_scheduler_first_token_wait_seconds_count{class="protected"}'
        wait_for(lambda: sum(float(r["value"][1]) for r in query(prom, waits)) > 0, 30, "a protected wait")
        assert sum(float(r["value"][1]) for r in query(prom, "flatshare_make_room_hold_steps_total")) > 0
        wait_for(
            lambda: firing(prom, "FlatshareMakeRoomHoldOnBound"),
            30,
            lambda: (
                "FlatshareMakeRoomHoldOnBound to fire: "
                f"{query(prom, 'flatshare_make_room_hold_bound_releases_total')} "
                f"{query(prom, 'flatshare_make_room_empty_hold_steps_total')} "
                f"{query(prom, 'flatshare:make_room_hold_bound_releases:rate5m')}"
            ),
        )

        # the planted fault: one backend killed; the gateway marks it stale and unhealthy
        os.kill(sims[1].pid, signal.SIGKILL)
        wait_for(lambda: firing(prom, "FlatshareBackendStale"), 30, "FlatshareBackendStale to fire")
        assert [labels["backend"] for labels in firing(prom, "FlatshareBackendStale")] == ["b1"]
        assert float(query(prom, "flatshare:gateway_backends_healthy:sum")[0]["value"][1]) == 1
        assert not firing(prom, "FlatshareNoHealthyBackend")  # b0 still serves
        wait_healthy(url, 5)
