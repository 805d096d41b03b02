#!/usr/bin/env python3
"""Make the tiny Llama model the real vLLM serves in the tests, with no model hub.

No hub is reachable from these machines, so the model is made here: a BPE tokenizer trained on
a small generated text (with a chat template, so /v1/chat/completions works) and a two-layer
Llama with random bf16 weights, saved as a model folder vLLM loads like any other. Its answers
are noise: tests assert structure and token counts, never content. The attention head dimension
is 32 (128 hidden / 4 heads), one the CPU attention backend supports (16 is not).

Run by the python of the real vLLM's environment (it has torch, transformers and tokenizers):

    .venv-vllm/bin/python rig/tiny_model.py FOLDER

The folder is written once; a stamp inside holds this file's hash, so a changed recipe remakes it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

# The model's own limit: a --max-model-len above it is refused at start.
MAX_POSITIONS = 4096
VOCAB = 512
SEED = 21
STAMP = ".llmao-tiny-model"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|> ' + message['content'] + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)
WORDS = ("fleet", "box", "model", "server", "token", "stream", "route", "drain", "roll",
         "health", "metric", "cache", "answer", "prompt", "chat", "context", "revision",
         "supervisor", "program", "one", "two", "three", "four", "five", "the", "a", "of", "to")
SPECIAL = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]


def recipe_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def is_current(folder: Path) -> bool:
    stamp = folder / STAMP
    return stamp.is_file() and stamp.read_text().strip() == recipe_hash()


def corpus() -> list[str]:
    """Enough varied text for a few hundred merges; the words mean nothing."""
    words = WORDS
    lines = []
    for index in range(2000):
        picked = [words[(index * 7 + step * 13) % len(words)] for step in range(12)]
        lines.append(" ".join(picked) + f" {index}.")
    return lines


def make_tokenizer(folder: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>",
                                   bos_token="<s>", eos_token="</s>",
                                   model_max_length=MAX_POSITIONS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return fast


def make_weights(folder: Path, tokenizer) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        max_position_embeddings=MAX_POSITIONS, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False)
    config.dtype = "bfloat16"
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)


def make(folder: Path) -> None:
    """(Re)make the model in ``folder`` unless it is current; written beside, then moved in."""
    if is_current(folder):
        return
    building = folder.with_name(folder.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    tokenizer = make_tokenizer(building)
    make_weights(building, tokenizer)
    (building / STAMP).write_text(recipe_hash() + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    building.rename(folder)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: tiny_model.py FOLDER", file=sys.stderr)
        return 2
    folder = Path(argv[0]).resolve()
    make(folder)
    config = json.loads((folder / "config.json").read_text())
    print(f"tiny model: {folder} (vocab {config['vocab_size']}, "
          f"{config['max_position_embeddings']} positions)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
