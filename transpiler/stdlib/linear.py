"""linear (torch.nn.functional.linear) and linear_qkv, on stdlib_kernels/linear.tile (the gated MLP: stdlib/gated.py).

The wrapper picks the kernel and tile sizes: for decode (M <= 16) on the GPU `linear_swap(_bias)`,
which puts the weight rows on the tensor cores' 64-row side (y.T = w @ x.T) and streams the weights
in one pass (or, where few weight tiles leave SMs idle, `linear_swap_splitk` over S shares of K + `splitk_sum(_bias)`:
swap_split.py's model); for 16 < M <= 64 `linear_splitk` + `splitk_sum(_bias)` where too few column tiles would
leave SMs idle; `linear_any` for other K (16-row mma.sync tiles at M <= 16 there and in the
interpreter). Everywhere else (`path_choice`) tilex.autoconfig's resource model predicts, from each kernel's IR,
the one-pass `linear` / `linear_bias` over `_SPACE` (BM, BN, stages), `linear_persistent` (one block per SM walking
the tiles; no bias) and `linear_splitk_tiles` + `splitk_sum(_bias)` (K split S ways, any M) and takes the fastest
(split-K only when predicted SPLIT_MARGIN faster), memoized per shape; the gated MLP (stdlib/gated.py) takes its tiles
from the same model (`_model_config` over `_GATED_SPACE`). On by default since the H200 run of session 19 (benchmarks/bench_tma_store.py; switches for A/B): `_TMA_STORE` (the
persistent path runs `linear_persistent_tma`, tiles stored from shared memory by TMA, where N % 8 == 0: 0.78 -> 0.91x
cuBLAS at M=4096 K=2048 N=2304 with 128x128 tiles), `_TMA3` (a `linear_persistent_tma3` path, 128 x 192 tiles: 1.01x
there) and `_TMA5` (`linear_persistent_tma5`, 128 x 160 tiles: 1.02x at M=511 K=13824 N=5120, from 0.73x). A configuration stored by
`tilex tune` for the shape's bucket overrides the one-pass tiles. Since session 20: `_DEEP_ROWS` (on: 128 < M <= 256
runs the persistent 128x128 tiles with 6 stages, 0.85 -> 0.88-0.89x cuBLAS at M=256 on the H200); `_STREAMK`
(`linear_streamk`, stream-K) and `_SPLIT_LAST` (`linear_splitk_last`, split-K in one launch) are off: both correct
on the H200, neither faster than the paths above where measured (benchmarks/bench_gemm20.py).
"""
from __future__ import annotations

import os
import time

from . import _launch as L
from . import messages as M
from . import swap_split

# tile sizes by the number of rows (tokens); measured on an H200, see benchmarks/RESULTS.md
_LARGE = dict(BM=128, BN=256, BK=64, STAGES=4)
_MEDIUM = dict(BM=64, BN=128, BK=64, STAGES=6)
_SKINNY = dict(BM=16, BN=64, BK=64, STAGES=6)
_GATED = dict(BM=128, BN=128, BK=64, STAGES=4)
_GATED_SKINNY = dict(BM=16, BN=32, BK=64, STAGES=6)


_SPLITK = dict(BM=64, BN=256, BK=64, STAGES=4)  # `tilex tune` on an H200, M=16 N=13824 K=5120
# large M without a bias (and the gated MLP): one block per SM walks the tiles (the ring refills during
# the epilogue); 1.01-1.03x the one-tile-per-block kernel on the H200 (benchmarks/bench_persistent.py)
_PERSISTENT = True
# the persistent path stores its tiles from shared memory by TMA where y's rows are 16-byte aligned (N % 8 == 0),
# linear_persistent_tma (docs/stdlib.md); False: linear_persistent's register stores (H200, session 19, same tiles:
# 0.62-0.87x -> 0.65-0.98x cuBLAS at the seven shapes of bench_tma_store.py, every one faster)
_TMA_STORE = True
SMS = 132  # streaming multiprocessors of an H100/H200: enough tiles to fill them twice needs no split


def _splits(m: int, n: int, k: int) -> int:
    """Split-K factor for decode shapes: few rows and too few N tiles to keep every SM streaming weights."""
    if m > _SPLITK["BM"]:
        return 1
    tiles = -(-n // _SPLITK["BN"])
    # one block per SM (the ring takes most of shared memory): fill the SMs once, no second partial wave
    return max(1, min(SMS // tiles, k // (4 * _SPLITK["BK"])))


def _use_split_kernels(m: int, n: int, k: int) -> bool:
    """Whether linear() takes linear_splitk + splitk_sum(_bias): when K is split (S > 1) and the
    swapped-operand decode kernels do not apply (16 < M <= 64)."""
    return k % 8 == 0 and m > _SWAP_ROWS and _splits(m, n, k) > 1


_SWAP_ROWS = 16  # linear_swap's x tile (the wgmma N side): decode batches up to 16 tokens


def _use_swap(m: int, k: int, gpu: bool) -> bool:
    """Whether linear() takes linear_swap(_bias): decode shapes (M <= 16) on the GPU with K % 8 == 0."""
    return gpu and 0 < m <= _SWAP_ROWS and k % 8 == 0


def _swap_config(n: int) -> dict:
    """linear_swap's tiles (H200, bench_decode_paths.py --swap, 2026-11-30; ms vs cuBLAS in the same run):
    64 weight rows x 128-deep stages x 6 while N / 64 blocks fit on the SMs once (M=1 K=5120 N=5120 0.0177
    vs 0.0177; K=13824 N=5120 0.0400 vs 0.0416), else 128 rows x 64-deep x 6, two blocks per SM (M=1 N=13824
    0.0373 vs 0.0388, N=152064 0.361 vs 0.371; M=16 N=13824 0.0387 vs 0.0382)."""
    if -(-n // 64) <= SMS:
        return dict(BN=64, BM=_SWAP_ROWS, BK=128, STAGES=6)
    return dict(BN=128, BM=_SWAP_ROWS, BK=64, STAGES=6)


def _swap_shares(x2, dt: str, n: int, k: int) -> int:
    """K shares of a swapped decode GEMM (swap_split.py's model: split only where idle SMs pay for the sum)."""
    return swap_split.shares(n, k, _swap_config(n)["BN"], L.sm_count(x2), 4 if dt == "f32" else 2)


def _sum_partials(part, bias, y, dt: str) -> None:
    """y = the sum of the f32 partials part [S, M, N] (+ bias), rounded once: splitk_sum(_bias)."""
    kernel = "splitk_sum_bias" if bias is not None else "splitk_sum"
    L.run(L.load("linear", kernel=kernel, T=dt), kernel, *((part, bias, y) if bias is not None else (part, y)))


def _partials(x2, weight, dt: str, m: int, n: int, k: int):
    """f32 partial products [S, m, n] of x2 @ weight.T for the fused decode epilogues and the split decode path
    (S shares of K): for decode shapes on the GPU linear_swap_splitk with swap_split.py's S (only the shares that
    hold K columns: a share is a whole number of BK-deep stages, so K=3584 in 8 asked shares of 512 is 7), else
    linear_splitk's S shares."""
    if _use_swap(m, k, L.kind_of(x2) != "numpy"):
        s = _swap_shares(x2, dt, n, k)
        cfg = _tuned("linear_swap_splitk", dt, m, n, k, _swap_config(n), S=s)
        bk = cfg["BK"]
        chunk = -(-(-(-k // s)) // bk) * bk   # the kernel's share of K: cdiv(K, S) rounded up to whole BK stages
        part = L.empty(x2, (-(-k // chunk), m, n), "f32")
        L.run(L.load("linear", kernel="linear_swap_splitk", T=dt, **cfg), "linear_swap_splitk", x2, weight, part)
        return part
    part = L.empty(x2, (max(1, _splits(m, n, k)), m, n), "f32")
    L.run(L.load("linear", T=dt, **_SPLITK), "linear_splitk", x2, weight, part)
    return part


# linear, linear_bias and gated_mlp take their tiles from tilex.autoconfig's model over these spaces (the decode
# paths above, swap and split-K, stay as measured); _MODEL = False takes the measured table below instead (A/B)
_MODEL = True
_SPACE = dict(BM=(16, 64, 128), BN=(64, 128, 256), BK=(64,), STAGES=(3, 4, 5, 6))
_GATED_SPACE = dict(BM=(16, 64, 128), BN=(32, 64, 128), BK=(64,), STAGES=(3, 4, 5, 6))
_CHOSEN: dict = {}  # (kernel, dtype, m, n, k) -> the model's tiles: one dict lookup per call after the first
_MAX_CHOSEN = 4096


def _model_config(kernel: str, dt: str, m: int, n: int, k: int, space: dict, table: dict) -> dict:
    """The tiles of `kernel` for this shape: the model's choice over `space` (`tilex.autoconfig.choose` on the
    file as compiled for `dt`, at the model bucket of (m, n, k)), or `table` with `_MODEL` off."""
    key = (kernel, dt, m, n, k)
    hit = _CHOSEN.get(key)
    if hit is None:
        if _MODEL:
            from ..autoconfig import choose

            hit = choose(L.source("linear"), "linear.tile", kernel, dict(M=m, N=n, K=k),
                         "sm_90a", defines=dict(T=dt), space=space, tuned=False).defines
        else:
            hit = table
        if len(_CHOSEN) >= _MAX_CHOSEN:
            _CHOSEN.clear()
        _CHOSEN[key] = hit = dict(hit)
    return dict(hit)


# split-K at any M (linear_splitk_tiles + splitk_sum): the model weighs it against the one-pass tiles
_SPLIT_SPACE = dict(BM=(64, 128), BN=(128, 256), BK=(64,), STAGES=(4,))
_PERSISTENT_SPACE = dict(BM=(128,), BN=(128, 256), BK=(64,), STAGES=(4,))
_SPLIT_S = (2, 4, 8)  # powers of two: the model buckets S <= 16 that way
_PATHS: dict = {}  # (kernel, dtype, m, n, k, switches) -> (path, tiles, S, {path: predicted us})


def _estimate_us(kernel: str, dt: str, shapes: dict, space: dict) -> tuple[dict, float]:
    """(the model's tiles over `space`, its predicted microseconds) for `kernel` of linear.tile at `shapes`."""
    from ..autoconfig import choose

    ch = choose(L.source("linear"), "linear.tile", kernel, shapes, "sm_90a", defines=dict(T=dt), space=space,
                tuned=False)
    return dict(ch.defines), ch.candidates[0].estimate.time_us


def _split_shares(m: int, n: int, k: int) -> tuple[int, ...]:
    """The K splits worth predicting: each share at least 4 steps of 64, at most 8 waves of the largest tiles, and
    the f32 partials' traffic (written and read back: 8 S M N bytes) below the weights' (2 N K bytes): split-K
    serves shapes whose operand streaming dominates, not ones whose output does."""
    tiles = -(-m // max(_SPLIT_SPACE["BM"])) * -(-n // max(_SPLIT_SPACE["BN"]))
    return tuple(s for s in _SPLIT_S if k // s >= 256 and tiles * s <= 8 * SMS and 8 * s * m * n < 2 * n * k)


def path_choice(kernel: str, dt: str, m: int, n: int, k: int) -> tuple[str, dict, int, dict]:
    """How `linear` (kernel "linear" or "linear_bias") runs M x K x N with K % 8 == 0 outside the decode paths:
    (path, tiles, S, {candidate: predicted us}). "tc": one pass of `kernel` with the model's tiles over `_SPACE`;
    "splitk": linear_splitk_tiles over K shares (S) + splitk_sum(_bias), each predicted by the same model from
    its IR (the partials' bytes included), when that is predicted faster; "persistent" (linear_persistent) and,
    with `_TMA3` / `_TMA5`, "persistent3" / "persistent5" (linear_persistent_tma3 / _tma5, 128 x 192 / 128 x 160
    tiles, `_tma3_us`). Memoized per shape."""
    key = (kernel, dt, m, n, k, _TMA_STORE, _TMA3, _TMA5, TMA_STORE_SAVES_US, _STREAMK, STREAMK_MARGIN,
           STREAMK_FIXUP_US, STREAMK_GBS, _SPLIT_LAST, SPLIT_LAST_US, _DEEP_ROWS, DEEP_STAGES)
    hit = _PATHS.get(key)
    if hit is not None:
        return hit
    tc, t_tc = _estimate_us(kernel, dt, dict(M=m, N=n, K=k), _SPACE)
    times = {"tc": t_tc}
    best = ("tc", tc, 1, t_tc)
    per = None
    if kernel == "linear" and _PERSISTENT:
        per, t_per = _estimate_us("linear_persistent", dt, dict(M=m, N=n, K=k), dict(_PERSISTENT_SPACE, PROGRAMS=(SMS,)))
        t_reg = t_per  # with register stores
        if _TMA_STORE and n % 8 == 0:  # linear_persistent_tma: each tile round's epilogue shorter
            t_per -= TMA_STORE_SAVES_US * _rounds(m, n, per["BM"], per["BN"]) * per["BN"] / 128
        times["persistent"] = t_per
        if t_per < best[3]:
            best = ("persistent", {n_: v for n_, v in per.items() if n_ != "PROGRAMS"}, 1, t_per)
        for wide, (on, _, tiles, cols, by_tma) in _WIDE.items():
            if globals()[on] and n % 8 == 0:
                t3 = _tma3_us(m, n, per, t_per if by_tma else t_reg, cols)
                times[wide] = t3
                if t3 < best[3] * TMA3_MARGIN:
                    best = (wide, dict(tiles), 1, t3)
    if _STREAMK and n % 8 == 0:  # linear_streamk (bias or not): from the persistent kernel's time per tile round
        if per is None:
            per, t_per = _estimate_us("linear_persistent", dt, dict(M=m, N=n, K=k),
                                      dict(_PERSISTENT_SPACE, PROGRAMS=(SMS,)))
            t_per -= TMA_STORE_SAVES_US * _rounds(m, n, per["BM"], per["BN"]) * per["BN"] / 128 if _TMA_STORE else 0.0
        t_sk = _streamk_us(m, n, k, per, t_per)
        times["streamk"] = t_sk
        if t_sk < best[3] * STREAMK_MARGIN:
            best = ("streamk", dict(_STREAMK_TILES), 1, t_sk)
    summer = "splitk_sum_bias" if kernel == "linear_bias" else "splitk_sum"
    split = None
    for s in _split_shares(m, n, k):
        cfg, t_part = _estimate_us("linear_splitk_tiles", dt, dict(M=m, N=n, K=k, S=s), _SPLIT_SPACE)
        _, t_sum = _estimate_us(summer, dt, dict(M=m, N=n, S=s), {})
        t = t_part + (SPLIT_LAST_US if _SPLIT_LAST else t_sum + SPLIT_LAUNCH_US)
        times[f"splitk S={s}"] = t
        if split is None or t < split[3]:
            split = ("splitk", cfg, s, t)
    if split is not None and split[3] < best[3] * SPLIT_MARGIN:
        best = split
    if _DEEP_ROWS and best[0] == "persistent" and best[1].get("BN") == 128 and -(-m // 128) == 2:
        best = ("persistent", dict(best[1], STAGES=DEEP_STAGES), 1, best[3])
    hit = (best[0], best[1], best[2], times)
    if len(_PATHS) >= _MAX_CHOSEN:
        _PATHS.clear()
    _PATHS[key] = hit
    return hit


# 128 < M <= 256 (two rows of 128-row tiles, every weight tile read by two programs): the persistent kernel's 128x128
# tiles with 6 stages in flight instead of the model's 4 (which does not see the weights' DRAM latency). H200, each
# A/B in one process against cuBLAS: M=256 K=5120 N=55296 0.849 -> 0.893 (session 19), 0.848 -> 0.880 (session 20);
# M=256 K=5120 N=5120 0.828 -> 0.892 (session 19); one row (M=100 K=896 N=9728) 0.979 -> 0.964 and M=4096 K=2048
# N=2560 0.966 -> 0.936, so 4 stays there
_DEEP_ROWS = True
DEEP_STAGES = 6

# 128 x 192 tiles (linear_persistent_tma3: three 64-column products issued as one m64n192 wgmma). The resource model
# reads that kernel as three 128x64 products (x counted thrice, n = 64 wgmmas), so its time is derived from the
# persistent kernel's prediction instead: the same time per tile column of 128 (the FLOP rate of 128x128, ncu: both
# tile shapes keep the tensor pipe ~75% busy while an SM is active), times the tile rounds each needs on SMS SMs.
# linear_persistent_tma5 (five 32-column products, 128 x 160 tiles) likewise. On since session 19's H200 run: the model's
# picks there were the measured fastest kernels (M=4096 K=2048 N=2304: 128x192 0.0541 ms, cuBLAS 0.0549; M=511 K=13824
# N=5120: 128x160 0.0996, cuBLAS 0.1012, 128x192 0.1067, 128x256 0.1345)
_TMA3 = True
_TMA5 = True
_TMA3_TILES = dict(BM=128, BC=64, BK=64, STAGES=4)
# path: (its switch, kernel, tiles, columns a tile, whether its stores go by TMA: 64-column blocks)
_WIDE = {"persistent3": ("_TMA3", "linear_persistent_tma3", _TMA3_TILES, 192, True),
         "persistent5": ("_TMA5", "linear_persistent_tma5", dict(BM=128, BC=32, BK=64, STAGES=4), 160, False)}
TMA3_MARGIN = 0.97  # taken when predicted 3% faster


# per 128 columns of a tile round: the register epilogue's time less the TMA store's (H200, session 19, same tiles:
# 1.5-2.0 us at 128x128 (M=100 K=896 N=9728; M=4096 K=2048 N=2304/2560), 2.4 at 128x256 (M=511 K=13824 N=5120))
TMA_STORE_SAVES_US = 2.0


def _rounds(m: int, n: int, bm: int, bn: int) -> int:
    """Tile rounds of a persistent kernel with one block per SM: tiles / SMS, rounded up."""
    return -(-(-(-m // bm) * -(-n // bn)) // SMS)


def _tma3_us(m: int, n: int, per: dict, t_per: float, cols: int = 192) -> float:
    """Predicted us of a persistent kernel of 128 x `cols` tiles (linear_persistent_tma3: 192, _tma5: 160) at M x N
    from the persistent kernel's tiles `per` and time `t_per`: the same time per 128 columns of a tile round."""
    unit = t_per / (_rounds(m, n, per["BM"], per["BN"]) * per["BN"] / 128)  # us per 128 columns of a tile round
    return unit * _rounds(m, n, 128, cols) * cols / 128


# stream-K (linear_streamk, 128 x 128 tiles, one block per SM): whole rounds of tiles, then the last round's K steps
# shared evenly, so its time is the persistent kernel's per tile round times tiles / SMS (a fraction of a round, not
# rounded up), at least the operands' bytes at STREAMK_GBS, plus STREAMK_FIXUP_US where a tail is shared (partials
# written, read back and summed by the program completing each tile)
_STREAMK = False  # off: slower than the persistent kernels wherever measured (H200, session 20, bench_gemm20.py)
_STREAMK_TILES = dict(BM=128, BN=128, BK=64, STAGES=4)
STREAMK_FIXUP_US = 2.0
STREAMK_GBS = 4000.0
STREAMK_MARGIN = 0.97  # taken when predicted 3% faster


def _streamk_us(m: int, n: int, k: int, per: dict, t_per: float) -> float:
    """Predicted us of linear_streamk at M x K x N from the persistent kernel's tiles `per` and time `t_per`."""
    bm, bn = _STREAMK_TILES["BM"], _STREAMK_TILES["BN"]
    unit = t_per / (_rounds(m, n, per["BM"], per["BN"]) * per["BN"] / 128)  # us per 128 columns of a tile round
    tiles = -(-m // bm) * -(-n // bn)
    mem = 2 * (m * k + n * k + m * n) / (STREAMK_GBS * 1e3)
    return max(unit * tiles / SMS * bn / 128, mem) + (STREAMK_FIXUP_US if tiles % SMS else 0.0)


_COUNTERS: dict = {}  # (array kind, device) -> the i32 tile counters of linear_streamk / linear_splitk_last
_OLD_COUNTERS: list = []  # replaced (smaller) buffers: a CUDA graph captured with one still points at it


def _counters(like, n: int):
    """At least `n` zero i32 on `like`'s device, left zero by each linear_streamk / linear_splitk_last launch (a tile's
    completing program resets its counter): one buffer per device serves every call, replayed by the fast path
    (`L.kept`). Concurrent calls on two streams of one device would share it (the library uses the current stream)."""
    kind = L.kind_of(like)
    index = like.device.index if kind == "torch" else like.device.id
    key = (kind, index)
    buf = _COUNTERS.get(key)
    if buf is None or int(buf.shape[0]) < n:
        size = max(n, 1 << 16, 2 * int(buf.shape[0]) if buf is not None else 0)
        if kind == "torch":
            import torch
            new = torch.empty(size, dtype=torch.int32, device=like.device)
        else:
            import cupy
            with like.device:
                new = cupy.empty(size, dtype=cupy.int32)
        new[...] = 0
        if buf is not None:
            _OLD_COUNTERS.append(buf)
        _COUNTERS[key] = buf = new
    return L.kept(buf)  # a replay of the call (the fast path) launches with the same buffer


def _last_done(kernel: str, x2, weight, bias, y, dt: str, m: int, n: int, tiles: dict, part_shape: tuple,
               **defines) -> None:
    """y = x2 @ weight.T (+ bias) in one launch of `kernel` on the GPU: linear_streamk or linear_splitk_last, whose
    f32 partials (`part_shape`) the program completing a tile (found with the tile counters) sums."""
    part = L.empty(x2, part_shape, "f32")
    count = _counters(x2, -(-m // tiles["BM"]) * -(-n // tiles["BN"]))
    extra = dict(BIAS=True) if bias is not None else {}
    mod = L.load("linear", kernel=kernel, T=dt, **tiles, **defines, **extra)
    # without BIAS the kernel never reads b: any [n] array of the dtype will do (the weight's first n values)
    b = bias if bias is not None else L.reshape(weight, (int(weight.shape[0]) * int(weight.shape[1]),))[:n]
    L.run(mod, kernel, x2, weight, b, part, count, y)


# split-K in one launch (linear_splitk_last: the last share of each tile sums the partials) instead of
# linear_splitk_tiles + splitk_sum(_bias); SPLIT_LAST_US: its summing, in place of the second kernel and launch
_SPLIT_LAST = False  # off: no faster than the two kernels (H200, session 20: 0.0409 vs 0.0404 ms, M=100 K=14336 N=3584)
SPLIT_LAST_US = 1.5
SPLIT_LAUNCH_US = 2.0  # the second launch (splitk_sum) and the dependency between the two, in a CUDA graph
SPLIT_MARGIN = 0.93  # split only when predicted 7% faster (H200 sweep, 2026-12-01: M=511 K=13824 N=5120 split predicted
# 6% faster, measured slower than one pass; M=100 K=14336 N=3584 predicted 8% faster, measured 25% faster)


def _config(m: int, skinny: dict, medium: dict, large: dict) -> dict:
    """Tile sizes by the number of rows: decode (<= 16), small batches (<= 64), the rest."""
    return skinny if m <= 16 else medium if m <= 64 else large


def _flatten(x, k_name="x"):
    L.check_rank(k_name, x, ndim_min=1)
    x = L.contiguous(x)
    k = int(x.shape[-1])
    m = 1
    for n in x.shape[:-1]:
        m *= int(n)
    return L.reshape(x, (m, k)), m, k


_TUNED: dict = {}  # (kernel, dtype, m, n, k, sizes, cache dir, tune.WRITES) -> (when asked, stored defines)
TUNED_RECHECK_S = 1.0  # a shape's answer is reused this long: a store written by another process shows within it


def _tuned(kernel: str, dt: str, m: int, n: int, k: int, default: dict, **sizes: int) -> dict:
    """`default` updated with the configuration `tilex tune` stored for this shape's bucket (`sizes`: the
    kernel's other size symbols, e.g. S of the split-K kernels, which the bucket key includes).

    Asked of the store at most once per TUNED_RECHECK_S per shape (a dict lookup otherwise: the store's stat
    and digest cost ~10 us, a third of an eager call's host time); a `tilex tune` in this process
    (TuneStore.put) is seen at once, one in another process within TUNED_RECHECK_S."""
    from .. import tune

    key = (kernel, dt, m, n, k, tuple(sorted(sizes.items())), os.environ.get("TILEX_CACHE_DIR"), tune.WRITES)
    now = time.monotonic()
    hit = _TUNED.get(key)
    if hit is not None and now - hit[0] < TUNED_RECHECK_S:
        return {**default, **hit[1]}
    try:
        from ..api import tuned_defines

        # the tuned store is keyed by the file's text and the dtype parameters that are not the defaults
        got = tuned_defines(L.source("linear"), kernel, dict(M=m, N=n, K=k, **sizes),
                            dtypes=L.changed_dtypes("linear", kernel, T=dt))
    except Exception:  # no GPU, no store: the defaults
        got = {}
    if len(_TUNED) >= 4096:
        _TUNED.clear()
    _TUNED[key] = (now, dict(got))
    return {**default, **got}


def _check_linear(x, weight, x_ndim=None):
    """x float of a supported dtype, weight [out, in] of the same: (dtype, x as [m, k], m, k, n)."""
    dt = L.check_float("x", x, ndim=x_ndim)
    L.check_rank("weight", weight, ndim=2)
    L.check_same_dtype("weight", weight, dt)
    x2, m, k = _flatten(x)
    n = int(weight.shape[0])
    if int(weight.shape[1]) != k:
        raise ValueError(M.linear_weight(k, weight.shape))
    return dt, x2, m, k, n


@L.fastpath
def linear(x, weight, bias=None):
    """y = x @ weight.T (+ bias), weight [out, in] as in torch.nn.functional.linear; x [..., in] -> [..., out]."""
    dt, x2, m, k, n = _check_linear(x, weight)
    weight = L.contiguous(weight)
    if bias is not None:
        L.check_same_dtype("bias", bias, dt)
        L.check_shape("bias", bias, (n,))
        bias = L.contiguous(bias)
    if k == 0:  # an empty sum is zero (+ bias), as in torch; kernels take empty operands only with empty grids
        y = L.full(x2, (m, n), 0.0)
        if bias is not None:
            y[...] = bias
        return L.reshape(y, tuple(x.shape[:-1]) + (n,))
    y = L.empty(x2, (m, n))
    gpu = L.kind_of(x2) != "numpy"
    if m and n and _use_split_kernels(m, n, k) and gpu:
        # few rows: f32 partial sums over K shares (S > 1), then their sum (+ bias)
        _sum_partials(_partials(x2, weight, dt, m, n, k), bias, y, dt)
    elif m and n:
        if _use_swap(m, k, gpu) and _swap_shares(x2, dt, n, k) > 1:  # few weight tiles: K split, then summed
            _sum_partials(_partials(x2, weight, dt, m, n, k), bias, y, dt)
            return L.reshape(y, tuple(x.shape[:-1]) + (n,))
        if _use_swap(m, k, gpu):
            kernel = "linear_swap_bias" if bias is not None else "linear_swap"
            cfg = _tuned(kernel, dt, m, n, k, _swap_config(n))
        elif k % 8 == 0:
            kernel = "linear_bias" if bias is not None else "linear"
            path, tiles, splits, _ = path_choice(kernel, dt, m, n, k) if _MODEL else ("tc", None, 1, None)
            if path == "streamk" and gpu:  # a block per SM (N % 8 == 0)
                p = L.sm_count(x2)
                _last_done("linear_streamk", x2, weight, bias, y, dt, m, n, tiles, (2 * p, tiles["BM"], tiles["BN"]),
                           PROGRAMS=p)
                return L.reshape(y, tuple(x.shape[:-1]) + (n,))
            if path == "splitk" and gpu and _SPLIT_LAST:
                _last_done("linear_splitk_last", x2, weight, bias, y, dt, m, n, tiles, (splits, m, n))
                return L.reshape(y, tuple(x.shape[:-1]) + (n,))
            if path == "splitk" and gpu:
                part = L.empty(x2, (splits, m, n), "f32")
                L.run(L.load("linear", kernel="linear_splitk_tiles", T=dt, **tiles), "linear_splitk_tiles", x2,
                      weight, part)
                _sum_partials(part, bias, y, dt)
                return L.reshape(y, tuple(x.shape[:-1]) + (n,))
            if tiles is None:  # _MODEL off: the measured table (A/B)
                tiles = _config(m, _SKINNY, _MEDIUM, _LARGE)
                path = "persistent" if tiles == _LARGE and m > 64 and _PERSISTENT and kernel == "linear" else "tc"
            cfg = _tuned(kernel, dt, m, n, k, tiles)
            if path == "persistent" and gpu and cfg == tiles:
                kernel = "linear_persistent_tma" if n % 8 == 0 and _TMA_STORE else "linear_persistent"
                cfg = dict(cfg, PROGRAMS=L.sm_count(x2))
            elif path in _WIDE:
                kernel, cfg = _WIDE[path][1], dict(tiles, PROGRAMS=L.sm_count(x2))
        else:
            kernel = "linear_any_bias" if bias is not None else "linear_any"
            cfg = dict(BM=64 if m > 16 else 16, BN=128 if m > 16 else 64, BK=32, STAGES=4)
        mod = L.load("linear", kernel=kernel, T=dt, **cfg)
        args = (x2, weight, bias, y) if bias is not None else (x2, weight, y)
        L.run(mod, kernel, *args)
    return L.reshape(y, tuple(x.shape[:-1]) + (n,))


def _check_qkv(x, weight, q_size, kv_size, bias, x_ndim=None):
    """Checks shared by the fused-[q | k | v] wrappers: (dtype, x as [m, k], m, k, q_size, kv_size)."""
    dt = L.check_float("x", x, ndim=x_ndim)
    L.check_rank("weight", weight, ndim=2)
    L.check_same_dtype("weight", weight, dt)
    q_size, kv_size = int(q_size), int(kv_size)
    x2, m, k = _flatten(x)
    n = q_size + 2 * kv_size
    if tuple(int(d) for d in weight.shape) != (n, k):
        raise ValueError(M.qkv_weight(n, k, q_size, kv_size, weight.shape))
    if bias is not None:
        L.check_same_dtype("bias", bias, dt)
        L.check_shape("bias", bias, (n,))
    return dt, x2, m, k, q_size, kv_size


@L.fastpath
def linear_qkv(x, weight, q_size: int, kv_size: int, bias=None):
    """The q, k, v projections of attention from one fused weight [q_size + 2 * kv_size, in]
    (rows: q, then k, then v; bias likewise): returns (q, k, v), each [..., size] and contiguous.

    One `linear_qkv` kernel when in % 8 == 0 and a column tile width of 16 or more divides both
    sizes (every Llama/Qwen shape); otherwise three `linear` calls on row views of the weight.
    Meant for many tokens (prefill); up to 64 rows the split-K `linear` of each projection
    streams the weights better.
    """
    dt, x2, m, k, q_size, kv_size = _check_qkv(x, weight, q_size, kv_size, bias)
    n = q_size + 2 * kv_size
    if bias is not None:
        bias = L.contiguous(bias)
    weight = L.contiguous(weight)
    lead = tuple(x.shape[:-1])
    cfg = _config(m, _SKINNY, _MEDIUM, _LARGE)
    # a column tile width dividing both sizes; 16 at least (the tensor-core paths' smallest N)
    bn = next((b for b in (256, 128, 64, 32, 16) if b <= cfg["BN"] and q_size % b == 0 and kv_size % b == 0), 0)
    if k % 8 or not bn or not (m and q_size and kv_size and k):
        cuts = ((0, q_size), (q_size, q_size + kv_size), (q_size + kv_size, n))
        return tuple(linear(x, weight[a:b], None if bias is None else bias[a:b]) for a, b in cuts)
    q, kk, v = L.empty(x2, (m, q_size)), L.empty(x2, (m, kv_size)), L.empty(x2, (m, kv_size))
    mod = L.load("linear", kernel="linear_qkv", T=dt, **dict(cfg, BN=bn, BIAS=bias is not None))
    # without BIAS the kernel never reads b: any [n] array of the dtype will do (the weight's first n values)
    b = bias if bias is not None else L.reshape(weight, (n * k,))[:n]
    L.run(mod, "linear_qkv", x2, weight, b, q, kk, v)
    return tuple(L.reshape(t, lead + (int(t.shape[1]),)) for t in (q, kk, v))
