"""Attention: dense prefill (FlashAttention-style) and paged decode (flash-decoding).

Kernels: stdlib_kernels/attention_prefill.tile (and attention_prefill_gqa.tile, attention_prefill_short.tile,
attention_prefill_whole.tile and attention_prefill_stream.tile; attention_plan.py chooses among the enabled ones
from a cost model, `config` names any) and
stdlib_kernels/attention_decode.tile; the strategy is described in docs/stdlib_attention.md.
"""
from __future__ import annotations

import functools
import math

from . import _launch as L
from . import messages as M
from .attention_plan import choose, prefill_config, short_config, stream_config, stream_resident, whole_config, whole_resident

HEAD_DIMS = (16, 32, 64, 128, 256)   # power-of-two head sizes (64 and 128 are the tuned ones)
MAX_SPLITS = 64
MIN_SHARE_TOKENS = 32  # two 16-token blocks
SINGLE_SHARE_TOKENS = 128  # contexts this short are not split
STATIC_TOKENS = 256  # one-share tables at most this wide are walked whole (attention_decode_split's STATIC)
RESIDENT_PER_SM = 2  # attention_decode blocks that fit on an SM (shared memory of the streamed K/V ring)


def _head_dim(name, x) -> int:
    d = int(x.shape[-1])
    if d not in HEAD_DIMS:
        raise ValueError(M.bad_head_dim(name, d, HEAD_DIMS))
    return d


def _scale(scale, d: int) -> float:
    return 1.0 / math.sqrt(d) if scale is None else float(scale)


# the prefill kernels: config["KERNEL"] -> the .tile file (and kernel) that computes it
PREFILL_KERNELS = {"flash": "attention_prefill", "gqa": "attention_prefill_gqa", "short": "attention_prefill_short",
                   "whole": "attention_prefill_whole", "stream": "attention_prefill_stream"}

# smaller tiles of each kernel, tried in order when the target's shared memory (e.g. sm_86/89: 99 KB) cannot hold
# the chosen ones
_PREFILL_SMALLER = {
    "flash": (dict(BM=64, BN=64, WARPS=4), dict(BM=64, BN=32, WARPS=4), dict(BM=32, BN=32, WARPS=2)),
    "gqa": (dict(BM=64, BN=64, WARPS=4), dict(BM=64, BN=32, WARPS=4), dict(BM=32, BN=32, WARPS=2)),
    "short": (dict(BM=64, STAGES=1),),
    "whole": (),  # its tiles hold the whole sequence: no smaller tiling
    "stream": (),  # no smaller tiling measured
}


def _prefill_module(cfg: dict, pinned: dict, **kw):
    """(kernel name, module): the prefill kernel cfg["KERNEL"] (default "flash") compiled with the rest of `cfg`,
    or with the first of its _PREFILL_SMALLER tilings that fits the target's shared memory when `cfg` does not
    (tile sizes the caller pinned in `pinned` are never changed)."""
    from ..diagnostics import CompileError

    cfg = dict(cfg)
    kind = cfg.pop("KERNEL", "flash")
    if kind not in PREFILL_KERNELS:
        raise ValueError(f"config: KERNEL must be one of {sorted(PREFILL_KERNELS)}, got {kind!r}")
    name = PREFILL_KERNELS[kind]
    *tries, last = [cfg] + [dict(cfg, **c) for c in _PREFILL_SMALLER[kind] if not set(c) & set(pinned)]
    for c in tries:
        try:
            return name, L.load(name, **kw, **c)
        except CompileError as e:
            if "shared memory" not in str(e):
                raise
    return name, L.load(name, **kw, **last)


def _out(out, like, shape, dt):
    """A new output array, or `out` checked (kind, dtype, shape, contiguity) to be written in place."""
    if out is None:
        return L.empty(like, shape)
    L.check_float("out", out, ndim=len(shape))
    L.check_same_dtype("out", out, dt)
    L.check_shape("out", out, shape)
    L.kind_of(like, out)
    from ..runtime.args import describe_array

    if not describe_array(out).c_contiguous:
        raise ValueError("out: must be contiguous (it is written in place)")
    return out


@L.fastpath
def attention_prefill(q, k, v, causal: bool = True, scale: float | None = None, out=None,
                      config: dict | None = None, layout: str = "bhsd"):
    """softmax(scale * q k^T (+ causal mask)) v with grouped-query heads.

    q: [B, Hq, S, D]; k, v: [B, Hkv, S, D] with Hq a multiple of Hkv (query head h uses KV
    head h // (Hq / Hkv)); f32, f16 or bf16 (one dtype); D a power of two from 16 to 256.
    layout="bshd" takes token-major tensors instead (q [B, S, Hq, D], k, v [B, S, Hkv, D],
    o like q), as a linear's output reshaped to heads is laid out: no transposes.
    causal: query i attends keys j <= i (top-left aligned). scale defaults to 1/sqrt(D).
    Returns o in q's layout, kind and dtype (written into `out` when given). NumPy
    arrays run in the interpreter.
    The kernel and its tiling come from a cost model of the shape (attention_plan.choose_prefill). `config`
    overrides them, for benchmarks: compile-time parameters (BM, BN, WARPS, STAGES, ...) of the kernel it names,
    KERNEL="flash" (one query head per program; the default when config names none), "gqa" (the query heads of a
    KV head in one tile), "short" (S <= BN, layout="bhsd": a persistent kernel whose scores are one
    tensor-core main loop), "whole" (S <= BM and BN: persistent, one tile per head holding the whole sequence,
    its Q, K and V streamed one tile ahead) or "stream" (persistent, any S: each program one flat loop over
    (query block, key block) steps of its units (pairs of query blocks of a head), Q, K and V streamed one step
    ahead; sm_90a).
    """
    if layout not in ("bhsd", "bshd"):
        raise ValueError(M.bad_layout(layout))
    dt = L.check_float("q", q, ndim=4)
    for name, x in (("k", k), ("v", v)):
        L.check_float(name, x, ndim=4)
        L.check_same_dtype(name, x, dt)
    L.kind_of(q, k, v)
    tokens = layout == "bshd"
    if tokens:
        b, s, hq, d = (int(n) for n in q.shape)
        hkv = int(k.shape[2])
        kv_shape = (b, s, hkv, d)
    else:
        b, hq, s, d = (int(n) for n in q.shape)
        hkv = int(k.shape[1])
        kv_shape = (b, hkv, s, d)
    _head_dim("q", q)
    L.check_shape("k", k, kv_shape)
    L.check_shape("v", v, kv_shape)
    if hkv == 0 or hq % hkv:
        raise ValueError(M.prefill_heads(hq, hkv))
    o = _out(out, q, tuple(int(n) for n in q.shape), dt)
    if b * hq * s == 0:
        return o
    kind, cfg = prefill_launch_config(b, hq, hkv, s, d, bool(causal), layout, dt, config, L.sm_count(q), _arch())
    if kind == "short":  # per KV head: q, o [B * Hkv, G * S, D], k, v [B * Hkv, S, D] (TMA reads q and k)
        if tokens or s > cfg["BN"] or not 64 <= d <= 128:
            raise ValueError(f"config: KERNEL='short' takes layout='bhsd', S <= BN ({cfg['BN']}) and D 64 or 128, "
                             f"got layout={layout!r}, S={s}, D={d}")
        if L.kind_of(q) != "numpy" and _arch() != "sm_90a":  # its cp.async main loop gave NaN (sweep canary)
            raise ValueError(f"config: KERNEL='short' runs on sm_90a only (TMA + wgmma), this GPU is {_arch()}")
        g = hq // hkv
        q4, k4, v4, o4 = (L.reshape(x, (b * hkv, n, d)) for x, n in
                          ((_aligned16(L.contiguous(q)), g * s), (_aligned16(L.contiguous(k)), s),
                           (L.contiguous(v), s), (o, g * s)))
    else:
        if kind == "whole":  # one tile per (batch row, head): the whole sequence in BM rows and one BN key block
            if s > min(cfg["BM"], cfg["BN"]):
                raise ValueError(f"config: KERNEL='whole' takes S <= BM and S <= BN ({cfg['BM']}, {cfg['BN']}), got S={s}")
            if L.kind_of(q) != "numpy" and _arch() != "sm_90a":  # q beside a padded K/V ring: over sm_80's smem
                raise ValueError(f"config: KERNEL='whole' runs on sm_90a only (TMA + wgmma), this GPU is {_arch()}")
        if kind == "stream":  # persistent: one flat loop of (head, query block, key block) steps a program
            if L.kind_of(q) != "numpy" and _arch() != "sm_90a":  # its q, k, v ring is sized for TMA + wgmma
                raise ValueError(f"config: KERNEL='stream' runs on sm_90a only (TMA + wgmma), this GPU is {_arch()}")
        q4 = _aligned16(L.contiguous(q)) if kind in ("whole", "stream") else L.contiguous(q)  # TMA reads q too
        q4, k4, v4, o4 = q4, _aligned16(L.contiguous(k)), _aligned16(L.contiguous(v)), o
        if not tokens:  # [B, H, S, D] is [B * H, S, 1, D] token-major: one head per batch row
            q4, k4, v4, o4 = (L.reshape(x, (int(x.shape[0]) * int(x.shape[1]), s, 1, d)) for x in (q4, k4, v4, o4))
    name, mod = _prefill_module(cfg, config or {}, T=dt, D=d, CAUSAL=bool(causal))
    L.run(mod, name, q4, k4, v4, o4, scale=_scale(scale, d))
    return o


def prefill_launch_config(b: int, hq: int, hkv: int, s: int, d: int, causal: bool, layout: str, dt: str,
                          config: dict | None, sms: int, arch: str) -> tuple:
    """(kernel kind, compile-time parameters) attention_prefill launches for a shape: the model's choice
    (attention_plan.choose) when `config` is None, else the kernel `config` names (KERNEL, default "flash") at its
    base tiling with `config` over it; persistent kernels get PROGRAMS (SMs x programs an SM holds) unless given,
    gqa its G. The parameters returned are the kernel's defines (KERNEL included: _prefill_module pops it), so a
    benchmark can build the exact kernels a call will load (precompiling them in other processes)."""
    if config is None:  # the model's choice (attention_plan.py)
        kind, cfg, _ = choose(b, hq, hkv, s, d, bool(causal), layout, dt, sms, arch)
        cfg = dict(cfg, KERNEL=kind)
    else:
        kind = config.get("KERNEL", "flash")
        base = {"short": lambda: short_config(s, d), "whole": lambda: whole_config(s, d),
                "stream": lambda: stream_config(s, d)}.get(kind, lambda: prefill_config(d, s))
        cfg = dict(base(), **config)
    if kind == "short":
        cfg.setdefault("PROGRAMS", sms)
    elif kind == "whole":
        cfg.setdefault("PROGRAMS", sms * whole_resident(cfg, d))
    elif kind == "stream":
        cfg.setdefault("PROGRAMS", sms * stream_resident(cfg, d))
    elif kind == "gqa":  # the query heads of one KV head in one tile (a compile-time G)
        cfg["G"] = hq // hkv
    return kind, cfg


def _arch() -> str:
    """The target the kernels compile for (sm_90a when no GPU is visible, as _launch.load does)."""
    try:
        from ..runtime.nvrtc import default_arch

        return default_arch()
    except Exception:  # noqa: BLE001 - no GPU: the interpreter runs whichever kernel
        return "sm_90a"


def _aligned16(x):
    """`x`, or a copy of it when its data does not start on a 16-byte boundary (a view at an odd element
    offset of a buffer): on sm_90a the prefill kernel reads k and v by TMA, which takes 16-byte aligned
    addresses only (the kernel launch raises LaunchError on others)."""
    from ..runtime.launch import _pointer

    kind = L.kind_of(x)
    if kind == "numpy" or int(_pointer(x)) % 16 == 0:  # the interpreter's arrays have nothing to align
        return x
    L.untracked("an aligned copy")
    return x.clone() if kind == "torch" else x.copy()


# ------------------------------------------------------------------------------- decode

from . import decode_model as DP  # noqa: E402 - the decode half of this module starts here


@functools.lru_cache(maxsize=None)
def _split_smem(dt: str, bs: int, d: int, gp: int, tile: tuple) -> int | None:
    """Shared memory of attention_decode_split with `tile` (as the compiler laid it out), None if it cannot build."""
    from ..diagnostics import CompileError

    try:
        mod = L.load("attention_decode", kernel="attention_decode_split", T=dt, BS=bs, D=d, GP=gp, DIRECT=False,
                     **dict(tile))
    except CompileError:
        return None
    return int(mod.specs["attention_decode_split"].smem_bytes)


@functools.lru_cache(maxsize=4096)
def decode_plan(b: int, hq: int, hkv: int, d: int, max_blocks: int, block_size: int, dtype: str = "bf16",
                sm_count: int = 132, splits: int | None = None) -> DP.Plan:
    """attention_decode's split count and tiles for a shape: decode_model.py's model over its candidate tiles, with
    the shared memory the compiler gives each (memoized per shape)."""
    gp = max(16, L.next_pow2(hq // hkv))
    sh = DP.Shape(b, hkv, hq // hkv, d, max_blocks, block_size, 4 if dtype == "f32" else 2)
    return DP.choose(sh, lambda t: _split_smem(dtype, block_size, d, gp, tuple(sorted(t.items()))), sm_count, splits)


@L.fastpath
def attention_decode(q, k_cache, v_cache, block_table, seq_lens, scale: float | None = None,
                     num_splits: int | None = None, out=None, config: dict | None = None):
    """One query token per sequence against a paged KV cache, with grouped-query heads.

    q: [B, Hq, D]; k_cache, v_cache: [num_blocks, block_size, Hkv, D] (block_size any
    power of two, 16 or 32 typically); block_table: [B, max_blocks] int32/int64, the cache
    block of each block of BLOCK_SIZE tokens of each sequence; seq_lens: [B] int32/int64,
    tokens of each sequence (clamped to [0, max_blocks * block_size]; 0 gives zeros).
    Sequence b attends its tokens 0 .. seq_lens[b]-1. Hq a multiple of Hkv; f32, f16 or
    bf16 (one dtype); D a power of two from 16 to 256; scale defaults to 1/sqrt(D).
    Returns o [B, Hq, D] of q's kind and dtype (written into `out` when given). Block ids outside [0, num_blocks) read
    zeros (never out of bounds).

    The context is split into `num_splits` shares processed by separate programs and
    merged by a second kernel (default: `decode_plan`'s model); 1 runs a single kernel.
    `config` overrides the plan's tiles (BN, WARPS, STAGES, STATIC) and QS (True: the kernel
    that reads q inside its key loop, attention_decode_split_qs; the plan's for STATIC walks
    only with decode_model.QS_STATIC on, which it is not: never timed on a GPU).
    """
    dt = L.check_float("q", q, ndim=3)
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        L.check_float(name, x, ndim=4)
        L.check_same_dtype(name, x, dt)
    L.check_int("block_table", block_table, ndim=2)
    L.check_int("seq_lens", seq_lens, ndim=1)
    L.kind_of(q, k_cache, v_cache, block_table, seq_lens)
    b, hq, d = (int(n) for n in q.shape)
    nb, bs, hkv = (int(n) for n in k_cache.shape[:3])
    _head_dim("q", q)
    L.check_shape("k_cache", k_cache, (nb, bs, hkv, d))
    L.check_shape("v_cache", v_cache, (nb, bs, hkv, d))
    if bs < 1 or bs & (bs - 1) or bs > 256:
        raise ValueError(M.bad_block_size(bs))
    if hkv == 0 or hq % hkv:
        raise ValueError(M.decode_heads(hq, hkv))
    maxb = int(block_table.shape[1])
    if int(block_table.shape[0]) != b:
        raise ValueError(M.block_table_rows(b, block_table.shape))
    L.check_shape("seq_lens", seq_lens, (b,))
    o = _out(out, q, (b, hq, d), dt)
    if b * hq == 0:
        return o
    g = hq // hkv
    if nb == 0 or maxb == 0:  # no cache at all: every sequence is empty
        L.untracked("a write outside a kernel")
        o[...] = 0
        return o
    if num_splits is not None and not 1 <= int(num_splits) <= 1024:
        raise ValueError(M.bad_num_splits(num_splits))
    pl = decode_plan(b, hq, hkv, d, maxb, bs, dt, L.sm_count(q), None if num_splits is None else int(num_splits))
    ns = pl.splits
    table = L.contiguous(L.astype(block_table, "i32"))
    lens = L.contiguous(L.astype(seq_lens, "i32"))
    q4 = L.reshape(L.contiguous(q), (b, hkv, g, d))
    # STATIC (the plan's for one share over a table of <= 256 tokens): the whole width is walked, so the first
    # block-table read does not wait for seq_lens (one dependent round trip fewer on a latency-bound call)
    cfg = dict(pl.config, **(config or {}))
    direct = ns == 1
    # QS (the plan's, or config's): the kernel that reads q inside its key loop (streamed with K and V; short walks)
    kname = "attention_decode_split_qs" if cfg.pop("QS", pl.qs) else "attention_decode_split"
    split = L.load("attention_decode", kernel=kname, T=dt, BS=bs, D=d,
                   GP=max(16, L.next_pow2(g)), DIRECT=direct, **cfg)  # >= 16 rows: mma.sync products
    n_o = b * hq * ns * d  # the shares' outputs and log-sum-exps in one workspace (one allocation)
    ws = L.empty(q, (n_o + b * hq * ns,), "f32")
    o_part, lse_part = L.reshape(ws[:n_o], (b, hkv, g, ns, d)), L.reshape(ws[n_o:], (b, hkv, g, ns))
    L.run(split, kname, q4, L.contiguous(k_cache), L.contiguous(v_cache), table, lens,
          o_part, lse_part, L.reshape(o, (b, hkv, g, d)), scale=_scale(scale, d))
    if not direct:
        nsp = L.next_pow2(ns)
        combine = L.load("attention_decode", kernel="attention_decode_combine", T=dt, D=d, NSP=nsp,
                         WARPS=8 if nsp * d >= 8192 else 4)
        L.run(combine, "attention_decode_combine", L.reshape(o_part, (b, hq, ns, d)),
              L.reshape(lse_part, (b, hq, ns)), o)
    return o
