"""The simulated server's tokenizer: text to stable token ids, and output tokens to words.

Encoding splits text into pieces with `flatshare.protocol.prompt_ids.split_words` (runs of word characters,
and every other non-space character on its own); each piece becomes the id
`piece_id(f"{seed}:{piece}", vocab_size)`, that is `4 + blake2b-64(f"{seed}:{piece}") % (vocab_size - 4)`
(ids 0-3 are special). Whitespace is dropped, so
`"a b"` and `"a  b"` give the same ids. The same text always gives the same ids (across processes and
machines), so vLLM's prefix cache sees repeated prefixes as a real tokenizer would let it.

Output text: output token k of a request is the word `words[hash(k)]` from a small deterministic
vocabulary, preceded by a space, so a completion of n tokens is n words.
"""

from __future__ import annotations

from flatshare.protocol.prompt_ids import DEFAULT_VOCAB, check_has_ordinary_ids, hash64, piece_id, split_words

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u")


def _vocabulary() -> tuple[str, ...]:
    syllables = [onset + vowel for onset in _ONSETS for vowel in _VOWELS]
    return tuple(a + b for a in syllables[:16] for b in syllables[16:32])


WORDS = _vocabulary()


class SimTokenizer:
    """Deterministic text <-> token ids for the simulated server (see the module docstring)."""

    def __init__(self, seed: int = 0, vocab_size: int = DEFAULT_VOCAB) -> None:
        check_has_ordinary_ids(vocab_size)
        self.seed = seed
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`: one id per word or punctuation piece."""
        return [piece_id(f"{self.seed}:{piece}", self.vocab_size) for piece in split_words(text)]

    def output_text(self, start: int, count: int) -> str:
        """Text of output tokens `start .. start + count - 1` of a request."""
        return "".join(
            " " + WORDS[hash64(f"{self.seed}:out:{k}") % len(WORDS)] for k in range(start, start + count)
        )
