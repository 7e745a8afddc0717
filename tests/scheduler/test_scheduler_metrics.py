"""A flatshare scheduler's Prometheus side port: settings checked at start-up, counters read at scrape
time, and the first-token histogram measured in the scheduler (here on the simulated engine's clock)."""

from __future__ import annotations

import re
import socket

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from flatshare.errors import InputError
from flatshare.scheduler.metrics_config import METRICS_CONFIG_KEY, MetricsConfig, MetricsConfigError
from flatshare.sim.options import METRICS_CONFIG_KEY as OPTIONS_KEY
from flatshare.sim.options import check_scheduler_settings
from flatshare.testing.vllm_server import free_port
from simkit import by_id, req, run

FULL_KV = 32400  # two 16k-token agent contexts fill it (as in test_make_room.py)


def scrape(port: int) -> dict[str, float]:
    """Every sample on the side port, `name{labels}` -> value."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return samples


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"port": 0}, "port must be an integer >= 1"),
        ({"port": 70000}, "port must be <= 65535"),
        ({"port": "9464"}, "port must be an integer"),
        ({"port": 9464, "host": "localhost"}, "host must be an IP address"),
        ({"prot": 9464}, "unknown key(s) ['prot']"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(section: dict[str, object], message: str) -> None:
    with pytest.raises(MetricsConfigError, match=re.escape(message)):
        MetricsConfig.from_additional_config({METRICS_CONFIG_KEY: section})
    assert not MetricsConfig.from_additional_config({}).enabled
    assert MetricsConfig.from_additional_config({METRICS_CONFIG_KEY: {"port": 9464}}).host == "127.0.0.1"


def test_the_cli_checks_the_section_before_any_engine_starts() -> None:
    assert OPTIONS_KEY == METRICS_CONFIG_KEY
    with pytest.raises(InputError, match="vllm has none"):
        check_scheduler_settings("vllm", {METRICS_CONFIG_KEY: {"port": 9464}})
    with pytest.raises(InputError, match="port must be"):
        check_scheduler_settings("make-room", {METRICS_CONFIG_KEY: {"port": -1}})
    check_scheduler_settings("reserve", {METRICS_CONFIG_KEY: {"port": 9464}})


def make_room_with_metrics(port: int) -> dict[str, object]:
    return {
        "scheduler": "make-room",
        "additional_config": {"make_room": {"enabled": True}, METRICS_CONFIG_KEY: {"port": port}},
    }


@pytest.mark.vllm
def test_a_preemption_and_the_voice_turns_first_token_wait_show_on_the_side_port() -> None:
    port = free_port()
    agents = [req(f"agent{i}", 0.0, 16000, 1500, priority=10) for i in range(2)]
    voice = req("voice", 8.0, 600, 40, priority=0)
    from flatshare.sim.config import EngineConfig, fitting_model_len
    from flatshare.sim.engine import SimEngine
    from flatshare.sim.profile import load_profile

    config = EngineConfig(
        kv_tokens=FULL_KV, max_model_len=fitting_model_len(FULL_KV, 16), **make_room_with_metrics(port)
    )  # type: ignore[arg-type]
    engine = SimEngine(config, load_profile())
    try:
        result = engine.run([*agents, voice])
        samples = scrape(port)
    finally:
        engine.scheduler.flatshare_exporter.close()  # type: ignore[attr-defined]
    counters = result.scheduler_counters
    assert counters["preemptions_for_waiting"] >= 1
    for name, value in counters.items():  # every counter, as the scheduler counts it
        assert samples[f"flatshare_make_room_{name}_total"] == value
    protected = 'class="protected",scheduler="make_room"'
    other = 'class="other",scheduler="make_room"'
    assert samples[f"flatshare_scheduler_first_token_wait_seconds_count{{{protected}}}"] == 1
    assert samples[f"flatshare_scheduler_first_token_wait_seconds_count{{{other}}}"] == 2
    record = by_id(result)["voice"]
    wait = record.token_times_s[0] - record.arrival_s  # type: ignore[attr-defined]
    measured = samples[f"flatshare_scheduler_first_token_wait_seconds_sum{{{protected}}}"]
    assert measured == pytest.approx(wait, abs=0.1)  # from the engine's arrival (the API pass, 0.06 s, later)
    assert 0 < measured < 0.5  # made room: no waiting for an agent to finish


@pytest.mark.vllm
def test_a_port_in_use_fails_at_start_up_naming_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            MetricsConfigError, match=f"flatshare_metrics: cannot serve metrics on 127.0.0.1 port {port}"
        ):
            run([req("v", 0.0, 10, 2)], **make_room_with_metrics(port))


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("scheduler", "section"), [("reserve", "reserve"), ("sglang-preempt", "sglang_preempt"), ("sage", "sage")]
)
def test_the_baselines_export_through_the_same_exporter(scheduler: str, section: str) -> None:
    port = free_port()
    from flatshare.sim.config import EngineConfig
    from flatshare.sim.engine import SimEngine
    from flatshare.sim.profile import load_profile

    additional = {section: {"enabled": True}, METRICS_CONFIG_KEY: {"port": port}}
    engine = SimEngine(EngineConfig(scheduler=scheduler, additional_config=additional), load_profile())
    try:
        result = engine.run([req("v", 0.0, 100, 4), req("a", 0.0, 100, 4, priority=10)])
        samples = scrape(port)
    finally:
        engine.scheduler.flatshare_exporter.close()  # type: ignore[attr-defined]
    name = section
    for counter, value in result.scheduler_counters.items():
        assert samples[f"flatshare_{name}_{counter}_total"] == value
    assert (
        samples[f'flatshare_scheduler_first_token_wait_seconds_count{{class="protected",scheduler="{name}"}}']
        == 1
    )
    assert (
        samples[f'flatshare_scheduler_first_token_wait_seconds_count{{class="other",scheduler="{name}"}}']
        == 1
    )
