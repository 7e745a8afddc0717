from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from flatshare.testing.vllm_server import VllmServer, VllmServerConfig, VllmServerError

METRICS = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_preemptions_total")


def test_command_carries_the_flags() -> None:
    config = VllmServerConfig(
        model=Path("/m"),
        scheduling_policy="priority",
        scheduler_cls="pkg.Sched",
        additional_config={"flatshare": {"a": 1}},
        extra_args=("--seed", "7"),
    )
    command = config.command(port=8123)

    def flag(name: str) -> str:
        return command[command.index(name) + 1]

    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert flag("--port") == "8123"
    assert flag("--scheduling-policy") == "priority"
    assert flag("--scheduler-cls") == "pkg.Sched"
    assert flag("--additional-config") == '{"flatshare": {"a": 1}}'
    assert "--enforce-eager" in command
    assert command[-2:] == ["--seed", "7"]


def test_environment_keeps_the_kv_cache_small() -> None:
    env = VllmServerConfig(model=Path("/m"), extra_env={"X_FLAG": "1"}).environment()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["HF_HUB_OFFLINE"] == env["X_FLAG"] == "1"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"block_size": 16}, "multiple of 32"),
        ({"num_gpu_blocks": 32, "max_model_len": 1024}, "exceeds the KV cache"),
        ({"max_num_seqs": 0}, "positive"),
        ({"scheduling_policy": "lifo"}, "fcfs or priority"),
    ],
)
def test_config_rejects_what_vllm_cannot_start(changes: dict[str, object], message: str) -> None:
    with pytest.raises(VllmServerError, match=message):
        VllmServerConfig(model=Path("/m"), **changes)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def server(tiny_vllm: VllmServer) -> VllmServer:
    """The session's shared server (tests/kit/shared_vllm.py): a priority server on the tiny model."""
    return tiny_vllm


@pytest.fixture
def client(server: VllmServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60.0) as http:
        yield http


def _complete(client: httpx.Client, **body: object) -> dict[str, object]:
    response = client.post("/v1/completions", json={"model": "tiny", "max_tokens": 5, **body})
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.mark.server
def test_the_server_has_its_own_group_in_the_callers_session(server: VllmServer) -> None:
    """Its own process group (stopped whole), but not a new session: under Linux's autogroup scheduling a
    new session is a CPU group of its own, where `engine_niceness` cannot make room for the client."""
    assert os.getpgid(server.pid) == server.pid
    assert os.getsid(server.pid) == os.getsid(0)
    autogroup = Path("/proc/self/autogroup")
    if autogroup.exists():  # "/autogroup-N nice K": the same CPU group as this process
        assert Path(f"/proc/{server.pid}/autogroup").read_text() == autogroup.read_text()


@pytest.mark.server
def test_server_is_healthy_and_logs(server: VllmServer, client: httpx.Client) -> None:
    assert server.running()
    assert server.startup_s is not None and server.startup_s < server.config.startup_timeout_s
    assert client.get("/health").status_code == 200
    assert server.log_path.is_file()


@pytest.mark.server
def test_completion_from_token_ids(client: httpx.Client) -> None:
    usage = _complete(client, prompt=[1, 2, 3], ignore_eos=True)["usage"]
    assert usage == {**usage, "prompt_tokens": 3, "completion_tokens": 5}  # type: ignore[dict-item]


@pytest.mark.server
def test_completion_from_text(client: httpx.Client, tiny_model: Path) -> None:
    import transformers

    prompt = "the cat reads a long letter"
    expected = len(transformers.AutoTokenizer.from_pretrained(tiny_model)(prompt)["input_ids"])
    body = _complete(client, prompt=prompt, ignore_eos=True)
    assert body["usage"]["prompt_tokens"] == expected  # type: ignore[index]
    assert isinstance(body["choices"][0]["text"], str)  # type: ignore[index]


@pytest.mark.server
@pytest.mark.parametrize("priority", [-5, 0, 7])
def test_priority_field_is_accepted(client: httpx.Client, priority: int) -> None:
    assert _complete(client, prompt=[5, 6, 7, 8], priority=priority)["choices"]


@pytest.mark.server
def test_tokenize_matches_the_tokenizer(client: httpx.Client, tiny_model: Path) -> None:
    import transformers

    prompt = "my friend opens the small box"
    response = client.post("/tokenize", json={"model": "tiny", "prompt": prompt})
    assert response.status_code == 200, response.text
    expected = transformers.AutoTokenizer.from_pretrained(tiny_model)(prompt)["input_ids"]
    assert response.json()["tokens"] == expected


@pytest.mark.server
def test_metrics_expose_what_a_router_reads(client: httpx.Client) -> None:
    _complete(client, prompt=[1, 2, 3])
    text = client.get("/metrics").text
    for name in METRICS:
        assert f"{name}{{" in text, name
    assert 'block_size="32"' in text


@pytest.mark.server
def test_a_server_that_cannot_start_reports_its_log(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    config = VllmServerConfig(model=tmp_path / "no-such-model", startup_timeout_s=120.0)
    handle = VllmServer(config, log_dir=tmp_path)
    with pytest.raises(VllmServerError, match="exited with code") as caught:
        handle.start()
    assert str(handle.log_path) in str(caught.value)
    assert not handle.running()


@pytest.mark.parametrize("exits", [False, True])
def test_an_error_inside_the_block_carries_the_servers_state_and_log(tmp_path: Path, exits: bool) -> None:
    handle = VllmServer(VllmServerConfig(model=tmp_path), log_dir=tmp_path)
    handle.log_path.write_text("INFO engine started\nERROR EngineCore died\n")
    # A stand-in process (the note reads only its exit code and the log); `stop()` ends its group.
    script = "raise SystemExit(3)" if exits else "import time; time.sleep(60)"
    handle._process = subprocess.Popen([sys.executable, "-c", script], process_group=0)
    if exits:
        handle._process.wait(timeout=30)
    error = RuntimeError("calibration failed: ReadError")
    handle.__exit__(RuntimeError, error, None)  # what `with handle:` does when its block raises
    note = "\n".join(getattr(error, "__notes__", []))
    assert ("had exited with code 3" if exits else "still running") in note
    assert "ERROR EngineCore died" in note and str(handle.log_path) in note
    assert not handle.running()


def test_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    """`stop()` signals the server's process group: a child that the leader started (as vLLM's API server
    starts its engine core and workers) is gone too. A stand-in leader, so no vLLM is needed."""
    handle = VllmServer(VllmServerConfig(model=tmp_path), log_dir=tmp_path)
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])"
    handle._process = subprocess.Popen(
        [sys.executable, "-c", f"{child}; print('started', flush=True); time.sleep(60)"],
        process_group=0,
        stdout=subprocess.PIPE,
    )
    assert handle._process.stdout is not None and handle._process.stdout.readline() == b"started\n"
    assert len(psutil.Process(handle.pid).children()) == 1
    handle.stop(timeout_s=10.0)
    assert not handle.running()
    with pytest.raises(ProcessLookupError):  # the whole process group is gone
        os.killpg(handle.pid, 0)
