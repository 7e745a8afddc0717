"""A call as the caller hears it: each turn's speech, wait and reply, in seconds, from a saved run.

A run folder is a co-location run (`runs/<condition>/c<callers>/s<seed>/`: `requests.jsonl` and
`engine.json`, `flatshare.colocation.runs`) or a replay folder (`requests.jsonl` and `run.json`,
`flatshare.runfiles.run`). Both name the workload (`spec`, `seed`), which is rebuilt to know each voice
request's call, turn and caller speech; the records give what the engine did.

One turn, in the order the caller hears it:

- `caller_s`: the caller speaking. For a call's first turn, the words the caller said (the turn's caller
  span of the prompt) at `VoiceProfile.caller_tokens_per_s`; for later turns the request's `pause_before_s`,
  which the voice workload makes the caller's speech (`flatshare.workloads.synth.voice`).
- `wait_s`: silence from the end of the caller's speech to the reply's first audio, exactly the run's
  measure: `VoicePipeline.turn_latency` (pipeline + engine; a failed or refused turn is `failed_turn_s` of
  silence and no reply).
- `reply_s`: the reply spoken, `output tokens / speech_tokens_per_s` (the session's speech rate, the one
  `Session.issue_s` uses).
- `hold_s`: silence after the reply's audio while the engine still decodes it (end of the reply minus first
  sentence, beyond the spoken time): the caller cannot speak again before the reply is complete, as in
  `Session.issue_s`. Zero whenever decoding keeps ahead of speech.

Calls and turns are numbered from 1 (the seed's "turn 1, then ten"); caller lines from 0, as in the session
id `voice/0`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flatshare.errors import InputError
from flatshare.listen.voice import VoicePipeline
from flatshare.runfiles.files import read_json
from flatshare.runfiles.records import MAX_TOKENS, ReplayRecord, read_records
from flatshare.workloads.model import Session, WorkloadRequest
from flatshare.workloads.scale import check_scale, scale_workload
from flatshare.workloads.synth.voice import VoiceProfile

SEGMENT_KINDS = ("caller", "wait", "reply", "hold")
# The voice generator names each turn's caller span `.../c<call>/t<turn>/caller` (both from 0).
_CALLER_SPAN = re.compile(r"/c(\d+)/t(\d+)/caller$")


@dataclass(frozen=True)
class VoiceRun:
    """A saved run's voice sessions (rebuilt from its spec and seed) and its records by request id."""

    folder: Path
    label: str
    spec: str
    seed: int
    sessions: dict[str, Session]
    records: dict[str, ReplayRecord]


@dataclass(frozen=True)
class TurnTiming:
    """One turn as heard; see the module docstring for each part."""

    turn: int
    request_id: str
    status: str
    caller_s: float
    wait_s: float
    reply_s: float
    hold_s: float
    reply_tokens: int

    @property
    def length_s(self) -> float:
        return self.caller_s + self.wait_s + self.reply_s + self.hold_s


@dataclass(frozen=True)
class Segment:
    """A stretch of the clip: `kind` in SEGMENT_KINDS, times from the clip's start."""

    kind: str
    start_s: float
    end_s: float
    turn: int


@dataclass(frozen=True)
class CallTimeline:
    """The chosen turns of one call, played one after the other."""

    label: str
    caller: int
    call: int
    turns: tuple[TurnTiming, ...]

    @property
    def length_s(self) -> float:
        return sum(t.length_s for t in self.turns)

    def segments(self) -> list[Segment]:
        """Every non-empty stretch in order; each starts where the one before ends."""
        out, now = [], 0.0
        for t in self.turns:
            for kind, seconds in zip(SEGMENT_KINDS, (t.caller_s, t.wait_s, t.reply_s, t.hold_s), strict=True):
                if seconds > 0:
                    out.append(Segment(kind, now, now + seconds, t.turn))
                    now += seconds
        return out


@dataclass(frozen=True)
class TurnRef:
    """One turn of one call: caller line (from 0), call and turn (from 1), and its wait in that run."""

    caller: int
    call: int
    turn: int
    wait_s: float


def load_voice_run(folder: Path) -> VoiceRun:
    """Read a run folder (see the module docstring); InputError naming the folder when it is not one."""
    from flatshare.workloads.spec import parse_spec

    requests = folder / "requests.jsonl"
    if not requests.is_file():
        raise InputError(f"{folder}: not a run folder (no requests.jsonl)")
    spec, seed, max_model_len, label = _run_facts(folder)
    scale, unscaled_len = _scale(folder)
    try:
        workload = parse_spec(spec, seed=seed, max_model_len=unscaled_len or max_model_len)
        workload = scale_workload(workload, scale, max_model_len)
    except (InputError, ValueError, OSError) as exc:
        raise InputError(f"{folder}: cannot rebuild its workload {spec!r} ({exc})") from exc
    sessions = {s.id: s for s in workload.sessions if s.speech_tokens_per_s is not None}
    if not sessions:
        raise InputError(f"{folder}: its workload {spec!r} has no voice calls")
    records = {r.id: r for r in read_records(requests)}
    return VoiceRun(folder, label, spec, seed, sessions, records)


def _scale(folder: Path) -> tuple[float, int | None]:
    """A co-location run's `--scale` and its unscaled max model length (`engine.json`'s `setup`): the
    workload is rebuilt as the run built it (`flatshare.colocation.experiment.build_workload`). (1, None)
    for other runs and for runs that predate scaling."""
    path = folder / "engine.json"
    setup = read_json(path).get("setup") if path.is_file() else None
    if not isinstance(setup, dict) or setup.get("scale", 1.0) == 1.0:
        return 1.0, None
    scale, length = setup.get("scale"), setup.get("max_model_len")
    try:
        check_scale(scale)  # type: ignore[arg-type]
    except ValueError as exc:
        raise InputError(f"{path}: setup.{exc}") from exc
    if isinstance(length, bool) or not isinstance(length, int) or not 2 <= length <= MAX_TOKENS:
        raise InputError(f"{path}: setup.max_model_len must be an integer in [2, {MAX_TOKENS:,}]")
    return float(scale), length  # type: ignore[arg-type]


def _run_facts(folder: Path) -> tuple[str, int, int | None, str]:
    """(spec, seed, max_model_len, label) from `engine.json` (co-location) or `run.json` (replay), read
    within `flatshare.jsonin`'s bounds and checked: `spec` a string, `seed` an integer >= 0,
    `max_model_len` null or an integer in [2, MAX_TOKENS]; InputError naming the file otherwise."""
    if (folder / "engine.json").is_file():
        path = folder / "engine.json"
        facts = read_json(path)
        config = facts.get("engine_config") or {}
        if not isinstance(config, dict):
            raise InputError(f"{path}: engine_config must be a table, got {type(config).__name__}")
        max_model_len = config.get("max_model_len")
        label = folder.parts[-3] if len(folder.parts) >= 3 else folder.name
    elif (folder / "run.json").is_file():
        path = folder / "run.json"
        facts = read_json(path)
        max_model_len = facts.get("max_model_len")
        label = folder.name
    else:
        raise InputError(f"{folder}: not a run folder (no engine.json or run.json beside requests.jsonl)")
    spec, seed = facts.get("spec"), facts.get("seed")
    if not isinstance(spec, str) or isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"{path}: names no workload spec and seed (a string and an integer >= 0)")
    if max_model_len is not None and (
        isinstance(max_model_len, bool)
        or not isinstance(max_model_len, int)
        or not 2 <= max_model_len <= MAX_TOKENS
    ):
        raise InputError(
            f"{path}: max_model_len must be null or an integer in [2, {MAX_TOKENS:,}], got {max_model_len!r}"
        )
    return spec, seed, max_model_len, label


def _call_turn(request: WorkloadRequest) -> tuple[int, int, int] | None:
    """(call, turn, caller tokens said), both from 1, from the request's caller span; None if it has none."""
    for span in reversed(request.prompt):
        match = _CALLER_SPAN.search(getattr(span, "key", ""))
        if match:
            return int(match.group(1)) + 1, int(match.group(2)) + 1, int(getattr(span, "length", 0))
    return None


def call_requests(run: VoiceRun, caller: int, call: int) -> dict[int, tuple[WorkloadRequest, int]]:
    """Turn number -> (request, caller tokens said) for every turn of the call in the workload."""
    session = run.sessions.get(f"voice/{caller}")
    if session is None:
        lines = ", ".join(sorted(run.sessions))
        raise InputError(f"{run.folder}: no caller line {caller} (voice sessions: {lines})")
    out = {}
    for request in session.requests:
        where = _call_turn(request)
        if where is not None and where[0] == call:
            out[where[1]] = (request, where[2])
    if not out:
        raise InputError(f"{run.folder}: caller line {caller} has no call {call}")
    return out


def issued_turns(run: VoiceRun, caller: int, call: int) -> list[int]:
    """The call's turns that the run sent (a run can end inside a call)."""
    return sorted(t for t, (r, _) in call_requests(run, caller, call).items() if r.id in run.records)


def call_timeline(
    run: VoiceRun,
    caller: int,
    call: int,
    turns: Sequence[int] | None = None,
    pipeline: VoicePipeline | None = None,
) -> CallTimeline:
    """The chosen turns (default: every turn the run sent) of one call, as heard."""
    pipeline = pipeline or VoicePipeline()
    requests = call_requests(run, caller, call)
    chosen = list(turns) if turns is not None else issued_turns(run, caller, call)
    if not chosen:
        raise InputError(f"{run.folder}: call {call} of caller line {caller} has no turn in the run")
    speech_rate = run.sessions[f"voice/{caller}"].speech_tokens_per_s
    assert speech_rate is not None  # voice sessions only
    timings = []
    for turn in chosen:
        if turn not in requests:
            raise InputError(f"{run.folder}: call {call} has turns 1-{max(requests)}, not {turn}")
        request, said = requests[turn]
        record = run.records.get(request.id)
        if record is None:
            raise InputError(
                f"{run.folder}: call {call} turn {turn} ({request.id}) was not sent (the run ended)"
            )
        caller_s = said / VoiceProfile.caller_tokens_per_s if turn == 1 else request.pause_before_s
        timings.append(_turn_timing(turn, record, caller_s, speech_rate, pipeline))
    return CallTimeline(run.label, caller, call, tuple(timings))


def _turn_timing(
    turn: int, record: ReplayRecord, caller_s: float, speech_rate: float, pipeline: VoicePipeline
) -> TurnTiming:
    wait = pipeline.turn_latency(record)
    first_sentence, end = record.first_sentence_s, record.end_s
    if record.status != "ok" or first_sentence is None or end is None:
        return TurnTiming(turn, record.id, record.status, caller_s, wait, 0.0, 0.0, 0)
    tokens = len(record.token_times_s)
    reply = tokens / speech_rate
    hold = max(0.0, end - first_sentence - reply)
    return TurnTiming(turn, record.id, record.status, caller_s, wait, reply, hold, tokens)


def worst_turn(run: VoiceRun, pipeline: VoicePipeline | None = None) -> TurnRef:
    """The run's voice turn with the longest wait (the first of equals in request order)."""
    pipeline = pipeline or VoicePipeline()
    best: TurnRef | None = None
    for session_id, session in sorted(run.sessions.items()):
        caller = int(session_id.rsplit("/", 1)[1])
        for request in session.requests:
            record, where = run.records.get(request.id), _call_turn(request)
            if record is None or where is None:
                continue
            wait = pipeline.turn_latency(record)
            if best is None or wait > best.wait_s:
                best = TurnRef(caller, where[0], where[1], wait)
    if best is None:
        raise InputError(f"{run.folder}: no voice turn was sent")
    return best
