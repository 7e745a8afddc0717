"""The gateway's file readers fuzzed (issue 16): its config file (`configfile.load_config`, TOML and JSON)
and the runs `flatshare calibrate-thresholds` reads (`calibrate_inputs.load_samples`: audit logs, request records,
engine samples), in-process with hypothesis, then a few refused config files through the real CLI.
Each reader returns a valid object or raises `InputError` (the CLI's "one line, exit 2") with a one-line
message that shows no key or token; never another exception, never a hang.

Bounded for `make test` (fixed examples, `kit.fuzz`); `FLATSHARE_FUZZ=long` (`make fuzz`) runs 20x more."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.errors import InputError
from flatshare.gateway.calibrate_inputs import load_samples
from flatshare.gateway.config import GatewayConfig
from flatshare.gateway.configfile import load_config
from kit.fuzz import fuzz_settings, odd_json

pytestmark = pytest.mark.fuzz

ADMIN_TOKEN = "admin-token-5e0b9c27d41a"
TENANT_KEY = "sk-voice-7f3a61c2e8"
BACKEND_KEY = "backend-key-2d94b0e6"
SECRETS = (ADMIN_TOKEN, TENANT_KEY, BACKEND_KEY)
BASE: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 8080,
    "policy": "threshold",
    "admin_token": ADMIN_TOKEN,
    "backend_api_key": BACKEND_KEY,
    "connect_timeout_s": 2.0,
    "backends": [{"url": "http://127.0.0.1:8001", "name": "gpu0"}],
    "tenants": [{"name": "voice", "api_keys": [TENANT_KEY], "max_priority": -10}],
    "poll": {"interval_s": 0.1, "timeout_s": 0.5},
    "classes": {"voice": -10},
    "thresholds": {"kv_usage": 0.8, "input_tokens": 4096},
}
PATHS: tuple[tuple[Any, ...], ...] = (
    ("host",),
    ("port",),
    ("policy",),
    ("prefer",),
    ("admin_token",),
    ("backend_api_key",),
    ("connect_timeout_s",),
    ("drain_timeout_s",),
    ("retry_after_s",),
    ("max_body_bytes",),
    ("audit_log",),
    ("baseline",),
    ("backends",),
    ("backends", 0, "url"),
    ("backends", 0, "name"),
    ("tenants", 0, "name"),
    ("tenants", 0, "api_keys"),
    ("tenants", 0, "api_keys", 0),
    ("tenants", 0, "max_priority"),
    ("poll", "interval_s"),
    ("poll", "stale_after_s"),
    ("poll", "unhealthy_after_failures"),
    ("classes", "voice"),
    ("classes", "agent\n"),
    ("thresholds", "kv_usage"),
    ("thresholds", "input_tokens"),
    ("tokens", "source"),
    ("discover",),
    ("unknown",),
)


@dataclass(frozen=True)
class Raw:
    """A TOML value written as given (what no Python value serializes to)."""

    text: str


TOML_ODDITIES = st.one_of(
    st.sampled_from(
        ["inf", "-inf", "nan", "+nan", "1e400", "0x7fffffffffffffff", "1_000", "1979-05-27T07:32:00Z"]
    ),
    st.sampled_from(['"\\ud800"', "'''a\nb'''", '"a\\u0000b"', "{}", "[]", "[1, 'a']"]),
    st.integers(1, 6000).map(lambda n: "9" * n),
    st.integers(1, 3000).map(lambda n: "[" * n + "1" + "]" * n),
).map(Raw)
TEXT_ODDITIES = st.sampled_from(
    [
        "voice\n",
        " sk-key-with-spaces ",
        "http://[::1",
        "http://h:99999",
        "file:///etc/passwd",
        "http://h/path",
        "::",
        "0.0.0.0",
        "a" * 40,
        "x\x00y",
        "\u00e9t\u00e9",
        "",
    ]
)
PYTHON_VALUES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.booleans(),
    st.text(max_size=30),
    TEXT_ODDITIES,
    st.lists(st.one_of(st.integers(), TEXT_ODDITIES), max_size=3),
    st.dictionaries(st.sampled_from(["url", "name", "x"]), TEXT_ODDITIES, max_size=2),
)


def _set(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    target: Any = data
    for step in path[:-1]:
        try:
            target = target[step]
        except (KeyError, IndexError, TypeError):
            return  # an earlier change replaced the container: nothing to set
    if isinstance(target, dict) or (
        isinstance(target, list) and isinstance(path[-1], int) and path[-1] < len(target)
    ):
        target[path[-1]] = value


def _mutated(values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    def apply(changes: list[tuple[tuple[Any, ...], Any]]) -> dict[str, Any]:
        data = copy.deepcopy(BASE)
        for path, value in changes:
            _set(data, path, value)
        return data

    return st.lists(st.tuples(st.sampled_from(PATHS), values), max_size=3).map(apply)


def _toml_value(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            "nan"
            if math.isnan(value)
            else ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else repr(value)
        )
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"


def to_toml(data: dict[str, Any]) -> str:
    """`data` as TOML: scalars first, then tables, then arrays of tables."""
    lines = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in data.items() if not _is_table(v)]
    for key, value in data.items():
        if isinstance(value, dict):
            lines += [f"[{json.dumps(key)}]"] + [
                f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()
            ]
        elif _is_table(value):
            for item in value:
                lines += [f"[[{json.dumps(key)}]]"] + [
                    f"{json.dumps(k)} = {_toml_value(v)}" for k, v in item.items()
                ]
    return "\n".join(lines) + "\n"


def _is_table(value: Any) -> bool:
    return isinstance(value, dict) or (
        isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)
    )


def _config_file() -> st.SearchStrategy[tuple[str, bytes]]:
    toml = _mutated(st.one_of(PYTHON_VALUES, TOML_ODDITIES)).map(lambda d: (".toml", to_toml(d).encode()))
    as_json = _mutated(PYTHON_VALUES).map(lambda d: (".json", json.dumps(d).encode()))
    odd = odd_json().map(
        lambda text: (".json", ('{"backends": [{"url": "http://h:1"}], "port": ' + text + "}").encode())
    )
    raw = st.tuples(st.sampled_from([".toml", ".json"]), st.binary(max_size=300))
    return st.one_of(toml, as_json, odd, raw)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("config-fuzz")


def _refusal(exc: InputError) -> str:
    message = str(exc)
    assert message and "\n" not in message, repr(message)  # the CLI prints it as one line
    for secret in SECRETS:
        assert secret not in message, message
    return message


@fuzz_settings(400)
@given(file=_config_file())
def test_config_file_reader(folder: Path, file: tuple[str, bytes]) -> None:
    suffix, content = file
    path = folder / f"gateway{suffix}"
    path.write_bytes(content)
    try:
        config = load_config(path)
    except InputError as exc:
        note(_refusal(exc))
        return
    assert isinstance(config, GatewayConfig) and config.backends
    for name in ("connect_timeout_s", "upstream_timeout_s", "drain_timeout_s"):
        assert math.isfinite(getattr(config, name))
    assert math.isfinite(config.poll.interval_s) and config.poll.interval_s > 0
    assert all(t.name == t.name.strip() and t.name.isprintable() for t in config.tenants)
    assert all(name.isprintable() for name in config.classes)


AUDIT_LINE: dict[str, Any] = {
    "t": 1.5,
    "request_id": "r1",
    "input_tokens": 100,
    "backends": [{"name": "b0", "kv_usage": 0.5, "stale": False}],
    "attempt": 1,
}
SAMPLE_LINE: dict[str, Any] = {"t": 2.0, "kv_usage": 0.25}


def _run_file() -> st.SearchStrategy[bytes]:
    stringy = [
        '"nan"',
        '"inf"',
        '"-inf"',
        '"1e999"',
        '"-0"',
        '"x"',
        "[]",
        "{}",
        "null",
        "true",
        "-1",
        "1e308",
        "2",
    ]
    values = st.one_of(st.sampled_from(stringy), odd_json())

    def mutated(base: dict[str, Any]) -> st.SearchStrategy[str]:
        def render(changes: list[tuple[str, str]]) -> str:
            fields = {k: json.dumps(v) for k, v in base.items()}
            fields.update(changes)
            return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in fields.items()) + "}"

        return st.lists(st.tuples(st.sampled_from([*base, "kind"]), values), max_size=2).map(render)

    line = st.one_of(mutated(AUDIT_LINE), mutated(SAMPLE_LINE), odd_json())
    lines = st.lists(line, min_size=1, max_size=3).map(lambda xs: "\n".join(xs).encode())
    return st.one_of(lines, st.binary(max_size=300))


@fuzz_settings(300)
@given(content=_run_file())
def test_calibration_run_reader(folder: Path, content: bytes) -> None:
    path = folder / "audit.jsonl"
    path.write_bytes(content)
    try:
        samples = load_samples([path])
    except InputError as exc:
        note(_refusal(exc))
        return
    for sample in samples:
        assert math.isfinite(sample.t)
        assert sample.kv_usage is None or math.isfinite(sample.kv_usage)
        assert sample.input_tokens is None or isinstance(sample.input_tokens, int)


# -- refused config files through the real CLI ---------------------------------------------------------------
runner = CliRunner()


@fuzz_settings(12)
@given(file=_config_file())
def test_refused_config_files_are_one_line_exit_2_nothing_written(
    folder: Path, file: tuple[str, bytes]
) -> None:
    suffix, content = file
    path = folder / f"cli{suffix}"
    path.write_bytes(content)
    audit = folder / "cli-audit.jsonl"
    try:
        load_config(path, {"audit_log": str(audit)})
        return  # a valid file: the CLI would serve
    except InputError:
        pass
    result = runner.invoke(app, ["gateway", "--config", str(path), "--audit-log", str(audit)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("error: ")
    assert not audit.exists()
    for secret in SECRETS:
        assert secret not in result.output
