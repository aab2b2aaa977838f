"""Decode-step fusions: the work of several library calls in fewer kernels (fewer launches
per layer is what a batch-1 decode step is short of; see benchmarks/RESULTS.md)."""
from __future__ import annotations

import math

from . import _launch as L
from . import messages as M
from .kvcache import kv_cache_write
from .linear import _SPLITK, _check_linear, _check_qkv, _partials, linear
from .norms import _vector, fused_add_rms_norm
from .rope import rope

MAX_ROWS = _SPLITK["BM"]  # linear_splitk keeps every row in one tile


@L.fastpath
def linear_qkv_rope_cache(x, weight, q_size: int, kv_size: int, positions, k_cache, v_cache, slot_mapping,
                          theta: float = 10000.0, bias=None):
    """Attention's inputs for decode tokens: q, k, v = x @ weight.T (+ bias) split at q_size and
    kv_size; RoPE on q and k (rotate half, full head_dim); k and v written into the paged
    caches at slot_mapping (negative slot: skipped). Returns q [tokens, Hq, D].

    The same as `linear`, `rope` and `kv_cache_write` in sequence, in two kernels
    (`linear_swap_splitk` at <= 16 tokens on the GPU, else `linear_splitk`; then
    `splitk_qkv_rope_cache` for the sum, bias, rotation and stores)
    when tokens <= 64, in_features % 8 == 0 and D / 2 is a power of two; otherwise it runs
    those three calls. x [tokens, in]; weight [q_size + 2 kv_size, in]; k_cache, v_cache
    [blocks, block_size, Hkv, D] (contiguous); positions, slot_mapping [tokens] int32/int64.
    """
    dt, x2, m, k, q_size, kv_size = _check_qkv(x, weight, q_size, kv_size, bias, x_ndim=2)
    n = q_size + 2 * kv_size
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        L.check_float(name, c, ndim=4)
        L.check_same_dtype(name, c, dt)
    nb, bs, hkv, d = (int(s) for s in k_cache.shape)
    L.check_shape("v_cache", v_cache, (nb, bs, hkv, d))
    if kv_size != hkv * d or q_size % max(d, 1):
        raise ValueError(M.qkv_heads(q_size, kv_size, hkv, d))
    idt = L.check_int("positions", positions, ndim=1)
    L.check_shape("positions", positions, (m,))
    sdt = L.check_int("slot_mapping", slot_mapping, ndim=1)
    L.check_shape("slot_mapping", slot_mapping, (m,))
    L.kind_of(x, weight, k_cache, v_cache, positions, slot_mapping, bias)
    if not theta > 0:
        raise ValueError(M.bad_theta(theta))
    half = d // 2
    fused = (0 < m <= MAX_ROWS and k and k % 8 == 0 and d % 2 == 0 and half & (half - 1) == 0
             and kv_size and nb * bs)
    if not fused:
        qkv = linear(x2, weight, bias)
        q = L.reshape(L.contiguous(qkv[:, :q_size]), (m, q_size // max(d, 1), d))
        kk = L.reshape(L.contiguous(qkv[:, q_size:q_size + kv_size]), (m, hkv, d))
        v = L.reshape(L.contiguous(qkv[:, q_size + kv_size:]), (m, hkv, d))
        q, kk = rope(q, kk, positions, theta)
        kv_cache_write(kk, v, k_cache, v_cache, slot_mapping)
        return q
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not L.describe_array(c).c_contiguous:
            raise ValueError(M.not_contiguous_cache(name))
    weight = L.contiguous(weight)
    part = _partials(x2, weight, dt, m, n, k)
    q = L.empty(x2, (m, q_size))
    # without HAS_BIAS the kernel never reads `bias`: any vector of the dtype will do
    b = L.contiguous(bias) if bias is not None else L.reshape(weight, (n * k,))[:n]
    mod = L.load("qkv_rope_cache", T=dt, I=idt, J=sdt, HALF=half, HAS_BIAS=bias is not None,
                 WARPS=max(1, min(4, half // 64)))
    L.run(mod, "splitk_qkv_rope_cache", part, b, L.contiguous(positions), L.contiguous(slot_mapping), q,
          L.reshape(k_cache, (nb, bs, kv_size)), L.reshape(v_cache, (nb, bs, kv_size)),
          nlog2=-2.0 * math.log2(theta) / d)
    return L.reshape(q, (m, q_size // d, d))


MAX_NORM_COLS = 16384  # splitk_add_rms_norm keeps a row in the registers of one program


@L.fastpath
def linear_add_rms_norm(x, weight, residual, norm_weight=None, eps: float = 1e-6):
    """h = x @ weight.T + residual (rounded to the dtype); returns (rms_norm(h) * norm_weight, h):
    `linear` then `fused_add_rms_norm`, the end of a decoder layer's attention (o_proj) or MLP
    (down_proj) followed by the next norm.

    Two kernels (`linear_swap_splitk` at <= 16 tokens on the GPU, else `linear_splitk`; then
    `splitk_add_rms_norm` for the sum of the K shares, the
    residual add and the norm) when tokens <= 64, in_features % 8 == 0 and out_features <=
    16384; otherwise those two calls. x [tokens, in]; weight [out, in]; residual [tokens, out];
    norm_weight [out] or None.
    """
    dt, x2, m, k, n = _check_linear(x, weight, x_ndim=2)
    L.check_float("residual", residual, ndim=2)
    L.check_same_dtype("residual", residual, dt)
    L.check_shape("residual", residual, (m, n))
    L.kind_of(x, weight, residual)
    if n == 0:
        raise ValueError(M.no_out_features(weight.shape))
    w = _vector("norm_weight", norm_weight, n, dt, x2, 1.0)  # checked as fused_add_rms_norm checks it
    if not (0 < m <= MAX_ROWS and k and k % 8 == 0 and n <= MAX_NORM_COLS):
        return fused_add_rms_norm(linear(x2, weight), residual, w, eps)
    weight = L.contiguous(weight)
    part = _partials(x2, weight, dt, m, n, k)
    splits = int(part.shape[0])
    y, h = L.empty(x2, (m, n)), L.empty(x2, (m, n))
    block = max(8, L.next_pow2(n))
    # SB partial rows summed per step: 4 at most (BLOCK = 8192: 52 registers, no spills; 8 spills)
    mod = L.load("splitk_add_rms_norm", T=dt, BLOCK=block, SB=min(4, L.next_pow2(splits)),
                 WARPS=min(32, max(1, block // 256)))
    L.run(mod, "splitk_add_rms_norm", part, L.contiguous(residual), w, y, h, eps=L.check_number("eps", eps))
    return y, h
