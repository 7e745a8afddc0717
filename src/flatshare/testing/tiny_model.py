"""A tiny random Llama with a locally trained tokenizer, built offline and deterministically.

`make_tiny_model(dir)` writes a Hugging Face model directory that `transformers` and vLLM load:
`config.json`, `generation_config.json`, `model.safetensors`, `tokenizer.json`,
`tokenizer_config.json` and a marker file written last. The weights are random (seeded) and the
tokenizer is a byte-level BPE trained on a generated English-like corpus, so nothing is downloaded.

Shape: hidden 64, 2 layers, 2 attention heads (head_dim 32, which vLLM's CPU attention accepts),
1 KV head, MLP 128, bfloat16 weights (the dtype vLLM's CPU backend picks anyway). Token ids 0-3
are `<unk>`, `<s>`, `</s>`, `<pad>`; the vocabulary is filled to exactly `vocab_size`.

Run `python -m flatshare.testing.tiny_model DIR` to build one from the shell (`--help` for its options).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

MARKER = ".flatshare-tiny-model.json"
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
BOS_ID, EOS_ID, PAD_ID = 1, 2, 3
MODEL_SHAPE = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "intermediate_size": 128,
}
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

_SUBJECTS = "the cat|a dog|my friend|the old man|our team|the agent|a student|the river|her sister|the city"
_VERBS = "reads|writes|sees|finds|builds|moves|keeps|opens|carries|follows|answers|watches|plans|counts"
_OBJECTS = (
    "a long letter|the small box|every token|the quiet road|some fresh bread|a red apple|the last page"
    "|many numbers|the open door|a short story|the blue sky|old papers|a new tool|the next request"
)
_TAILS = (
    "today|after lunch|in the morning|before the rain|with great care|without a word|near the house"
    "|at night|again and again|for the first time|while waiting|under the bridge"
)


def make_tiny_model(
    directory: Path, *, vocab_size: int = 512, max_position_embeddings: int = 4096, seed: int = 0
) -> Path:
    """Build (or reuse) the tiny model in `directory` and return the directory.

    Reuses an existing build when its marker records the same parameters; otherwise (re)writes
    every file, the marker last, so an interrupted build is never mistaken for a complete one.
    """
    directory = Path(directory)
    params = _params(vocab_size, max_position_embeddings, seed)
    if _read_marker(directory) == params:
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).unlink(missing_ok=True)
    _write_tokenizer(directory, vocab_size, seed)
    _write_model(directory, vocab_size, max_position_embeddings, seed)
    (directory / MARKER).write_text(json.dumps(params, sort_keys=True) + "\n")
    return directory


def _params(vocab_size: int, max_position_embeddings: int, seed: int) -> dict[str, Any]:
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)}, got {vocab_size}")
    if max_position_embeddings < 16:
        raise ValueError(f"max_position_embeddings must be at least 16, got {max_position_embeddings}")
    return {
        "format": 2,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_position_embeddings,
        "seed": seed,
        **MODEL_SHAPE,
    }


def _read_marker(directory: Path) -> dict[str, Any] | None:
    try:
        found = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def corpus(seed: int, sentences: int = 3000) -> list[str]:
    """English-like sentences made from fixed word lists, reproducible for a given seed."""
    rng = random.Random(seed)
    parts = [group.split("|") for group in (_SUBJECTS, _VERBS, _OBJECTS, _TAILS)]
    lines = [" ".join(rng.choice(words) for words in parts) + "." for _ in range(sentences)]
    lines += [" ".join(str(rng.randrange(1000)) for _ in range(8)) for _ in range(sentences // 10)]
    return lines


def _write_tokenizer(directory: Path, vocab_size: int, seed: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(seed), trainer=trainer)
    _pad_vocab(tokenizer, vocab_size)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS_ID)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=1 << 30,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(directory))


def _pad_vocab(tokenizer: Any, vocab_size: int) -> None:
    """Fill the vocabulary up to `vocab_size` so every id the model can sample decodes."""
    missing = vocab_size - tokenizer.get_vocab_size()
    if missing > 0:
        tokenizer.add_tokens([f"<extra_{i}>" for i in range(missing)])


def _write_model(directory: Path, vocab_size: int, max_position_embeddings: int, seed: int) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    config = LlamaConfig(
        vocab_size=vocab_size,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        tie_word_embeddings=False,
        dtype="bfloat16",
        **MODEL_SHAPE,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    progress_bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(str(directory))
    finally:
        if progress_bars:
            hf_logging.enable_progress_bar()
    GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID).save_pretrained(
        str(directory)
    )


def arg_parser() -> argparse.ArgumentParser:
    """The options of `python -m flatshare.testing.tiny_model` (the docs' tests check commands against it)."""
    parser = argparse.ArgumentParser(
        prog="python -m flatshare.testing.tiny_model",
        description="Build the tiny random Llama (offline, deterministic) in DIR and print DIR.",
    )
    parser.add_argument(
        "directory", metavar="DIR", type=Path, help="folder to write (reused when built alike)"
    )
    parser.add_argument("--vocab-size", type=int, default=512)
    parser.add_argument("--max-position-embeddings", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> int:
    """`python -m flatshare.testing.tiny_model DIR [--vocab-size N] [--max-position-embeddings N] [--seed N]`."""
    parser = arg_parser()
    args = parser.parse_args(argv)
    try:
        built = make_tiny_model(
            args.directory,
            vocab_size=args.vocab_size,
            max_position_embeddings=args.max_position_embeddings,
            seed=args.seed,
        )
    except ValueError as exc:
        parser.error(str(exc))
    print(built)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
