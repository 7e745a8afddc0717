"""Deterministic prompt token ids that let vLLM's prefix cache see what the workload shares.

A prompt is kept compact, as a tuple of spans, and turned into token ids only when it is sent:

- `Span(key, length)`: `length` pseudo-random ids drawn from `key` with SHAKE-128. Equal keys give equal ids,
  and a shorter span of a key is a prefix of a longer one. Keys are namespaced strings (`hash/...`,
  `group/...`, `unique/...`) so two kinds of text never collide.
- `TextSpan(text)`: one id per piece of the simple tokenizer (`split_words`), each id a hash of the piece, so
  equal texts give equal ids and equal words give equal ids.

Ids lie in `[FIRST_ID, vocab)` and text pieces hash as `flatshare.protocol.prompt_ids` says (ids 0..3 are the
special tokens of common tokenizers; no Python `hash()`, so ids are the same in every process and machine).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from flatshare.protocol.prompt_ids import DEFAULT_VOCAB as DEFAULT_VOCAB
from flatshare.protocol.prompt_ids import FIRST_ID as FIRST_ID
from flatshare.protocol.prompt_ids import piece_id
from flatshare.protocol.prompt_ids import split_words as split_words

MIN_VOCAB = 16


def check_vocab(vocab: int) -> int:
    """Return `vocab` if it is a usable vocabulary size (an int >= MIN_VOCAB), else raise ValueError."""
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < MIN_VOCAB:
        raise ValueError(f"vocab size must be an integer >= {MIN_VOCAB}, got {vocab!r}")
    return vocab


@dataclass(frozen=True)
class Span:
    """`length` tokens of the text named `key`. Equal keys give equal ids; a shorter span is a prefix."""

    key: str
    length: int

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("span key must not be empty")
        if isinstance(self.length, bool) or not isinstance(self.length, int) or self.length < 0:
            raise ValueError(f"span length must be a non-negative integer, got {self.length!r}")

    def ids(self, vocab: int = DEFAULT_VOCAB) -> np.ndarray:
        """The span's token ids, as int64, in `[FIRST_ID, vocab)`."""
        check_vocab(vocab)
        width, dtype = (2, "<u2") if vocab <= 1 << 16 else (4, "<u4")
        raw = hashlib.shake_128(self.key.encode()).digest(width * self.length)
        values = np.frombuffer(raw, dtype=dtype).astype(np.int64)
        return FIRST_ID + values % (vocab - FIRST_ID)

    def head(self, n: int) -> Span:
        """The first `n` tokens of this span (same key, so the same ids)."""
        return Span(self.key, min(n, self.length))


@dataclass(frozen=True)
class TextSpan:
    """Real text: one token per `split_words` piece, each id a hash of the piece."""

    text: str
    length: int = field(init=False)
    limit: int | None = None

    def __post_init__(self) -> None:
        n = len(split_words(self.text))
        if self.limit is not None:
            if self.limit < 0:
                raise ValueError(f"text span limit must be >= 0, got {self.limit}")
            n = min(n, self.limit)
        object.__setattr__(self, "length", n)

    def ids(self, vocab: int = DEFAULT_VOCAB) -> np.ndarray:
        """The ids of the first `length` pieces, as int64, in `[FIRST_ID, vocab)`."""
        check_vocab(vocab)
        pieces = split_words(self.text)[: self.length]
        return np.array([piece_id(p, vocab) for p in pieces], dtype=np.int64)

    def head(self, n: int) -> TextSpan:
        """The first `n` pieces of this text."""
        return TextSpan(self.text, limit=min(n, self.length))


PromptSpan = Span | TextSpan


def prompt_length(spans: Iterable[PromptSpan]) -> int:
    """Number of tokens in a prompt made of `spans`."""
    return sum(s.length for s in spans)


def prompt_ids(spans: Sequence[PromptSpan], vocab: int = DEFAULT_VOCAB) -> tuple[int, ...]:
    """The token ids of a prompt made of `spans`, in order."""
    parts = [s.ids(vocab) for s in spans if s.length]
    if not parts:
        return ()
    return tuple(np.concatenate(parts).tolist())


def head_spans(spans: Sequence[PromptSpan], n: int) -> tuple[PromptSpan, ...]:
    """The spans of the first `n` tokens of a prompt (the rule that keeps cached prefixes intact)."""
    kept: list[PromptSpan] = []
    left = n
    for span in spans:
        if left <= 0:
            break
        kept.append(span if span.length <= left else span.head(left))
        left -= span.length
    return tuple(kept)


def hash_block_spans(
    hash_ids: Sequence[int],
    block_tokens: int,
    total_tokens: int,
    namespace: str = "hash",
    tail_key: str | None = None,
) -> tuple[Span, ...]:
    """Spans for a prompt of `total_tokens` whose blocks of `block_tokens` are named by `hash_ids`.

    Block i gets the key `hash/{namespace}/{hash_ids[i]}`, so equal hash ids give equal token blocks. Blocks
    past `total_tokens` are dropped and the last kept block is cut to fit. Tokens past the last block (traces
    that only hash full blocks) come from `tail_key` (default: the namespace and the last hash id).
    """
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
    if total_tokens < 0:
        raise ValueError(f"total_tokens must be >= 0, got {total_tokens}")
    spans: list[Span] = []
    left = total_tokens
    for hid in hash_ids:
        if left <= 0:
            break
        take = min(block_tokens, left)
        spans.append(Span(f"hash/{namespace}/{hid}", take))
        left -= take
    if left > 0:
        last = hash_ids[-1] if len(hash_ids) else "none"
        spans.append(Span(tail_key or f"tail/{namespace}/{last}", left))
    return tuple(spans)


def ids_from_hash_ids(
    hash_ids: Sequence[int],
    block_tokens: int,
    total_tokens: int,
    vocab: int = DEFAULT_VOCAB,
    namespace: str = "hash",
) -> tuple[int, ...]:
    """Token ids for per-block hash ids: equal hash ids -> equal blocks; see `hash_block_spans`."""
    return prompt_ids(hash_block_spans(hash_ids, block_tokens, total_tokens, namespace), vocab)


def prefix_group_span(group: str, n: int) -> Span:
    """`n` tokens of the text shared by everything in `group` (a system prompt, say)."""
    return Span(f"group/{group}", n)


def unique_span(key: str, n: int) -> Span:
    """`n` tokens of text that nothing else shares (unless it uses the same `key`)."""
    return Span(f"unique/{key}", n)


def ids_for_prefix_group(group: str, n: int, vocab: int = DEFAULT_VOCAB) -> tuple[int, ...]:
    """Token ids of `prefix_group_span(group, n)`."""
    return prompt_ids([prefix_group_span(group, n)], vocab)


def unique_ids(key: str, n: int, vocab: int = DEFAULT_VOCAB) -> tuple[int, ...]:
    """Token ids of `unique_span(key, n)`."""
    return prompt_ids([unique_span(key, n)], vocab)
