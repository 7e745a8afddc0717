"""`flatshare sim`'s file readers fuzzed (issue 16): the request file (`load_requests`) and a step-time
profile file (`load_profile`), in-process with hypothesis, then a few of the refused files through the
real CLI. Each reader returns a valid object or raises `InputError` (the CLI's "one line, exit 2"), with a
one-line message; never another exception, never a hang (inputs are bounded; the readers check sizes
before they build anything).

Bounded for `make test` (fixed examples, `kit.fuzz`); `FLATSHARE_FUZZ=long` (`make fuzz`) runs 20x more."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.errors import InputError
from flatshare.sim.profile import LIMITS, StepTimeProfile, load_profile
from flatshare.sim.requests import MAX_ARRIVAL_S, SimRequest, load_requests
from kit.files import plant, untouched
from kit.fuzz import fuzz_settings, odd_json, planted

pytestmark = pytest.mark.fuzz

MAX_MODEL_LEN = 4096
GOOD_REQUEST = {"id": "a", "arrival_s": 0.5, "prompt_tokens": 10, "max_tokens": 4, "priority": 0}
REQUEST_FIELDS = (*GOOD_REQUEST, "prompt_token_ids", "prefix_group", "cls", "unknown")
SHIPPED = load_profile().to_dict()


def _mutated_object(base: dict[str, object], names: tuple[str, ...]) -> st.SearchStrategy[str]:
    """`base` as JSON text with up to three fields replaced by odd JSON (or dropped)."""
    change = st.tuples(st.sampled_from(names), st.one_of(odd_json(), st.just("")))

    def render(changes: list[tuple[str, str]]) -> str:
        fields = {k: json.dumps(v) for k, v in base.items()}
        for name, value in changes:
            if value:
                fields[name] = value
            else:
                fields.pop(name, None)
        return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in fields.items()) + "}"

    return st.lists(change, max_size=3).map(render)


def _request_file() -> st.SearchStrategy[bytes]:
    line = st.one_of(_mutated_object(GOOD_REQUEST, REQUEST_FIELDS), odd_json(), st.just(""))
    lines = st.lists(line, min_size=1, max_size=4).map(lambda xs: "\n".join(xs).encode())
    return st.one_of(lines, lines.map(lambda b: b"\xef\xbb\xbf" + b), st.binary(max_size=512))


def _profile_file() -> st.SearchStrategy[bytes]:
    names = (*SHIPPED, "unknown")
    body = _mutated_object(SHIPPED, names).map(str.encode)
    return st.one_of(body, odd_json().map(str.encode), st.binary(max_size=256))


def _check_request(request: SimRequest) -> None:
    assert isinstance(request.id, str) and request.id
    assert math.isfinite(request.arrival_s) and 0 <= request.arrival_s <= MAX_ARRIVAL_S
    assert isinstance(request.max_tokens, int) and request.max_tokens >= 1
    assert isinstance(request.priority, int) and abs(request.priority) < 10**20
    assert 1 <= request.prompt_tokens <= MAX_MODEL_LEN - request.max_tokens
    assert all(isinstance(i, int) and i >= 0 for i in request.prompt_token_ids)
    assert isinstance(request.cls, str)


def _check_profile(profile: StepTimeProfile) -> None:
    for name, most in LIMITS.items():
        value = getattr(profile, name)
        assert math.isfinite(value) and 0 <= value <= most, name
    assert profile.step_fixed_s > 0 and profile.cpu_load_bytes_per_s > 0
    assert isinstance(profile.name, str) and all(isinstance(s, str) for s in profile.sources)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sim-fuzz")


def _refusal(exc: InputError) -> str:
    message = str(exc)
    assert message and "\n" not in message, repr(message)  # the CLI prints it as one line
    return message


@fuzz_settings(300)
@given(content=_request_file())
def test_request_file_reader(folder: Path, content: bytes) -> None:
    path = folder / "requests.jsonl"
    path.write_bytes(content)
    try:
        requests = load_requests(path, MAX_MODEL_LEN)
    except InputError as exc:
        note(_refusal(exc))
        return
    assert requests and len({r.id for r in requests}) == len(requests)
    assert [r.arrival_s for r in requests] == sorted(r.arrival_s for r in requests)
    for request in requests:
        _check_request(request)


@fuzz_settings(300)
@given(content=_profile_file())
def test_profile_file_reader(folder: Path, content: bytes) -> None:
    path = folder / "profile.json"
    path.write_bytes(content)
    try:
        profile = load_profile(str(path))
    except InputError as exc:
        note(_refusal(exc))
        return
    _check_profile(profile)


# -- refused files through the real CLI ------------------------------------------------------------------------
runner = CliRunner()
GOOD_LINE = json.dumps(GOOD_REQUEST).encode() + b"\n"


def _refused_by(reader: str, path: Path) -> bool:
    try:
        if reader == "requests":
            load_requests(path, 32768)
        else:
            load_profile(str(path))
    except InputError:
        return True
    return False


@fuzz_settings(12)
@given(reader=st.sampled_from(["requests", "profile"]), content=st.data())
def test_refused_files_are_one_line_exit_2_nothing_written(
    folder: Path, reader: str, content: st.DataObject
) -> None:
    strategy = _request_file() if reader == "requests" else _profile_file()
    data = content.draw(strategy.filter(lambda b: b.strip() != b""), label="file")
    requests, profile = folder / "cli-requests.jsonl", folder / "cli-profile.json"
    requests.write_bytes(data if reader == "requests" else GOOD_LINE)
    profile.write_bytes(data if reader == "profile" else json.dumps(SHIPPED).encode())
    if not _refused_by(reader, requests if reader == "requests" else profile):
        return  # a valid file: the CLI would run a simulation
    out = folder / "cli-out"
    args = ["sim", "--requests", str(requests), "--out", str(out), "--profile", str(profile)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("error: ")
    assert not out.exists()


# -- planted symlinks (issue 32) ------------------------------------------------------------------------------
SIM_OUTPUTS = ("requests.jsonl", "samples.jsonl", "summary.json")


@fuzz_settings(3)
@given(names=planted(SIM_OUTPUTS), valid=st.booleans())
def test_outputs_never_go_through_planted_symlinks(folder: Path, names: list[str], valid: bool) -> None:
    """A symlink planted at an output name (to a file outside) is replaced by a run and left by a refusal;
    the file it points at is never written."""
    root = folder / f"planted-{uuid.uuid4().hex}"
    requests = root / "requests.jsonl"
    requests.parent.mkdir(parents=True)
    requests.write_bytes(GOOD_LINE if valid else b'{"id": 1}\n')
    out = root / "out"
    victims = [plant(out / name, root / "outside" / f"{name}.txt") for name in names]
    result = runner.invoke(app, ["sim", "--requests", str(requests), "--out", str(out)])
    assert result.exit_code == (0 if valid else 2), result.output
    for link in victims:
        untouched(link.resolve() if link.is_symlink() else root / "outside" / f"{link.name}.txt")
        assert link.is_symlink() != valid
