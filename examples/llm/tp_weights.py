"""One rank's weights: its shard of a safetensors checkpoint, or of the random weights.

`load_checkpoint_shard` validates the whole checkpoint's headers (as `load_checkpoint`), then
reads only the rank's rows / columns of each split tensor with `safe_open(...).get_slice`,
so a rank's host and GPU memory holds about 1/N of the weights (only the norms are
replicated). `random_weights_shard` draws every full tensor in the order and from
the generator of `random_weights`, keeps the rank's part and drops the rest (one full tensor
alive at a time), so TP=N runs on exactly the slices of TP=1's random weights.

With tied embeddings the rank's LM head is its embedding shard (the same array).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .config import ModelConfig
from .parallel import ShardPlan, shard_array
from .weights import WeightError, validate_checkpoint


def _pad(backend):
    if backend.is_gpu():
        torch = backend.torch

        def pad(part, rows):
            return torch.cat([part, part.new_zeros((rows,) + tuple(part.shape[1:]))], 0)
    else:
        def pad(part, rows):
            return np.concatenate([part, np.zeros((rows,) + part.shape[1:], part.dtype)], 0)
    return pad


def _tied_head(weights: dict, plan: ShardPlan, backend=None):
    if plan.cfg.tie_word_embeddings:  # the embedding shard is the LM head shard
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    return weights


def shard_weights(full: dict, plan: ShardPlan, backend) -> dict:
    """This rank's arrays cut from a full weights dict (tests; the loaders below never hold one)."""
    pad = _pad(backend)
    out = {n: shard_array(a, plan.shard_spec(n), pad) for n, a in full.items()}
    return _tied_head(out, plan, backend)


def random_weights_shard(cfg: ModelConfig, backend, dtype: str, plan: ShardPlan, seed: int = 0,
                         std: float = 0.02) -> dict:
    """random_weights(cfg, backend, dtype, seed, std) sharded by `plan`, one tensor at a time."""
    if backend.is_gpu():
        import torch

        rng = torch.Generator(device=backend.device)
        rng.manual_seed(seed)
    else:
        rng = np.random.default_rng(seed)
    pad, out = _pad(backend), {}
    for name, shape in cfg.weight_shapes().items():
        w = backend.randn(shape, "f32", std, rng)  # same draws as random_weights
        if name.endswith("norm.weight"):
            w = w + 1.0
        out[name] = backend.cast(shard_array(w, plan.shard_spec(name), pad), dtype)
        del w
    return _tied_head(out, plan, backend)


def load_checkpoint_shard(cfg: ModelConfig, ckpt_dir, backend, dtype: str, plan: ShardPlan,
                          stats: dict | None = None) -> dict:
    """This rank's shard of the checkpoint, cast to `dtype` on `backend`.

    `stats`, when given, gets "bytes_read" (bytes of tensor data taken from the files) and
    "shapes" (name -> the shape read), for tests and the launcher's memory line."""
    import ml_dtypes  # noqa: F401  # registers 'bfloat16' with NumPy for safetensors' np reader
    from safetensors import safe_open

    where = validate_checkpoint(cfg, Path(ckpt_dir))
    by_file: dict[Path, list[str]] = {}
    for name in cfg.weight_shapes():
        by_file.setdefault(where[name], []).append(name)
    pad, out, read, shapes = _pad(backend), {}, 0, {}
    for path, names in by_file.items():
        if backend.is_gpu():
            opener = safe_open(str(path), framework="pt", device=str(backend.device))
        else:
            opener = safe_open(str(path), framework="np")
        with opener as f:
            for name in names:
                spec = plan.shard_spec(name)
                try:
                    sl = f.get_slice(name)
                    if spec is None:
                        t = sl[:]
                    else:
                        dim, b, e, _ = spec
                        t = sl[b:e] if dim == 0 else sl[:, b:e]
                except Exception as e:  # anything the header check could not see
                    raise WeightError(f"tensor '{name}' in {path.name}: cannot be read "
                                      f"({type(e).__name__}: {e})") from None
                read += backend.nbytes(t) if backend.is_gpu() else int(t.nbytes)
                shapes[name] = tuple(int(s) for s in t.shape)
                if spec is not None and spec[3] > spec[2] - spec[1]:
                    t = pad(t, spec[3] - (spec[2] - spec[1]))
                out[name] = backend.cast(t, dtype)
                del t
    if stats is not None:
        stats.update(bytes_read=read, shapes=shapes)
    return _tied_head(out, plan, backend)
