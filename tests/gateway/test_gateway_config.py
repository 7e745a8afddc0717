"""Gateway settings: files (TOML, JSON) onto frozen dataclasses, unknown keys and bad values refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from flatshare.errors import InputError
from flatshare.gateway.calibrate_save import save_thresholds
from flatshare.gateway.command import backend_entry
from flatshare.gateway.config import GatewayConfig
from flatshare.gateway.configfile import load_config
from flatshare.policy.routing import ThresholdConfig

TOML = """
port = 9100
policy = "threshold"
prefer = "first"
audit_log = "audit.jsonl"

[[backends]]
url = "http://10.0.0.1:8000/"
name = "gpu0"

[[backends]]
url = "http://10.0.0.2:8000"

[thresholds]
kv_usage = 0.75
input_tokens = 6000

[poll]
interval_s = 0.2
stale_after_s = 1.0

[classes]
voice = -10
agent = 10

[[tenants]]
name = "voice-app"
api_keys = ["sk-voice-0001"]
max_priority = -10
"""


def test_toml_maps_onto_the_dataclasses(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(TOML)
    config = load_config(path)
    assert [(b.name, b.url) for b in config.backends] == [
        ("gpu0", "http://10.0.0.1:8000"),
        ("10.0.0.2:8000", "http://10.0.0.2:8000"),
    ]
    assert config.thresholds.thresholds().kv_usage == 0.75 and config.thresholds.input_tokens == 6000
    assert config.poll.interval_s == 0.2 and config.poll.unhealthy_after_failures == 3
    assert config.classes == {"voice": -10, "agent": 10}
    assert config.tenants[0].api_keys == ("sk-voice-0001",) and not config.open
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.port = 1  # type: ignore[misc]


def test_json_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "gw.json"
    path.write_text('{"backends": [{"url": "http://a:1"}], "policy": "least-kv", "port": 1}')
    config = load_config(path, {"port": 8181, "policy": None, "backends": [backend_entry("x=http://b:2")]})
    assert config.port == 8181 and config.policy == "least-kv"
    assert [(b.name, b.url) for b in config.backends] == [("x", "http://b:2")]
    assert config.open


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('colour = "red"\n[[backends]]\nurl = "http://a:1"', "unknown key colour in the top level"),
        ('[[backends]]\nurl = "http://a:1"\n[poll]\nintervall_s = 1', "unknown key intervall_s in poll"),
        ('[[backends]]\nurl = "http://a:1"\nweight = 2', r"unknown key weight in backends\[0\]"),
        ('[[backends]]\nurl = "http://a:1"\n[poll]\ninterval_s = 0', "poll.interval_s must be > 0"),
        ('[[backends]]\nurl = "http://a:1"\n[poll]\ninterval_s = "fast"', "poll.interval_s must be float"),
        ('port = true\n[[backends]]\nurl = "http://a:1"', "port must be int"),
        ("port = 1", "give at least one backend"),
        ('[[backends]]\nurl = "a:1"', "backend url must look like http://host:port"),
        ('policy = "best"\n[[backends]]\nurl = "http://a:1"', "policy must be one of"),
        (
            '[[backends]]\nurl = "http://a:1"\n[[backends]]\nurl = "http://a:1"',
            "backend name 'a:1' appears twice",
        ),
        (
            '[[backends]]\nurl = "http://a:1"\n[thresholds]\nkv_usage = 1.5',
            r"kv_usage threshold must lie in \[0, 1\]",
        ),
        ('[[backends]]\nurl = "http://a:1"\n[tokens]\nsource = "guess"', "tokens.source must be one of"),
        ('[[backends]]\nurl = "http://a:1"\n[[tenants]]\nname = "t"\napi_keys = ["short"]', "at least 8"),
        (
            '[[backends]]\nurl = "http://a:1"\n[[tenants]]\nname = "t"',
            "tenants.0 needs api_keys|tenants\\[0\\] needs api_keys",
        ),
        ('upstream_client = "native"\n[[backends]]\nurl = "https://a:1"', "native speaks plain http"),
        ('[[backends]]\nurl = "http://a:1"\n[classes]\ndefault = 1', "class name 'default'"),
        ("port = [", "not valid TOML"),
    ],
)
def test_bad_settings_are_refused_with_where_and_what(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as caught:
        load_config(path)
    assert str(path) in str(caught.value)


def test_duplicate_api_keys_are_refused_without_printing_them(tmp_path: Path) -> None:
    tenants = [{"name": n, "api_keys": ["sk-secret-key-1"]} for n in ("a", "b")]
    with pytest.raises(InputError, match="appears twice") as caught:
        load_config(None, {"backends": [{"url": "http://a:1"}], "tenants": tenants})
    assert "sk-secret-key-1" not in str(caught.value)


def test_thresholds_are_saved_into_toml_keeping_other_lines(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text("# my gateway\n" + TOML)
    save_thresholds(path, ThresholdConfig(0.42, 777, "runs/x"))
    text = path.read_text()
    assert "# my gateway" in text and "[[tenants]]" in text
    config = load_config(path)
    assert config.thresholds == ThresholdConfig(0.42, 777, "runs/x")
    assert config.poll.interval_s == 0.2
    no_table = tmp_path / "bare.toml"
    no_table.write_text('[[backends]]\nurl = "http://a:1"\n')
    save_thresholds(no_table, ThresholdConfig(0.5, 10))
    assert load_config(no_table).thresholds.input_tokens == 10


def test_thresholds_are_saved_into_json(tmp_path: Path) -> None:
    path = tmp_path / "gw.json"
    path.write_text('{"backends": [{"url": "http://a:1"}]}')
    save_thresholds(path, ThresholdConfig(0.3, 64))
    config = load_config(path)
    assert config.thresholds.kv_usage == 0.3 and config.backends[0].url == "http://a:1"


def test_defaults_are_a_runnable_gateway() -> None:
    config = GatewayConfig(backends=load_config(None, {"backends": [{"url": "http://a:1"}]}).backends)
    assert config.policy == "threshold" and config.host == "127.0.0.1"
    assert config.poll.interval_s == 0.1 and config.upstream_client == "auto"
