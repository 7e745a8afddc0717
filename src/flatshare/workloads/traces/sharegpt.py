"""ShareGPT conversations (the usual JSON layout; users bring their own file).

File format: a JSON list of `{"id": ..., "conversations": [{"from": "human" | "gpt", "value": text}, ...]}`.
`from` may also be `user`, `assistant`, `chatgpt`, `bing` or `system`. Token counts and ids come from the
simple tokenizer of `flatshare.workloads.tokens` (word and punctuation pieces; one hashed id per piece), so
the same text always gives the same ids and a conversation's turns share their prefix.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from flatshare.errors import InputError
from flatshare.workloads.model import Session, Workload, WorkloadRequest
from flatshare.workloads.tokens import PromptSpan, TextSpan
from flatshare.workloads.traces.options import TraceOptions, bad, check_path, make_request

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant"}
ROLES |= {"assistant": "assistant", "system": "system"}
Turn = tuple[str, str]


def read_conversations(path: Path | str) -> list[tuple[str, list[Turn]]]:
    """`(id, [(role, text), ...])` for every conversation, roles normalized to user/assistant/system."""
    p = check_path(path)
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise bad(p, f"line {e.lineno}", "(file)", f"not valid JSON: {e.msg}") from None
    if not isinstance(data, list):
        raise bad(p, "top level", "(file)", "expected a JSON list of conversations")
    conversations = [_conversation(p, i, item) for i, item in enumerate(data)]
    seen: set[str] = set()
    for i, (cid, _) in enumerate(conversations):
        if cid in seen:
            raise bad(p, f"conversation {i}", "id", f"duplicate id {cid!r}")
        seen.add(cid)
    return conversations


def _conversation(path: Path, i: int, item: object) -> tuple[str, list[Turn]]:
    where = f"conversation {i}"
    if not isinstance(item, dict):
        raise bad(path, where, "(record)", "expected a JSON object")
    turns = item.get("conversations")
    if not isinstance(turns, list):
        raise bad(path, where, "conversations", "expected a list of turns")
    out: list[Turn] = []
    for j, turn in enumerate(turns):
        here = f"{where}, turn {j}"
        if not isinstance(turn, dict):
            raise bad(path, here, "(turn)", "expected a JSON object")
        role = turn.get("from")
        if role not in ROLES:
            raise bad(path, here, "from", f"expected one of {sorted(ROLES)}, got {role!r}")
        value = turn.get("value")
        if not isinstance(value, str):
            raise bad(path, here, "value", f"expected a string, got {type(value).__name__}")
        out.append((ROLES[str(role)], value))
    return str(item.get("id", i)), out


def _requests_of(turns: list[Turn], multi_turn: bool) -> list[tuple[tuple[PromptSpan, ...], int, str]]:
    """`(prompt spans, reply tokens, prompt text)` for each user turn answered by the assistant."""
    history: list[PromptSpan] = []
    texts: list[str] = []
    found: list[tuple[tuple[PromptSpan, ...], int, str]] = []
    for k, (role, text) in enumerate(turns):
        line = f"{role}: {text}\n"
        if role == "assistant" and k > 0 and turns[k - 1][0] == "user":
            found.append((tuple(history), max(1, TextSpan(text).length), "".join(texts)))
            if not multi_turn:
                break
        history.append(TextSpan(line))
        texts.append(line)
    return found


def load_sharegpt(
    path: Path | str,
    options: TraceOptions | None = None,
    *,
    seed: int = 0,
    conversations_per_s: float = 1.0,
    think_s: float = 5.0,
    multi_turn: bool = True,
    max_conversations: int | None = None,
    cls: str = "chat",
) -> Workload:
    """Conversations as sessions: each user turn answered in the file becomes a request.

    The prompt is the conversation so far (`"role: text"` lines); `max_tokens` is the answer's piece count.
    Conversations start as a Poisson process of `conversations_per_s` (drawn with `seed`); a user waits an
    exponential pause of mean `think_s` after each reply. `multi_turn=False` keeps only the first exchange.
    Conversations with no answered user turn are skipped. `options`: window on conversation starts, `rate`
    multiplies arrivals (and divides pauses), `max_model_len` keeps the first prompt tokens.
    """
    if not conversations_per_s > 0 or think_s < 0:
        raise InputError("sharegpt: conversations_per_s must be > 0 and think_s >= 0")
    p = check_path(path)
    opts = options or TraceOptions()
    rng = np.random.default_rng(seed)
    sessions: list[Session] = []
    start = 0.0
    for cid, turns in read_conversations(p)[:max_conversations]:
        exchanges = _requests_of(turns, multi_turn)
        if not exchanges:
            continue
        start += float(rng.exponential(1.0 / conversations_per_s))
        pauses = rng.exponential(think_s, size=len(exchanges)) if think_s > 0 else np.zeros(len(exchanges))
        if opts.in_window(start):
            sessions.append(_session(f"{p.stem}/{cid}", exchanges, start, pauses, cls, opts))
        if opts.limit is not None and len(sessions) >= opts.limit:
            break
    if not sessions:
        raise InputError(f"{p}: no answered user turns in the chosen window")
    return Workload(f"sharegpt-{p.stem}", tuple(sessions), seed)


def _session(
    sid: str,
    exchanges: list[tuple[tuple[PromptSpan, ...], int, str]],
    start: float,
    pauses: np.ndarray,
    cls: str,
    opts: TraceOptions,
) -> Session:
    begin = opts.scaled(start)
    requests: list[WorkloadRequest] = []
    arrival = begin
    for k, (prompt, reply, text) in enumerate(exchanges):
        pause = begin if k == 0 else float(pauses[k]) / opts.rate
        arrival = begin if k == 0 else arrival + pause
        requests.append(
            make_request(
                id=f"{sid}/{k}",
                session_id=sid,
                cls=cls,
                options=opts,
                prompt=prompt,
                max_tokens=reply,
                pause_before_s=pause,
                arrival_s=arrival,
                text=text,
            )
        )
    return Session(sid, cls, begin, tuple(requests))
