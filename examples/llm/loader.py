"""From a command-line model argument to (config, weights, tokenizer)."""
from __future__ import annotations

from pathlib import Path

from .config import NAMED_CONFIGS, load_config
from .weights import INDEX_FILE, SINGLE_FILE, load_checkpoint, random_weights


def has_checkpoint(path) -> bool:
    p = Path(path)
    return p.is_dir() and ((p / SINGLE_FILE).is_file() or (p / INDEX_FILE).is_file())


def load_model(model: str, backend, dtype: str = "bf16", random: bool = False, seed: int = 0,
               std: float = 0.02):
    """`model`: a checkpoint directory, a config.json (or a directory with only one), or a
    named config (`llama3-8b`, `qwen2.5-14b`, `tiny`, `tiny-llama`). Without a checkpoint,
    or with random=True, the weights are Normal(0, std) from `seed`."""
    cfg = load_config(model)
    if random or not has_checkpoint(model):
        weights = random_weights(cfg, backend, dtype, seed=seed, std=std)
    else:
        weights = load_checkpoint(cfg, model, backend, dtype)
    return cfg, weights, load_tokenizer(model)


def load_tokenizer(model: str):
    """A `tokenizers.Tokenizer` when the directory has tokenizer.json, else None."""
    if model in NAMED_CONFIGS:
        return None
    p = Path(model)
    tj = (p if p.is_dir() else p.parent) / "tokenizer.json"
    if not tj.is_file():
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tj))
