"""From a command-line model argument to (config, weights, tokenizer)."""
from __future__ import annotations

import sys
from pathlib import Path

from .config import NAMED_CONFIGS, load_config
from .weights import WeightError, has_checkpoint, load_checkpoint, missing_checkpoint, random_weights


class TokenizerError(ValueError):
    """A tokenizer.json that cannot be read, when one is needed (text prompts)."""


def checkpoint_dir(model: str) -> Path:
    """The directory whose safetensors checkpoint `model` names; WeightError when there is none.

    A named config has no weights; a config.json file names its own directory."""
    if model in NAMED_CONFIGS:
        raise WeightError(f"'{model}' is a named config: it has shapes but no weights; pass --random-weights")
    p = Path(model)
    d = p if p.is_dir() else p.parent
    if not has_checkpoint(d):
        raise WeightError(missing_checkpoint(d))
    return d


def load_model(model: str, backend, dtype: str = "bf16", random: bool = False, seed: int = 0,
               std: float = 0.02, need_tokenizer: bool = False):
    """`model`: a checkpoint directory, a config.json (its directory holds the checkpoint), or a
    named config (`llama3-8b`, `qwen2.5-14b`, `tiny`, `tiny-llama`). The weights come from the
    safetensors checkpoint; a missing or unreadable one is a WeightError. With random=True (and
    only then) they are Normal(0, std) from `seed` and no checkpoint is read. The tokenizer is
    loaded when there is one; `need_tokenizer` makes a missing or unreadable one an error."""
    cfg = load_config(model)
    if random:
        weights = random_weights(cfg, backend, dtype, seed=seed, std=std)
    else:
        weights = load_checkpoint(cfg, checkpoint_dir(model), backend, dtype)
    return cfg, weights, load_tokenizer(model, required=need_tokenizer)


def load_tokenizer(model: str, required: bool = False):
    """A `tokenizers.Tokenizer` from the model directory's tokenizer.json, else None.

    A missing or unreadable tokenizer.json is a TokenizerError when `required`; otherwise it is
    skipped (an unreadable one with a warning on stderr): token-id prompts need no tokenizer."""
    tj = None
    if model not in NAMED_CONFIGS:
        p = Path(model)
        tj = (p if p.is_dir() else p.parent) / "tokenizer.json"
    if tj is None or not tj.is_file():
        if required:
            raise TokenizerError(f"text prompts need a tokenizer.json in the model directory"
                                 f"{f' ({tj} does not exist)' if tj is not None else ''}; use --prompt-ids")
        return None
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(tj))
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises its own Exception types
        why = f"{tj}: cannot load the tokenizer ({type(e).__name__}: {str(e)[:200]})"
        if required:
            raise TokenizerError(why) from None
        print(f"warning: {why}; continuing without it (no text output)", file=sys.stderr)
        return None
