"""The simulated server's tokenizer: text to stable token ids, and output tokens to words.

Encoding splits text into pieces with the regex `\\w+|[^\\w\\s]` (runs of word characters, and every
other non-space character on its own); each piece becomes the id
`4 + int.from_bytes(blake2b(f"{seed}:{piece}")[:8]) % (vocab_size - 4)`. Whitespace is dropped, so
`"a b"` and `"a  b"` give the same ids. The same text always gives the same ids (across processes and
machines), so vLLM's prefix cache sees repeated prefixes as a real tokenizer would let it.

Output text: output token k of a request is the word `words[hash(k)]` from a small deterministic
vocabulary, preceded by a space, so a completion of n tokens is n words.
"""

from __future__ import annotations

import hashlib
import re

from flatshare.sim.tokens import FIRST_ORDINARY_ID

_PIECE = re.compile(r"\w+|[^\w\s]")
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u")


def _vocabulary() -> tuple[str, ...]:
    syllables = [onset + vowel for onset in _ONSETS for vowel in _VOWELS]
    return tuple(a + b for a in syllables[:16] for b in syllables[16:32])


WORDS = _vocabulary()


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


class SimTokenizer:
    """Deterministic text <-> token ids for the simulated server (see the module docstring)."""

    def __init__(self, seed: int = 0, vocab_size: int = 32000) -> None:
        if vocab_size <= FIRST_ORDINARY_ID:
            raise ValueError(f"vocab_size must exceed {FIRST_ORDINARY_ID}")
        self.seed = seed
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`: one id per word or punctuation piece."""
        span = self.vocab_size - FIRST_ORDINARY_ID
        return [FIRST_ORDINARY_ID + _hash64(f"{self.seed}:{piece}") % span for piece in _PIECE.findall(text)]

    def output_text(self, start: int, count: int) -> str:
        """Text of output tokens `start .. start + count - 1` of a request."""
        return "".join(
            " " + WORDS[_hash64(f"{self.seed}:out:{k}") % len(WORDS)] for k in range(start, start + count)
        )
