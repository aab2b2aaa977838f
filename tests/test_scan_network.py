"""The exchange networks codegen/scan.py emits, run in Python over every thread and slot of a layout: the
C coordinate expressions, the bit runs (`_runs`: conditions and xor masks), the slot pairs and the
lower/upper choice of each step are evaluated as the generated code evaluates them (C integer
expressions over threadIdx.x and tx_s), so a wrong partner, mask or direction shows without a GPU."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from tilex.codegen.scan import _runs
from tilex.layout import Layout, canonical, mma_fragment
from tilex.layout_bits import axis_bits


def c_eval(expr: str, **env) -> int:
    """A C integer expression of the generated code (non-negative operands: / and % are Python's)."""
    py = expr.replace("threadIdx.x", "tid").replace("&&", " and ").replace("||", " or ")
    py = re.sub(r"(?<![/])/(?![/])", "//", py)
    return int(eval(py, {"__builtins__": {}}, env))  # noqa: S307 - generated C of tilex itself


def coords(layout: Layout, axis: int, T: int):
    """coord[tid][s]: the axis coordinate of slot s of thread tid, and the other axes' (the line)."""
    n = layout.slots
    c = [[c_eval(layout.coord(axis, "tx_s"), tid=t, tx_s=s) for s in range(n)] for t in range(T)]
    others = [a for a in range(len(layout.shape)) if a != axis]
    line = [[tuple(c_eval(layout.coord(a, "tx_s"), tid=t, tx_s=s) for a in others) for s in range(n)]
            for t in range(T)]
    return c, line


def before(a, ia, b, ib, desc):
    na, nb = math.isnan(a), math.isnan(b)
    if na or nb:
        return ia < ib if na and nb else (na if desc else nb)
    if a == b:
        return ia < ib
    return a > b if desc else a < b


def exchange(vals, bit, mask_expr, j, T):
    """Partner copies: vals[tid][s] -> the partner's for a lane/warp bit (xor on the thread)."""
    m = c_eval(mask_expr, tx_j=j) if mask_expr is not None else bit.mask
    return [[vals[t ^ m][s] for s in range(len(vals[0]))] for t in range(T)]


def simulate_sort(layout: Layout, axis: int, T: int, x, desc: bool, K: int | None = None):
    """The bitonic loops as emitted (a sort, or top-K's rounds): x[line][coord] -> (values, positions) per
    thread and slot."""
    bits = axis_bits(layout, axis)
    L = 1 << len(bits)
    K = K or L
    c, line = coords(layout, axis, T)
    n = layout.slots
    v = [[x[line[t][s]][c[t][s]] for s in range(n)] for t in range(T)]
    ix = [[int(c[t][s]) for s in range(n)] for t in range(T)]
    runs = _runs(bits, "tx_j")

    def step(j, fwd):  # fwd(coordinate) -> bool, as codegen/scan.py's _step
        hit = [r for r in runs if c_eval(r[0], tx_j=j)]
        assert len(hit) == 1, (j, runs)
        cond, bit, mask = hit[0]
        if bit.where == "slot":
            m = bit.mask
            for t in range(T):
                for s in range(n):
                    if s & m == 0:
                        lo, hi = s, s | m
                        assert c[t][lo] & j == 0 and c[t][hi] == c[t][lo] | j
                        if before(v[t][hi], ix[t][hi], v[t][lo], ix[t][lo], desc) == fwd(c[t][lo]):
                            v[t][lo], v[t][hi] = v[t][hi], v[t][lo]
                            ix[t][lo], ix[t][hi] = ix[t][hi], ix[t][lo]
            return
        pv, pi = exchange(v, bit, mask, j, T), exchange(ix, bit, mask, j, T)
        for t in range(T):
            for s in range(n):
                first = ((c[t][s] & j) == 0) == fwd(c[t][s])
                if before(v[t][s], ix[t][s], pv[t][s], pi[t][s], desc) != first:
                    v[t][s], ix[t][s] = pv[t][s], pi[t][s]

    k = 2
    while k <= K:
        j = k // 2
        while j >= 1:
            step(j, lambda cc, k=k: (cc & k) == 0)
            j //= 2
        k *= 2
    r = K
    while r < L:
        step(r, lambda cc: True)
        j = K // 2
        while j >= 1:
            step(j, lambda cc, r=r: (cc & (2 * r)) == 0)
            j //= 2
        r *= 2
    return v, ix, c, line


def simulate_scan(layout: Layout, axis: int, T: int, x):
    bits = axis_bits(layout, axis)
    c, line = coords(layout, axis, T)
    n = layout.slots
    tot = [[x[line[t][s]][c[t][s]] for s in range(n)] for t in range(T)]
    pre = [row[:] for row in tot]
    for bit in bits:
        if bit.where == "slot":
            par = [[tot[t][s ^ bit.mask] for s in range(n)] for t in range(T)]
        else:
            par = exchange(tot, bit, None, 0, T)
        for t in range(T):
            for s in range(n):
                if c[t][s] & bit.value:
                    pre[t][s] = par[t][s] + pre[t][s]
                tot[t][s] = tot[t][s] + par[t][s]
    return pre, c, line


LAYOUTS = [
    ("blocked [4096] / 256", Layout.of(canonical((4096,), 256)), 0, 256),
    ("blocked [64] / 128 (replicated)", Layout.of(canonical((64,), 128)), 0, 128),
    ("blocked [32, 64] / 128 axis 0", Layout.of(canonical((32, 64), 128)), 0, 128),
    ("blocked [32, 64] / 128 axis 1", Layout.of(canonical((32, 64), 128)), 1, 128),
    ("blocked [64, 32].T axis 1", Layout.of(canonical((64, 32), 128)).transpose(), 1, 128),
    ("mma [64, 64] 4x1 axis 0", Layout.of(mma_fragment((64, 64), 4, 1)), 0, 128),
    ("mma [64, 64] 2x2 axis 1", Layout.of(mma_fragment((64, 64), 2, 2)), 1, 128),
]


def values(layout, axis):
    rng = np.random.default_rng(1)
    shape = layout.shape
    x = np.round(rng.standard_normal(shape) * 3)  # ties
    x.flat[::17] = np.nan
    x = np.moveaxis(x, axis, -1)
    return {tuple(idx): row for idx, row in zip(np.ndindex(x.shape[:-1]), x.reshape(-1, x.shape[-1]))}


@pytest.mark.parametrize("desc", [False, True])
@pytest.mark.parametrize("name,layout,axis,T", LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_sort_network_sorts(name, layout, axis, T, desc):
    x = values(layout, axis)
    v, ix, c, line = simulate_sort(layout, axis, T, x, desc)
    for key, row in x.items():
        want = sorted(range(len(row)), key=lambda i: ((0 if desc else 1) if math.isnan(row[i]) else (1 if desc else 0),
                                                        0 if math.isnan(row[i]) else (-row[i] if desc else row[i]), i))
        for t in range(T):
            for s in range(layout.slots):
                if line[t][s] == key:
                    assert ix[t][s] == want[c[t][s]], (name, key, t, s)


@pytest.mark.parametrize("K", [1, 4, 16])
@pytest.mark.parametrize("name,layout,axis,T", LAYOUTS[1:], ids=[x[0] for x in LAYOUTS[1:]])
def test_topk_network_keeps_the_first_k(name, layout, axis, T, K):
    """argtopk's rounds: coordinates 0 .. K-1 hold the first K of the descending order."""
    x = values(layout, axis)
    v, ix, c, line = simulate_sort(layout, axis, T, x, True, K)
    for key, row in x.items():
        want = sorted(range(len(row)), key=lambda i: (0 if math.isnan(row[i]) else 1, 0 if math.isnan(row[i]) else -row[i], i))
        for t in range(T):
            for s in range(layout.slots):
                if line[t][s] == key and c[t][s] < K:
                    assert ix[t][s] == want[c[t][s]], (name, key, t, s)


@pytest.mark.parametrize("name,layout,axis,T", LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_scan_network_scans(name, layout, axis, T):
    x = {k: np.nan_to_num(r) for k, r in values(layout, axis).items()}
    pre, c, line = simulate_scan(layout, axis, T, x)
    for t in range(T):
        for s in range(layout.slots):
            row = x[line[t][s]]
            assert pre[t][s] == pytest.approx(row[: c[t][s] + 1].sum()), (name, t, s)


def test_topk_network_at_the_library_chunk():
    """The stdlib's first pass: argtopk(t, 64) of a [4096] tile on 256 threads."""
    name, layout, axis, T = LAYOUTS[0]
    x = values(layout, axis)
    v, ix, c, line = simulate_sort(layout, axis, T, x, True, 64)
    row = x[()]
    want = sorted(range(4096), key=lambda i: (0 if math.isnan(row[i]) else 1, 0 if math.isnan(row[i]) else -row[i], i))
    got = {c[t][s]: ix[t][s] for t in range(T) for s in range(layout.slots) if c[t][s] < 64}
    assert [got[i] for i in range(64)] == want[:64]
