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


import numpy as np

from .config import ModelConfig
from .parallel import ShardPlan, shard_array
from .weights import random_draws, read_checkpoint


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
    pad, out = _pad(backend), {}
    for name, w in random_draws(cfg, backend, seed, std):  # same draws as random_weights
        part = shard_array(w, plan.shard_spec(name), pad)
        t = backend.cast(part, dtype)
        if t is part and part is not w:  # torch's cast to its own dtype keeps the view: copy the shard, so
            t = t.clone()                # that the full tensor is freed now (one full tensor alive at a time)
        out[name] = t
        del w, part
    return _tied_head(out, plan, backend)


def load_checkpoint_shard(cfg: ModelConfig, ckpt_dir, backend, dtype: str, plan: ShardPlan,
                          stats: dict | None = None) -> dict:
    """This rank's shard of the checkpoint, cast to `dtype` on `backend`.

    `stats`, when given, gets "bytes_read" (bytes of tensor data taken from the files) and
    "shapes" (name -> the shape read), for tests and the launcher's memory line."""
    def read(f, name):
        spec, sl = plan.shard_spec(name), f.get_slice(name)
        if spec is None:
            return sl[:]
        dim, b, e, _ = spec
        return sl[b:e] if dim == 0 else sl[:, b:e]

    pad, out, read_bytes, shapes = _pad(backend), {}, 0, {}
    for name, t in read_checkpoint(cfg, ckpt_dir, backend, read):
        spec = plan.shard_spec(name)
        read_bytes += backend.nbytes(t) if backend.is_gpu() else int(t.nbytes)
        shapes[name] = tuple(int(s) for s in t.shape)
        if spec is not None and spec[3] > spec[2] - spec[1]:
            t = pad(t, spec[3] - (spec[2] - spec[1]))
        out[name] = backend.cast(t, dtype)
        del t
    if stats is not None:
        stats.update(bytes_read=read_bytes, shapes=shapes)
    return _tied_head(out, plan, backend)
