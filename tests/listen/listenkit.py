"""Small saved runs of a voice workload for the listen tests, written by the replay's own run-folder writer,
and the measures a listener would take of a wav (silences, length)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flatshare.listen.speech import missing_tools
from flatshare.runfiles.records import ReplayRecord
from flatshare.runfiles.run import write_replay_run
from flatshare.workloads.spec import parse_spec

SPEC = "voice:callers=1,duration=80,turns=4"
TOKEN_GAP_S = 0.03
QUIET = 0.002  # below -54 dBFS: silence to the measure (speech clips start and end above -40 dBFS)

needs_speech = pytest.mark.skipif(
    bool(missing_tools()),
    reason=f"{' and '.join(missing_tools())} not installed: `make system-deps` installs them (apt-get, as root)",
)


def saved_run(
    folder: Path,
    ttft_s: dict[int, float],
    *,
    seed: int = 0,
    token_gap_s: float = TOKEN_GAP_S,
    failed: frozenset[int] = frozenset(),
) -> Path:
    """Every request of caller line 0 sent as `Session.issue_s` says, request k's first token `ttft_s[k]`
    (default 0.1 s) after it is sent, then one token every `token_gap_s`; requests in `failed` fail with no
    tokens. Written with `flatshare.runfiles.run.write_replay_run`."""
    session = parse_spec(SPEC, seed=seed).sessions[0]
    records: list[ReplayRecord] = []
    done, tokens, first_sentence = 0.0, 0, None
    for k, request in enumerate(session.requests):
        send = session.issue_s(k, done, tokens, first_sentence)
        base = dict(
            id=request.id,
            session_id=session.id,
            cls="voice",
            priority=request.priority,
            prompt_tokens=request.prompt_tokens,
            max_tokens=request.max_tokens,
            engine="sim0",
            send_s=send,
            first_sentence_tokens=request.first_sentence_tokens,
        )
        if k in failed:
            record = ReplayRecord(**base, status="failed", error="refused", end_s=send + 0.5)  # type: ignore[arg-type]
        else:
            first = send + ttft_s.get(k, 0.1)
            times = [first + token_gap_s * i for i in range(request.max_tokens)]
            record = ReplayRecord(**base, token_times_s=times, end_s=times[-1], finish_reason="length")  # type: ignore[arg-type]
        records.append(record)
        done = record.end_s or send
        tokens, first_sentence = len(record.token_times_s), record.first_sentence_s
    write_replay_run(
        folder, records, [], {"spec": SPEC, "seed": seed, "max_model_len": None, "driver": "virtual"}
    )
    return folder


def silences(samples: np.ndarray, rate: int, min_s: float) -> list[tuple[float, float]]:
    """(start s, length s) of every stretch quieter than QUIET lasting at least `min_s`."""
    quiet = np.concatenate(([False], np.abs(samples) < QUIET, [False]))
    edges = np.flatnonzero(np.diff(quiet.astype(np.int8)))
    starts, ends = edges[::2], edges[1::2]
    return [(s / rate, (e - s) / rate) for s, e in zip(starts, ends, strict=True) if (e - s) / rate >= min_s]
