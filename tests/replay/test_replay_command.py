"""`flatshare replay` without a server: bad input gives InputError, and an endpoint with nothing
listening gives a complete record file of failed requests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flatshare.errors import InputError
from flatshare.replay.command import replay_command
from flatshare.runfiles.records import RECORD_VERSION
from flatshare.testing.vllm_server import free_port
from flatshare.workloads.spec import parse_spec
from kit.replay import checked_records

SPEC = "long-short:long=500,shorts=3,jitter=0.2"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "--endpoint URL"),
        ({"endpoints": ["http://127.0.0.1:9"], "sim": True}, "not both"),
        ({"endpoints": ["127.0.0.1:9"]}, "base URL"),
        ({"endpoints": ["http://127.0.0.1:9"], "duration": -1.0}, "--duration"),
        ({"endpoints": ["http://127.0.0.1:9"], "max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_bad_arguments_raise_input_error(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        replay_command(SPEC, tmp_path / "out", show_progress=False, **kwargs)  # type: ignore[arg-type]


def test_a_bad_spec_or_trace_file_raises_input_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(InputError, match="unknown workload 'voices'"):
        replay_command("voices:callers=2", tmp_path / "a", endpoints=[url], show_progress=False)
    with pytest.raises(InputError, match=r"no-such\.json"):
        replay_command(f"weka:{tmp_path}/no-such.json", tmp_path / "b", endpoints=[url], show_progress=False)


def test_an_out_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        replay_command(SPEC, tmp_path / "file", endpoints=["http://127.0.0.1:9"], show_progress=False)


def test_an_endpoint_with_nothing_listening_fails_every_request_and_loses_none(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    summary = replay_command(SPEC, tmp_path, endpoints=[url], max_model_len=4096, show_progress=False)
    rows = checked_records(tmp_path / "requests.jsonl")
    expected = {r.id for r in parse_spec(SPEC, 0, max_model_len=4096).requests()}
    assert {row["id"] for row in rows} == expected
    assert all(row["status"] == "failed" and "ConnectError" in row["error"] for row in rows)
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["endpoints"][0]["error"] and run["endpoints"][0]["model"] is None
    assert run["statuses"] == {"failed": len(expected)} and summary.run == run
    assert run["driver"] == "wallclock" and run["record_version"] == RECORD_VERSION and not run["interrupted"]
    assert (tmp_path / "samples.jsonl").read_text() == ""


def test_the_wall_clock_command_does_not_import_vllm() -> None:
    code = (
        "import sys\n"
        "import flatshare.replay.command\n"
        "assert 'vllm' not in sys.modules and 'torch' not in sys.modules, 'vllm imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
