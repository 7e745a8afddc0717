"""Switching the routing of a running gateway: `GET`/`PUT /gateway/routing`, guarded by the admin token,
validated like the config file, audited, and in force for the requests that come after it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from gatewaykit import gateway_config, running_gateway, scrape

from flatshare.errors import InputError
from flatshare.gateway.calibrate_inputs import samples_from_row
from flatshare.gateway.configfile import load_config
from flatshare.gateway.switch import RoutingConfig, apply_change
from flatshare.policy.routing import ThresholdConfig
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer, wait_for

TOKEN = "test-admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _rig(stack: ExitStack, tmp_path: Path, **changes: Any) -> tuple[str, list[FakeState], Path]:
    states = [FakeState(kv_usage=0.9), FakeState()]
    servers = [stack.enter_context(ThreadServer(fake_backend_app(s), log_level="critical")) for s in states]
    audit = tmp_path / "audit.jsonl"
    settings: dict[str, Any] = {
        "audit_log": str(audit),
        "policy": "first",
        "prefer": "first",
        "thresholds": ThresholdConfig(0.5, 50, calibrated_from="run-7"),
        **changes,
    }
    _, url = stack.enter_context(running_gateway(gateway_config([s.url for s in servers], **settings)))
    return url, states, audit


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[tuple[str, list[FakeState], Path]]:
    with ExitStack() as stack:
        yield _rig(stack, tmp_path, admin_token=TOKEN)


LONG = {"model": "fake", "prompt": "word " * 400, "max_tokens": 4}  # ~500 estimated tokens: long here


def test_put_switches_the_policy_for_later_requests_and_audits_it(
    admin: tuple[str, list[FakeState], Path],
) -> None:
    url, _, audit = admin
    wait_for(lambda: httpx.get(f"{url}/gateway/backends").json()["backends"][0]["kv_usage"] == 0.9)
    before = httpx.get(f"{url}/gateway/routing").json()
    assert before == {
        "policy": "first",
        "prefer": "first",
        "thresholds": {"kv_usage": 0.5, "input_tokens": 50, "calibrated_from": "run-7"},
        "admin": True,
    }
    stays = httpx.post(f"{url}/v1/completions", json=LONG, timeout=10)
    assert (stays.headers["x-flatshare-backend"], stays.headers["x-flatshare-reason"]) == ("b0", "first")
    change = {"policy": "threshold", "thresholds": {"kv_usage": 0.8, "input_tokens": 100}}
    answer = httpx.put(f"{url}/gateway/routing", json=change, headers=AUTH)
    assert answer.status_code == 200
    after = {
        "policy": "threshold",
        "prefer": "first",
        "thresholds": {"kv_usage": 0.8, "input_tokens": 100, "calibrated_from": ""},
        "admin": True,
    }
    assert answer.json() == after and httpx.get(f"{url}/gateway/routing").json() == after
    moved = httpx.post(f"{url}/v1/completions", json=LONG, timeout=10)
    assert (moved.headers["x-flatshare-backend"], moved.headers["x-flatshare-reason"]) == (
        "b1",
        "kv_pressure",
    )
    assert moved.headers["x-flatshare-preferred"] == "b0"
    metrics = scrape(url)
    assert metrics["flatshare_gateway_threshold_kv_usage{}"] == 0.8
    assert metrics["flatshare_gateway_threshold_input_tokens{}"] == 100

    def lines() -> list[dict[str, Any]]:
        return [json.loads(x) for x in audit.read_text().splitlines()] if audit.exists() else []

    wait_for(lambda: len(lines()) == 3, 5.0, "three audit lines")
    first, change_line, decision = lines()
    assert (first["policy"], first["thresholds"]) == ("first", None)
    assert change_line["kind"] == "routing" and "kind" not in decision
    assert change_line["before"]["policy"] == "first" and change_line["after"]["policy"] == "threshold"
    assert change_line["client"] == "127.0.0.1" and TOKEN not in audit.read_text()
    assert decision["policy"] == "threshold" and decision["thresholds"] == {
        "kv_usage": 0.8,
        "input_tokens": 100,
    }
    assert list(samples_from_row(change_line)) == []  # calibrate reads past routing lines


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), ({"Authorization": "Bearer wrong-token-0123456789"}, 401), ({"Authorization": TOKEN}, 401)],
)
def test_put_needs_the_token(
    admin: tuple[str, list[FakeState], Path], headers: dict[str, str], status: int
) -> None:
    url, _, _ = admin
    answer = httpx.put(f"{url}/gateway/routing", json={"policy": "round-robin"}, headers=headers)
    assert answer.status_code == status and answer.headers["www-authenticate"] == "Bearer"
    assert "Bearer <admin_token>" in answer.json()["error"]["message"]
    assert httpx.get(f"{url}/gateway/routing").json()["policy"] == "first"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"policy": "fastest"}, "policy must be one of threshold, round-robin"),
        ({"prefer": "random"}, "prefer must be one of round-robin, first"),
        ({"thresholds": {"kv_usage": 1.5}}, "kv_usage threshold must lie in [0, 1], got 1.5"),
        ({"thresholds": {"input_tokens": "many"}}, "thresholds.input_tokens must be int, got 'many'"),
        ({"thresholds": {"kv": 0.5}}, "unknown key kv in thresholds"),
        ({"policies": "first"}, "unknown key policies"),
        (["first"], "the body must be a JSON object"),
    ],
)
def test_bad_changes_are_refused_and_change_nothing(
    admin: tuple[str, list[FakeState], Path], body: Any, message: str
) -> None:
    url, _, _ = admin
    answer = httpx.put(f"{url}/gateway/routing", json=body, headers=AUTH)
    assert answer.status_code == 400
    assert message in answer.json()["error"]["message"]
    assert httpx.get(f"{url}/gateway/routing").json()["policy"] == "first"
    bad_json = httpx.put(f"{url}/gateway/routing", content=b"{policy", headers=AUTH)
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]


def test_without_a_token_the_admin_route_is_off(tmp_path: Path) -> None:
    with ExitStack() as stack:
        url, _, _ = _rig(stack, tmp_path)
        assert httpx.get(f"{url}/gateway/routing").json()["admin"] is False
        answer = httpx.put(f"{url}/gateway/routing", json={"policy": "round-robin"}, headers=AUTH)
        assert answer.status_code == 404 and "admin_token" in answer.json()["error"]["message"]


def test_apply_change_keeps_what_is_not_named() -> None:
    current = RoutingConfig("threshold", "round-robin", ThresholdConfig(0.3, 900, "calibrated"), seed=4)
    assert apply_change(current, {}) == current
    assert apply_change(current, {"prefer": "first"}) == RoutingConfig(
        "threshold", "first", current.thresholds, 4
    )
    changed = apply_change(current, {"thresholds": {"input_tokens": 10}})
    assert changed.thresholds == ThresholdConfig(0.3, 10, "")
    with pytest.raises(InputError, match="unknown key"):
        apply_change(current, {"seed": 3})


def test_admin_token_setting_is_checked_and_never_shown() -> None:
    with pytest.raises(InputError, match="admin_token must be at least 16"):
        load_config(None, {"backends": [{"url": "http://127.0.0.1:1"}], "admin_token": "short"})
    config = load_config(None, {"backends": [{"url": "http://127.0.0.1:1"}], "admin_token": TOKEN})
    assert config.admin_token == TOKEN and TOKEN not in repr(config)
