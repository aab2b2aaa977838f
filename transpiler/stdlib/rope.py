"""Rotary position embedding, Llama/Qwen "rotate half" convention."""
from __future__ import annotations

import math

from . import _launch as L
from . import messages as M


def _check_qk(name, x, dt=None):
    d = L.check_float(name, x, ndim=3)
    if dt is not None:
        L.check_same_dtype(name, x, dt)
    return d


@L.fastpath
def rope(q, k, positions, theta: float = 10000.0, rotary_dim: int | None = None, inplace: bool = False):
    """Apply rotary embeddings to q: [tokens, Hq, D] and k: [tokens, Hk, D].

    positions: [tokens] int32/int64. For j < R/2 (R = rotary_dim, default D) the pair
    (x[j], x[j + R/2]) is rotated by the angle positions * theta ** (-2j / R); dims >= R
    are unchanged. Returns (q_out, k_out): new arrays, or q and k themselves with
    inplace=True. f32 math; cos/sin are computed in the kernel.
    """
    dt = _check_qk("q", q)
    _check_qk("k", k, dt)
    idt = L.check_int("positions", positions, ndim=1)
    L.kind_of(q, k, positions)
    s, hq, d = (int(n) for n in q.shape)
    if int(k.shape[0]) != s or int(k.shape[2]) != d:
        raise ValueError(M.rope_k_shape(s, d, q.shape, k.shape))
    L.check_shape("positions", positions, (s,))
    hk = int(k.shape[1])
    r = d if rotary_dim is None else int(rotary_dim)
    if not (0 < r <= d and r % 2 == 0):
        raise ValueError(M.bad_rotary_dim(d, rotary_dim))
    if not theta > 0:
        raise ValueError(M.bad_theta(theta))
    if inplace:
        from ..runtime.args import describe_array

        for name, x in (("q", q), ("k", k)):
            if not describe_array(x).c_contiguous:
                raise ValueError(M.rope_inplace_contiguous(name))
    q, k, positions = L.contiguous(q), L.contiguous(k), L.contiguous(positions)
    half = r // 2
    nlog2 = -2.0 * math.log2(theta) / r
    if s == 0:
        return (q, k) if inplace else (L.empty(q, q.shape), L.empty(k, k.shape))
    if r == d:  # [S, H, 2, HALF] views: any HALF
        q4, k4 = L.reshape(q, (s, hq, 2, half)), L.reshape(k, (s, hk, 2, half))
        name, plan = rope_plan(s, hq, hk, half, L.sm_count(q))
        cfg = dict(T=dt, I=idt, **plan)
        if inplace:
            L.run(L.load("rope", kernel=name + "_inplace", **cfg), name + "_inplace", q4, k4, positions, nlog2=nlog2)
            return q, k
        qo, ko = L.empty(q, q.shape), L.empty(k, k.shape)
        L.run(L.load("rope", kernel=name, **cfg), name, q4, k4, positions,
              L.reshape(qo, q4.shape), L.reshape(ko, k4.shape), nlog2=nlog2)
        return qo, ko
    if half & (half - 1) == 0:  # partial rotary, HALF a power of two
        hb, warps = _token_blocks(hq, hk, half, s, L.sm_count(q))
        cfg = dict(T=dt, I=idt, HALF=half, HB=hb, WARPS=warps)
        if inplace:
            L.run(L.load("rope", kernel="rope_partial_inplace", **cfg), "rope_partial_inplace",
                  q, k, positions, nlog2=nlog2)
            return q, k
        qo, ko = L.empty(q, q.shape), L.empty(k, k.shape)
        tail = min(L.next_pow2(d - r), 256)
        L.run(L.load("rope", kernel="rope_partial", TAIL=tail, **cfg), "rope_partial",
              q, k, positions, qo, ko, nlog2=nlog2)
        return qo, ko
    # partial rotary with R/2 not a power of two: rotate a contiguous copy of [..., :R]
    L.untracked("copies and writes outside a kernel")
    qr, kr = L.contiguous(q[:, :, :r]), L.contiguous(k[:, :, :r])
    qr, kr = rope(qr, kr, positions, theta, None, inplace=True)
    qo, ko = (q, k) if inplace else (_copy(q), _copy(k))
    qo[:, :, :r] = qr
    ko[:, :, :r] = kr
    return qo, ko


HEADS_BLOCK = 4  # heads per program of rope_heads


def rope_plan(s: int, hq: int, hk: int, half: int, sms: int) -> tuple[str, dict]:
    """(kernel, HB / HALFB / WARPS) of full rotary over [s, H, 2, half] views on `sms` SMs.

    `rope` is a program per token that walks its HQ / HB + HK / HB head blocks in series (the next
    block's rows stream in while one rotates; cos and sin once per token): right while the tokens
    alone fill the SMs. Fewer tokens than SMs (decode) take `rope_heads`: a program per (token, head
    block), one global round trip each, where a token's program would chain five dependent steps at
    Hq=32 Hkv=8 (4.5 us at T=1 on an H200 against torch.compile's 3.1).
    """
    halfb = max(1, L.next_pow2(half))
    if s < sms:
        hb = max(1, min(L.next_pow2(max(hq, hk)), HEADS_BLOCK))
        return "rope_heads", dict(HB=hb, HALFB=halfb, WARPS=max(1, min(8, hb * halfb // 256)))
    hb, warps = _token_blocks(hq, hk, half, s, sms)
    return "rope", dict(HB=hb, HALFB=halfb, WARPS=warps)


def _token_blocks(hq: int, hk: int, half: int, s: int = 1 << 30, sms: int = 132) -> tuple[int, int]:
    """(HB, WARPS) of the program-per-token kernels: a step of 256 tile elements per half (HB * HALFB: 4 heads
    at D=128, 8 at D=64) on one warp, doubled when fewer than 64 tokens per SM leave too few programs to keep
    the loads in flight. Measured on an H200 (`benchmarks/sweep_rows.py --misses`, 2026-12-03, bf16;
    tests/data/sweep_rope_prefill_h200.json): T16384 Hq32/8 D128 HB4 W1 90.6 us (the previous HB8 W2 92.2),
    Hq28/4 74.2 (HB8 85.5: a half-empty KV block), T4096 Hq64/8 HB8 W1 44.0 (HB4 48.6), T16384 Hq14/2 D64
    HB8 W1 37.4 (HB4 47.0)."""
    halfb = max(1, L.next_pow2(half))
    elems = 256 if s >= 64 * sms else 512
    hb = max(1, min(L.next_pow2(max(hq, hk)), max(1, elems // halfb)))
    return hb, max(1, min(8, hb * halfb // 512))


def _copy(x):
    L.untracked("a copy outside a kernel")
    out = L.empty(x, x.shape)
    out[...] = x
    return out
