"""Gated activations (silu_and_mul, gelu_and_mul) and softmax."""
from __future__ import annotations

from . import _launch as L
from . import messages as M
from . import rows as model
from .norms import _rows


def _gated(name, x, **extra):
    dt = L.check_float("x", x)
    x = L.contiguous(x)
    two_d = int(x.shape[-1])
    if two_d % 2:
        raise ValueError(M.odd_gate(x.shape))
    d = two_d // 2
    m = 1
    for n in x.shape[:-1]:
        m *= int(n)
    out_shape = tuple(x.shape[:-1]) + (d,)
    y = L.empty(x, (m, d))
    if m and d:
        sms = L.sm_count(x)
        cfg = model.column_config(d, m, sms)
        blocks = 2048 // (32 * cfg["WARPS"])
        if name == "silu_and_mul" and -(-m // cfg["ROWS"]) * -(-d // cfg["BLOCK"]) >= sms * blocks:
            # 35 registers cost a quarter of the resident warps; at full occupancy (ptxas spills 8 bytes)
            # 4096x2x14336 bf16 ran 0.0987 vs 0.1089 ms on an H200 (`tilex tune`, 2026-11-29). Only for a grid
            # that fills every SM's blocks: at one token the cap's spills cost 1.60 vs 1.50 us (T=1 D=29568,
            # sweep_rows.py --misses, 2026-12-02)
            extra = dict(extra, MIN_BLOCKS=blocks)
        mod = L.load(name, T=dt, **cfg, **extra)
        L.run(mod, name, L.reshape(x, (m, 2, d)), y)
    return L.reshape(y, out_shape)


@L.fastpath
def silu_and_mul(x):
    """silu(x[..., :d]) * x[..., d:] for x = [..., 2d] (vLLM's SiluAndMul); returns [..., d]."""
    return _gated("silu_and_mul", x)


@L.fastpath
def gelu_and_mul(x, approximate: str = "none"):
    """gelu(x[..., :d]) * x[..., d:]; approximate "none" (erf) or "tanh" as in F.gelu."""
    if approximate not in ("none", "tanh"):
        raise ValueError(M.bad_approximate(approximate))
    return _gated("gelu_and_mul", x, TANH=approximate == "tanh")


@L.fastpath
def softmax(x, dim: int = -1):
    """Softmax along `dim` (like F.softmax(x, dim)), computed in f32, returned in x's dtype.

    The last axis runs in place in the kernel; another `dim` is moved last (a copy) and back.
    """
    L.check_float("x", x)
    nd = len(x.shape)
    if not -nd <= dim < nd:
        raise ValueError(M.bad_dim(dim, nd))
    dim %= nd
    if dim != nd - 1:
        moved = _moveaxis(x, dim, nd - 1)
        return _moveaxis(softmax(moved, -1), nd - 1, dim)
    x2, dt, m, n = _rows("x", x)
    y = L.empty(x2, (m, n))
    sms = L.sm_count(x2)
    ns = model.split_segments(m, n, SPLIT_BLOCK, sms, fill=True, min_chunks=SPLIT_MIN_CHUNKS) if m else 1
    if ns > 1:  # too few rows to fill the SMs: each row across ns programs, two kernels
        seg, ns = model.segment(n, SPLIT_BLOCK, ns)
        pm = L.empty(x2, (m, ns), "f32")
        ps = L.empty(x2, (m, ns), "f32")
        mod = L.load("softmax", kernel="softmax_stats", T=dt, BLOCK=SPLIT_BLOCK, WARPS=8)
        L.run(mod, "softmax_stats", x2, pm, ps, seg=seg)
        fin = L.load("softmax", kernel="softmax_apply", T=dt, BLOCK=SPLIT_BLOCK, WARPS=8,
                     BLOCK2=max(8, L.next_pow2(ns)))
        L.run(fin, "softmax_apply", x2, pm, ps, y, seg=seg)
        return L.reshape(y, tuple(x.shape))
    mod = L.load("softmax", kernel="softmax", T=dt, **softmax_config(n, m, dt, sms))
    L.run(mod, "softmax", x2, y)
    return L.reshape(y, tuple(x.shape))


SPLIT_BLOCK = 2048  # a split row's chunk: 256 threads x 8 elements
SPLIT_MIN_CHUNKS = 8  # rows under 16384 columns keep a program per row (rows.split_segments)


WHOLE_ROW_MAX = 32768  # 2-byte rows up to this long are read once, whole (a 64 KB ring stage each)


def softmax_config(n: int, m: int, dt: str, sms: int) -> dict:
    """softmax.tile's compile-time parameters for [m, n] rows of dtype `dt` on `sms` SMs.

    Rows up to 16384 are one streamed step each (row_config). Longer 2-byte rows up to WHOLE_ROW_MAX
    are still one step: 64 elements per thread in registers (512 threads, 128 registers, no spills),
    one block per SM, whose two ring stages of a whole row take 128 KB of shared memory; x is read
    once. Longer rows go in 4096-wide chunks, reading x twice (3 stages, 768 threads per SM).
    sweep_rows.py --whole on an H200 (2026-11-30, bf16 4096x32000): whole rows 0.1729 ms, chunks
    0.1878 ms; 32 elements per thread 0.1792, 3 stages 0.230.
    """
    cfg = L.row_config(n, m, sms)
    if cfg["ONE_PASS"]:
        return cfg
    block = L.next_pow2(n)
    if dt != "f32" and block <= WHOLE_ROW_MAX:
        return dict(BLOCK=block, R=1, ONE_PASS=True, WARPS=block // (32 * 64), MIN_BLOCKS=1, PROGRAMS=sms, STAGES=2)
    return L.row_config(n, m, sms, threads_per_sm=768, stages=3)


def _moveaxis(x, a, b):
    L.untracked("a transposed copy")
    kind = L.kind_of(x)
    if kind == "torch":
        return x.movedim(a, b).contiguous()
    if kind == "cupy":
        import cupy

        return cupy.ascontiguousarray(cupy.moveaxis(x, a, b))
    import numpy as np

    return np.ascontiguousarray(np.moveaxis(x, a, b))
