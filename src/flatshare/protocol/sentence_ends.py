"""The token ids that end a sentence in a model's vocabulary, for make-room's `sentence_end_token_ids`.

vLLM's scheduler sees token ids, not text, so make-room closes a protected reply's window on the ids of the
tokens that end a sentence: ".", "!", "?" (and their CJK forms, and the ellipsis), alone or with closing
quotes, brackets or whitespace around them (".\\n", '?"', " !"). A token that carries letters or digits
(the "Mr." or "3." of some vocabularies) is left out: closing the window on an abbreviation would end the
hold early. `flatshare sentence-ids MODEL` prints the list for a model's tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SENTENCE_ENDS = frozenset(".!?。！？…")
CLOSERS = "\"'”’)]}»」』 \t\r\n"


def ends_sentence(text: str) -> bool:
    """Whether a token's text ends a sentence: punctuation only, its last mark (closers stripped) a
    sentence end."""
    core = text.rstrip(CLOSERS)
    if not core or core[-1] not in SENTENCE_ENDS:
        return False
    return not any(ch.isalnum() for ch in text)


def sentence_end_ids(tokens: Iterable[tuple[int, str]]) -> list[int]:
    """The ids among `(id, decoded text)` pairs whose text ends a sentence, sorted."""
    return sorted(i for i, text in tokens if ends_sentence(text))


def tokenizer_tokens(model: str | Path) -> list[tuple[int, str]]:
    """Every id of a local model's tokenizer (Hugging Face's `AutoTokenizer`, from local files only) with
    its text as decoded alone; special tokens are left out."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model), local_files_only=True)
    special = set(tokenizer.all_special_ids)
    return [(i, tokenizer.decode([i])) for i in range(len(tokenizer)) if i not in special]
