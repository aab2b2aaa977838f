"""Where a GEMM with a generated epilogue runs (tilex.backend.epilogue): the way `linear` would run the product,
and whether folding the epilogue into a one-pass tile kernel beats that way plus a separate epilogue kernel.

Paths (`choose`), each a kernel of the backend's generated module for the epilogue:
  "tc"     the one-pass tiles of `linear` (`tile_xwt`: TMA + wgmma on sm_90a), the epilogue on the accumulator
  "swap"   decode rows (M <= 16 on the GPU): `linear_swap`'s product y.T = w @ x.T, the epilogue on its transpose
  "sum"    K split in shares (linear's split paths): f32 partials from the library (`partials`), then one kernel
           sums them and applies the epilogue (the library's splitk_sum with the epilogue in it)
  "apply"  linear() stores the product (its persistent / wide-tile paths), one kernel applies the epilogue

The model for "tc" against linear's persistent paths: folding saves the product's round trip through memory
(written and read back: 2 M N bytes of its dtype each way at COPY_BYTES_PER_US) and one dependent launch
(LAUNCH_US), and costs the difference between the one-pass and the persistent kernel's predicted times
(linear.path_choice's model). Memoized per shape.
"""
from __future__ import annotations

import importlib

from . import _launch as L

_lin = importlib.import_module(".linear", __package__)  # the module (the package's `linear` is its function)

COPY_BYTES_PER_US = 3.8e6  # ~0.9 of an H200's measured copy bandwidth (4.2 TB/s)
LAUNCH_US = 2.0            # a dependent kernel's launch and ramp inside a CUDA graph
_ITEM = {"bf16": 2, "f16": 2, "f32": 4}
_CPU_TILES = dict(BM=64, BN=64, BK=64, STAGES=2, GROUP=8)  # the interpreter: any tiles compute the same values
_SUM_TILES = dict(BM=16, BN=256)
_PLANS: dict = {}
_MAX_PLANS = 4096


def choose(x2, dt: str, m: int, n: int, k: int, bias: bool) -> tuple[str, dict, float]:
    """(path, compile-time parameters of its kernel, the us the fold saves or loses by the model: > 0 saves)
    for x2 [m, k] @ w [n, k].T (+ bias) with K % 8 == 0; x2 None: the interpreter (always "tc")."""
    if x2 is None:
        return "tc", dict(_CPU_TILES, BM=16 if m <= 16 else 64), 0.0
    sms = L.sm_count(x2)
    key = (dt, m, n, k, bias, sms)
    hit = _PLANS.get(key)
    if hit is None:
        hit = _choose_gpu(x2, dt, m, n, k, bias)
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = hit
    return hit[0], dict(hit[1]), hit[2]


def _choose_gpu(x2, dt: str, m: int, n: int, k: int, bias: bool):
    sum_tiles = dict(_SUM_TILES, BM=max(1, min(16, 1 << max(0, m - 1).bit_length())))
    if _lin._use_swap(m, k, True):
        if _lin._swap_shares(x2, dt, n, k) > 1:
            return "sum", sum_tiles, 0.0
        kernel = "linear_swap_bias" if bias else "linear_swap"  # a configuration `tilex tune` stored for it
        return "swap", _lin._tuned(kernel, dt, m, n, k, _lin._swap_config(n)), 0.0
    if _lin._use_split_kernels(m, n, k):
        return "sum", sum_tiles, 0.0
    kernel = "linear_bias" if bias else "linear"
    path, tiles, splits, times = _lin.path_choice(kernel, dt, m, n, k)
    if path == "splitk":
        return "sum", dict(sum_tiles, S=splits, **{f"P{a}": v for a, v in tiles.items()}), 0.0
    if path == "tc":
        return "tc", _tiles(dict(tiles)), 0.0
    saved = 2 * m * n * _ITEM[dt] / COPY_BYTES_PER_US + LAUNCH_US
    gain = times[path] + saved - times["tc"]
    if gain > 0:
        tc = _lin._model_config(kernel, dt, m, n, k, _lin._SPACE, _lin._LARGE)
        return "tc", _tiles(tc), gain
    return "apply", dict(_SUM_TILES, BM=16), gain


def _tiles(t: dict) -> dict:
    return {"BM": t["BM"], "BN": t["BN"], "BK": t["BK"], "STAGES": t["STAGES"], "GROUP": t.get("GROUP", 8)}


def partials(x2, weight, dt: str, m: int, n: int, k: int, params: dict):
    """The f32 partial products [S, m, n] of x2 @ weight.T over K shares that the "sum" path adds: linear's decode
    splits (swap_split.py's shares, or linear_splitk's), or linear_splitk_tiles with the splits and tiles of
    path_choice (`params` S and P<tile>)."""
    if "S" not in params:
        return _lin._partials(x2, weight, dt, m, n, k)
    tiles = {a[1:]: v for a, v in params.items() if a.startswith("P")}
    part = L.empty(x2, (params["S"], m, n), "f32")
    L.run(L.load("linear", kernel="linear_splitk_tiles", T=dt, **tiles), "linear_splitk_tiles", x2, weight, part)
    return part


def product(x2, weight, bias):
    """linear(x2, weight, bias) as the library runs it: the "apply" path's stored product."""
    return _lin.linear(x2, weight, bias)
