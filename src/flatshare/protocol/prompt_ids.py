"""The pieces of flatshare's made-up prompt token ids, shared by every scheme that makes them.

Three schemes build on these: `flatshare.sim.tokens` (seeded streams for simulated requests),
`flatshare.workloads.tokens` (spans of workload prompts sent to real servers) and
`flatshare.serve.tokenizer` (serve-sim's text tokenizer). Ids produced must never change: tests and
saved results depend on them.

- Ids lie in `[FIRST_ID, vocab)`: ids 0..3 are the special tokens of common tokenizers (pad, bos, eos,
  unk), which a made-up prompt must not contain.
- Text splits into pieces with `WORD_PATTERN`, `\\w+|[^\\w\\s]` (runs of word characters, and every other
  non-space character on its own): `"Hello, world!"` -> `["Hello", ",", "world", "!"]`.
- A piece's id is `piece_id(key, vocab)`: `FIRST_ID + blake2b-64(key) % (vocab - FIRST_ID)` (the first
  8 bytes, little-endian). Nothing uses Python's `hash()`, so ids are the same in every process and on
  every machine.
"""

from __future__ import annotations

import hashlib
import re

FIRST_ID = 4
DEFAULT_VOCAB = 32000
WORD_PATTERN = re.compile(r"\w+|[^\w\s]")


def split_words(text: str) -> list[str]:
    """The pieces of `text` (`WORD_PATTERN`); whitespace is dropped."""
    return WORD_PATTERN.findall(text)


def hash64(text: str) -> int:
    """A stable 64-bit hash of `text` (blake2b, 8-byte digest, little-endian)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def piece_id(key: str, vocab: int) -> int:
    """The token id of a piece named `key` in a vocabulary of `vocab` ids (module docstring)."""
    return FIRST_ID + hash64(key) % (vocab - FIRST_ID)


def check_has_ordinary_ids(vocab_size: int) -> None:
    """ValueError unless a vocabulary of `vocab_size` has ids beyond the special ones."""
    if vocab_size <= FIRST_ID:
        raise ValueError(f"vocab_size must exceed {FIRST_ID}")
