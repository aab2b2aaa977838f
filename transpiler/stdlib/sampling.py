"""Greedy and top-p sampling from logits."""
from __future__ import annotations

import operator

from . import _launch as L
from . import messages as M
from . import rows as model


def _logits(logits):
    dt = L.check_float("logits", logits, ndim=2)
    b, v = (int(n) for n in logits.shape)
    if v == 0:
        raise ValueError(M.EMPTY_VOCAB)
    return L.contiguous(logits), dt, b, v


@L.fastpath
def argmax(logits):
    """Index of the maximum of each row of logits [batch, vocab] (the first one on ties),
    as int64 [batch] (like torch.argmax(logits, dim=-1)). NaN is ignored."""
    x, dt, b, v = _logits(logits)
    ids = L.empty(x, (b,), "i64")
    if b == 0:
        return ids
    block = min(2048, max(8, L.next_pow2(v)))
    warps = max(1, min(8, block // 256))
    # split long rows over several programs when the batch alone cannot fill the GPU
    ns = model.split_segments(b, v, block, L.sm_count(x))
    if ns <= 1:
        mod = L.load("argmax", kernel="argmax", T=dt, BLOCK=block, WARPS=warps)
        L.run(mod, "argmax", x, ids)
        return ids
    seg, ns = model.segment(v, block, ns)
    pval = L.empty(x, (b, ns), "f32")
    pidx = L.empty(x, (b, ns), "i32")
    mod = L.load("argmax", kernel="argmax_partial", T=dt, BLOCK=block, WARPS=warps)
    L.run(mod, "argmax_partial", x, pval, pidx, seg=seg)
    _final(pval, pidx, ids, ns)
    return ids


def _final(pval, pidx, ids, ns: int) -> None:
    """ids[row] = the first index of the largest of the row's ns (value, index) pairs."""
    fin = L.load("argmax", kernel="argmax_final", BLOCK2=max(8, L.next_pow2(ns)))
    L.run(fin, "argmax_final", pval, pidx, ids)


def sample(logits, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0):
    """Sample one token per row of logits [batch, vocab]; int64 ids [batch].

    temperature 0 is greedy (argmax). Otherwise softmax(logits / temperature) is
    restricted to its top-p nucleus (the smallest set of most likely tokens whose
    probability reaches top_p; all tokens tied at the boundary are kept), renormalized
    and sampled by Gumbel-max with a counter-based hash of (seed, row, token): the same
    seed gives the same tokens, on the GPU and in the interpreter.
    """
    x, dt, b, v = _logits(logits)
    temperature, top_p = float(temperature), float(top_p)
    if not temperature >= 0:
        raise ValueError(M.bad_temperature(temperature))
    if not 0 < top_p <= 1:
        raise ValueError(M.bad_top_p(top_p))
    if isinstance(seed, bool):
        raise TypeError("seed: expected an int, got bool")
    try:
        seed = operator.index(seed)  # int, NumPy integers
    except TypeError:
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}") from None
    if temperature == 0:
        return argmax(logits)
    ids = L.empty(x, (b,), "i64")
    if b == 0:
        return ids
    seed32 = seed & 0xFFFFFFFF
    seed32 = seed32 - (1 << 32) if seed32 >= 1 << 31 else seed32
    block = min(1024, max(8, L.next_pow2(v)))
    warps = max(1, min(8, block // 128))
    ns = model.split_segments(b, v, block, L.sm_count(x), fill=True, min_chunks=8) if top_p >= 1 else 1
    if ns > 1:  # every token kept: the Gumbel-max draw alone, split like argmax (the same tokens)
        seg, ns = model.segment(v, block, ns)
        pval = L.empty(x, (b, ns), "f32")
        pidx = L.empty(x, (b, ns), "i32")
        mod = L.load("sample", kernel="sample_partial", T=dt, BLOCK=block, WARPS=warps)
        L.run(mod, "sample_partial", x, pval, pidx, inv_temp=1.0 / temperature, seed=seed32, seg=seg)
        _final(pval, pidx, ids, ns)
        return ids
    mod = L.load("sample", kernel="sample", T=dt, BLOCK=block, WARPS=warps)
    L.run(mod, "sample", x, ids, inv_temp=1.0 / temperature, top_p=top_p, seed=seed32)
    return ids
