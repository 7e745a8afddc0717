"""Deterministic prompt token ids for simulated requests.

Each stream key (a `prefix_group`, or a request id when there is none) names one endless,
seeded token sequence; a request takes the first `prompt_tokens` ids of its stream. Two requests
of the same group therefore share their first `min(len_a, len_b)` tokens, which is what vLLM's
prefix cache needs to see (an agent's next call extends its previous context). Ids lie in
`[FIRST_ID, vocab_size)` (`flatshare.protocol.prompt_ids`: ids 0-3 are special).
"""

from __future__ import annotations

import hashlib

import numpy as np

from flatshare.protocol.prompt_ids import DEFAULT_VOCAB, FIRST_ID, check_has_ordinary_ids


class TokenStreams:
    """Seeded token streams keyed by name; ids lie in [4, vocab_size)."""

    def __init__(self, seed: int = 0, vocab_size: int = DEFAULT_VOCAB) -> None:
        check_has_ordinary_ids(vocab_size)
        self._seed = seed
        self._vocab = vocab_size
        self._streams: dict[str, np.ndarray] = {}

    def take(self, key: str, n: int) -> list[int]:
        """The first `n` ids of the stream `key`."""
        stream = self._streams.get(key)
        if stream is None or len(stream) < n:
            stream = self._generate(key, max(n, 2 * (0 if stream is None else len(stream))))
            self._streams[key] = stream
        return [int(x) for x in stream[:n]]

    def _generate(self, key: str, n: int) -> np.ndarray:
        digest = hashlib.sha256(f"{self._seed}:{key}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        return rng.integers(FIRST_ID, self._vocab, size=n, dtype=np.int64)
