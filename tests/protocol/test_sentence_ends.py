"""`flatshare sentence-ids`: the ids of the tokens that end a sentence, from a real (locally trained)
byte-level BPE tokenizer saved as a model folder's tokenizer files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.protocol.sentence_ends import ends_sentence, sentence_end_ids, tokenizer_tokens
from flatshare.testing.tiny_model import _write_tokenizer


def test_which_texts_end_a_sentence() -> None:
    for text in (".", "!", "?", ".\n", '."', "?)", " !", "...", "。", "…", "!!"):
        assert ends_sentence(text), text
    for text in (",", "Mr.", "3.", "the", " ", "", ".5", "?a", "-"):
        assert not ends_sentence(text), text
    assert sentence_end_ids([(7, "."), (3, "?"), (9, " the"), (1, "3.")]) == [3, 7]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizer")
    _write_tokenizer(directory, 512, seed=0)
    return directory


def test_the_command_prints_the_ids_of_a_tokenizers_sentence_ends(tokenizer_dir: Path) -> None:
    result = CliRunner().invoke(app, ["sentence-ids", str(tokenizer_dir)])
    assert result.exit_code == 0, result.output
    ids = json.loads(result.stdout)
    texts = dict(tokenizer_tokens(tokenizer_dir))
    assert ids and all(ends_sentence(texts[i]) for i in ids)
    period = next(i for i, t in texts.items() if t == ".")
    assert period in ids  # the corpus's sentences end with "."
    assert not any(ends_sentence(t) for i, t in texts.items() if i not in ids)


def test_a_folder_without_a_tokenizer_is_refused(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["sentence-ids", str(tmp_path / "nope")])
    empty = runner.invoke(app, ["sentence-ids", str(tmp_path)])
    assert missing.exit_code == 2 and "not a folder" in missing.output
    assert empty.exit_code == 2 and "no tokenizer" in empty.output
