from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatshare.testing.tiny_model import MARKER, corpus, make_tiny_model

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model_dir(tiny_model: Path) -> Path:
    """The session's default tiny model (tests/conftest.py), built by `make_tiny_model`."""
    return tiny_model


def test_config_has_cpu_friendly_shape(model_dir: Path) -> None:
    config = transformers.AutoConfig.from_pretrained(model_dir)
    assert config.model_type == "llama"
    assert config.hidden_size // config.num_attention_heads == 32
    assert config.head_dim == 32
    assert (config.num_hidden_layers, config.vocab_size, config.max_position_embeddings) == (2, 512, 4096)


def test_tokenizer_loads_and_round_trips(model_dir: Path) -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    assert len(tokenizer) == 512
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 3)
    ids = tokenizer("the cat reads a long letter today.")["input_ids"]
    assert ids[0] == 1
    assert len(ids) < 20  # trained merges make whole words, not bytes
    assert tokenizer.decode(ids, skip_special_tokens=True) == "the cat reads a long letter today."


def test_weights_load_with_transformers(model_dir: Path) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    assert sum(p.numel() for p in model.parameters()) < 200_000


def test_second_call_reuses_the_build(model_dir: Path) -> None:
    weights = model_dir / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert make_tiny_model(model_dir) == model_dir
    assert weights.stat().st_mtime_ns == before


def test_build_is_deterministic_and_redone_without_marker(model_dir: Path, tmp_path: Path) -> None:
    other = make_tiny_model(tmp_path / "again")
    (other / MARKER).unlink()
    make_tiny_model(other)
    assert json.loads((other / MARKER).read_text())["seed"] == 0
    for name in ("model.safetensors", "tokenizer.json", "config.json", "tokenizer_config.json"):
        assert (other / name).read_bytes() == (model_dir / name).read_bytes(), name


def test_rejects_a_vocab_smaller_than_the_byte_alphabet(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        make_tiny_model(tmp_path, vocab_size=100)
    assert not (tmp_path / MARKER).exists()


def test_corpus_depends_only_on_seed() -> None:
    assert corpus(3) == corpus(3)
    assert corpus(3) != corpus(4)


def test_cli_help_prints_usage_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """`... tiny_model --help` once built a folder named `--help` (issue 37): it is an option now."""
    from flatshare.testing.tiny_model import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "DIR" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_cli_refuses_a_bad_size_in_one_line(tmp_path, capsys):
    from flatshare.testing.tiny_model import main

    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "m"), "--vocab-size", "3"])
    assert exit_info.value.code == 2
    assert "vocab_size must be at least" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
