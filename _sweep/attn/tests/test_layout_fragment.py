"""Distributed layouts (`tilex.layout`) checked by brute force, on the CPU.

Codegen prints a layout's coordinates, slot maps and reduction plans as C expressions of
`threadIdx.x` and the slot `tx_s`. These tests evaluate exactly those strings in Python for
every thread and slot and compare them with an independent model: the PTX fragment layouts
of mma.sync.m16n8k16 / wgmma.m64nNk16, "every element held exactly once", "the slot that
`slot_map` names holds the element the reader wants", and a simulation of the shuffles and
shared-memory combine a `ReductionPlan` describes.
"""
from __future__ import annotations

import itertools
from collections import Counter
from functools import lru_cache

import numpy as np

import pytest

from tilex.layout import Blocked, Fragment, Layout, canonical, mma_fragment, mma_warp_grid, reduction_plan


# ---- evaluating the generated C expressions (all operands are non-negative: C `/` is floor division),
# vectorized over every thread (axis 0) and slot (axis 1) at once
@lru_cache(maxsize=None)
def _code(expr: str):
    return compile(expr.replace("threadIdx.x", "tid").replace("/", "//"), expr, "eval")


def ev(expr: str, T: int, S: int = 1) -> np.ndarray:
    """expr at every (thread, slot): an int array [T, S]."""
    tid, s = np.arange(T)[:, None], np.arange(S)[None, :]
    return np.broadcast_to(np.asarray(eval(_code(expr), {}, {"tid": tid, "tx_s": s})), (T, S))


def cond(expr: str, T: int) -> np.ndarray:
    """A C condition (`a == 0 && b == 0`, `true`) per thread."""
    out = np.ones(T, dtype=bool)
    if expr != "true":
        for clause in expr.split("&&"):
            lhs, rhs = clause.split("==")
            out &= ev(lhs.strip(), T)[:, 0] == int(rhs)
    return out


def coords(layout: Layout, T: int | None = None) -> np.ndarray:
    """[rank, T, slots]: the coordinates of every thread's every slot."""
    T = T or layout.root.T
    if not layout.dims:
        return np.zeros((0, T, layout.slots), dtype=int)
    return np.stack([ev(layout.coord(a), T, layout.slots) for a in range(len(layout.dims))])


def at(c: np.ndarray, m: np.ndarray) -> np.ndarray:
    """c[:, tid, m[tid, j]] for every thread and j."""
    return np.take_along_axis(c, m[None].astype(np.int64), axis=2)


# ---- the PTX accumulator layouts
FRAGMENTS = [  # (shape, warps_m, warps_n)
    ((16, 16), 1, 1), ((16, 64), 1, 4), ((32, 32), 2, 1), ((64, 64), 2, 2), ((128, 64), 8, 1),
    ((128, 128), 4, 2), ((64, 128), 1, 4), ((128, 256), 8, 1), ((256, 64), 4, 2),
]


def _covers_once(c: np.ndarray, shape) -> None:
    flat = np.ravel_multi_index(tuple(c.reshape(len(shape), -1)), shape)
    assert np.array_equal(np.bincount(flat, minlength=int(np.prod(shape))), np.ones(int(np.prod(shape)), dtype=int))


@pytest.mark.parametrize("shape,wm,wn", FRAGMENTS)
def test_mma_fragment_is_the_ptx_accumulator_layout(shape, wm, wn):
    """Slot (i, j, h, v) of lane 4g+t in warp (pm, pn) is row pm*WM + 16i + 8h + g, column pn*WN + 8j + 2t + v:
    the m16n8k16 D fragment, in the order matmul_mma*.j2 index it (acc[(i * RN + j) * 4 + 2h + v])."""
    frag = mma_fragment(shape, wm, wn)
    L = Layout.of(frag)
    WM, WN = shape[0] // wm, shape[1] // wn
    RM, RN = WM // 16, WN // 8
    assert frag.T == 32 * wm * wn and L.slots == RM * RN * 4
    c = coords(L)
    tid = np.arange(frag.T)[:, None]
    warp, lane = tid // 32, tid % 32
    pm, pn, g, t = warp // wn, warp % wn, lane // 4, lane % 4
    s = np.arange(L.slots)[None, :]
    i, j, h, v = s // (4 * RN), (s // 4) % RN, (s // 2) % 2, s % 2
    assert np.array_equal(c[0], np.broadcast_to(pm * WM + 16 * i + 8 * h + g, c[0].shape))
    assert np.array_equal(c[1], np.broadcast_to(pn * WN + 8 * j + 2 * t + v, c[1].shape))
    _covers_once(c, shape)


@pytest.mark.parametrize("bm,bn", [(64, 64), (128, 128), (128, 256), (256, 64)])
def test_wgmma_fragment_is_the_wgmma_accumulator_layout(bm, bn):
    """wgmma.m64nNk16: warpgroup w's thread 32q + 4g + t holds d[i] at row 64w + 16q + g + 8((i/2)%2),
    column 8(i/4) + 2t + i%2; the plan uses warps_m = BM / 16, warps_n = 1."""
    L = Layout.of(mma_fragment((bm, bn), bm // 16, 1, "wgmma"))
    assert L.slots == bn // 2  # the float (&d)[N/2] the wgmma wrapper takes
    c = coords(L)
    tid = np.arange(bm // 64 * 128)[:, None]
    wg, q, g, t = tid // 128, (tid % 128) // 32, (tid % 32) // 4, tid % 4
    i = np.arange(bn // 2)[None, :]
    assert np.array_equal(c[0], np.broadcast_to(64 * wg + 16 * q + g + 8 * ((i // 2) % 2), c[0].shape))
    assert np.array_equal(c[1], np.broadcast_to(8 * (i // 4) + 2 * t + i % 2, c[1].shape))


def test_mma_warp_grid_shapes():
    assert mma_warp_grid(128, 64, 8) == (8, 1)
    assert mma_warp_grid(128, 128, 8) == (8, 1)
    assert mma_warp_grid(16, 64, 4) == (1, 4)
    assert mma_warp_grid(32, 64, 4) == (2, 2)
    assert mma_warp_grid(16, 64, 8) is None  # 8 warps of 8 columns: not a 16-column multiple
    for m, n, w in itertools.product((16, 32, 64, 128, 256), (16, 32, 64, 128, 256), (1, 2, 4, 8, 16)):
        grid = mma_warp_grid(m, n, w)
        if grid is not None:
            wm, wn = grid
            assert wm * wn == w and m % (16 * wm) == 0 and n % (16 * wn) == 0


# ---- blocked layouts
BLOCKED = [((1024,), 128), ((64, 32), 128), ((16,), 128), ((8, 64), 256), ((2, 1024), 256), ((32, 8, 16), 128),
           ((128, 128), 256), ((4,), 32)]


@pytest.mark.parametrize("shape,T", BLOCKED)
def test_blocked_covers_every_element_equally(shape, T):
    root = canonical(shape, T)
    c = coords(Layout.of(root))
    flat = np.ravel_multi_index(tuple(c.reshape(len(shape), -1)), shape)
    counts = np.bincount(flat, minlength=int(np.prod(shape)))
    assert set(counts.tolist()) == {T // root.distinct}  # replicas: threads past the distinct ones


# ---- derived layouts and slot maps, against a brute-force model
ROOTS_128 = [mma_fragment((32, 32), 2, 2), mma_fragment((64, 32), 4, 1), mma_fragment((64, 64), 4, 1),
             mma_fragment((16, 64), 1, 4), mma_fragment((64, 128), 2, 2), mma_fragment((128, 128), 2, 2),
             canonical((64, 32), 128), canonical((16, 64), 128)]
ROOTS_256 = [mma_fragment((128, 64), 8, 1), mma_fragment((128, 128), 8, 1), mma_fragment((128, 128), 4, 2),
             mma_fragment((64, 64), 2, 4), canonical((2, 1024), 256)]


def _views(root) -> list[Layout]:
    L = Layout.of(root)
    vs = [L, L.transpose()]
    for axis in range(root.rank):
        r = L.reduce(axis)
        vs += [r, L.reduce(axis, keepdims=True), r.expand(0), r.expand(1)]
    if isinstance(root, Fragment):  # the 1-D views infer_memory makes for `t[:, None]` read at a fragment
        vs += [Layout(root, (0,), L.digits), Layout(root, (1,), L.digits)]
    return vs


def _check_slot_map(have: Layout, want: Layout) -> None:
    """Every thread finds, at have-slot slot_map(s), the element want holds at slot s (size-1 axes broadcast)."""
    T = want.root.T
    m = ev(have.slot_map(want), T, want.slots)
    assert m.min() >= 0 and m.max() < have.slots, (str(have), str(want))
    got, exp = at(coords(have, T), m), coords(want, T)
    for a, n in enumerate(have.shape):
        if n != 1:
            assert np.array_equal(got[a], exp[a]), (str(have), str(want), a)


def _key(c: np.ndarray, shape) -> np.ndarray:
    """[T, S] flat element index in `shape` (size-1 axes of `shape` read as coordinate 0)."""
    c = np.stack([c[a] if n != 1 else np.zeros_like(c[a]) for a, n in enumerate(shape)])
    return np.ravel_multi_index(tuple(c), shape)


def _holds(have: Layout, want: Layout) -> bool:
    """Brute force: does every thread hold, somewhere in its slots, every element want asks it for?"""
    T = want.root.T
    h, w = _key(coords(have, T), have.shape), _key(coords(want, T), have.shape)
    return all(np.isin(w[t], h[t]).all() for t in range(T))


@pytest.mark.parametrize("roots", [ROOTS_128, ROOTS_256], ids=["T128", "T256"])
def test_compatible_layouts_have_correct_slot_maps(roots):
    """No false positives: whenever `compatible` says no data moves, the slot map really finds the element,
    across Fragment roots of different widths and warp grids as well as within one root."""
    checked = cross = 0
    views = [v for r in roots for v in _views(r)]
    for have in views:
        for want in views:
            if len(have.dims) != len(want.dims) or any(a != b and a != 1 for a, b in zip(have.shape, want.shape)):
                continue
            if have.compatible(want):
                _check_slot_map(have, want)
                checked += 1
                cross += have.root != want.root
    assert checked > 40 and cross > 4


def test_row_vectors_of_fragments_with_the_same_row_threads_are_compatible():
    """Attention: the row max of s ([128, 64], 8x1 warps) scales acc ([128, 128], 8x1 warps) with no conversion."""
    s = Layout.of(mma_fragment((128, 64), 8, 1))
    acc = Layout.of(mma_fragment((128, 128), 8, 1))
    rowmax = s.reduce(1, keepdims=True)
    want = acc.view_for((128, 1))
    assert rowmax.compatible(want) and _holds(rowmax, want)
    _check_slot_map(rowmax, want)
    assert s.reduce(1).compatible(acc.reduce(1))
    _check_slot_map(s.reduce(1), acc.reduce(1))


@pytest.mark.parametrize("have,want", [
    (((128, 128), 8, 1), ((128, 128), 4, 2)),  # 16 rows per warp vs 32: another warp holds half of them
    (((64, 64), 2, 2), ((64, 128), 1, 4)),
])
def test_row_vectors_of_fragments_with_other_row_threads_are_not_compatible(have, want):
    h = Layout.of(mma_fragment(*have)).reduce(1)
    w = Layout.of(mma_fragment(*want)).reduce(1)
    assert not _holds(h, w)  # the model agrees that data must move
    assert not h.compatible(w)


def test_row_vector_superset_is_a_known_false_negative():
    """4x2 warps of 32 rows hold every row an 8x1 warp of 16 rows wants, but the thread digits differ:
    `compatible` is conservative here (a conversion through shared memory, not a wrong answer)."""
    h = Layout.of(mma_fragment((128, 64), 4, 2)).reduce(1)
    w = Layout.of(mma_fragment((128, 128), 8, 1)).reduce(1)
    assert _holds(h, w) and not h.compatible(w)


def test_column_vectors_across_fragment_roots():
    a = Layout.of(mma_fragment((64, 128), 2, 2)).reduce(0)
    b = Layout.of(mma_fragment((128, 128), 2, 2)).reduce(0)
    assert a.compatible(b) and _holds(a, b)
    _check_slot_map(a, b)
    c = Layout.of(mma_fragment((128, 128), 4, 1)).reduce(0)  # every column in every warp: other lanes
    assert not _holds(a, c) and not a.compatible(c)


def test_replicated_row_view_is_not_matched_across_roots():
    """A 1-D row view that still enumerates column digits (infer_memory's `t[:, None]` layout) holds each row
    several times; across roots `_digit_map` must not invent a map for digits the reader lacks."""
    f1, f2 = mma_fragment((128, 64), 8, 1), mma_fragment((128, 128), 8, 1)
    rep = Layout(f1, (0,), Layout.of(f1).digits)
    assert rep.slots == Layout.of(f1).slots
    assert rep._digit_map(Layout.of(f2).reduce(1)) is None
    assert not rep.compatible(Layout.of(f2).reduce(1))
    assert rep.compatible(Layout(f1, (0,), Layout.of(f1).digits))


@pytest.mark.parametrize("root", ROOTS_128 + ROOTS_256[:3], ids=str)
def test_reduce_slot_map_matches_model(root):
    """reduction(): input slot s of every thread folds into output slot out.slot_map(layout)(s), which must hold
    the same element with the reduced axis dropped (or set to 0 with keepdims)."""
    for L in _views(root):
        c = coords(L)
        for axis in range(len(L.dims)):
            for keep in (False, True):
                out = L.reduce(axis, keepdims=keep)
                m = ev(out.slot_map(L), root.T, L.slots)
                assert m.min() >= 0 and m.max() < out.slots
                got = at(coords(out), m)
                exp = c.copy()
                if keep:
                    exp[axis] = 0
                else:
                    exp = np.delete(exp, axis, axis=0)
                assert np.array_equal(got, exp), (str(L), axis, keep)


def test_view_for_and_expand_broadcast():
    acc = Layout.of(mma_fragment((64, 64), 2, 2))
    for v, shape in ((acc.reduce(1).expand(1), (64, 1)), (acc.reduce(0).expand(0), (1, 64))):
        want = acc.view_for(shape)
        assert v.shape == shape and want.shape == shape
        assert v.compatible(want)
        _check_slot_map(v, want)
        _check_slot_map(v, acc)  # read as a broadcast operand at the full tile's slots
    assert acc.view_for((1, 1)).dims == (None, None)


# ---- reduction plans, simulated
def _simulate(L: Layout, axis: int) -> None:
    """Run what emit.cross_thread prints: in-thread fold, xor shuffles, then one partial per group through shared
    memory. Every thread must end with each element of its output slots counted exactly once."""
    T, n = L.root.T, L.shape[axis]
    out = L.reduce(axis)
    oc = coords(out)                                   # [rank-1, T, out slots]
    okey = _key(oc, out.shape) if out.shape else np.zeros((T, out.slots), dtype=int)
    c = coords(L)
    fold = ev(out.slot_map(L), T, L.slots)
    counts = np.zeros((T, out.slots, n), dtype=int)    # how often each reduced coordinate entered a partial
    np.add.at(counts, (np.arange(T)[:, None], fold, c[axis]), 1)
    plan = reduction_plan(L, axis)
    for off in plan.shuffles:
        assert off < 32
        partner = np.arange(T) ^ off
        assert np.array_equal(okey, okey[partner]), "a shuffle combines different output elements"
        counts = counts + counts[partner]
    if plan.groups > 1:
        g = ev(plan.group_expr, T)[:, 0]
        assert g.min() >= 0 and g.max() < plan.groups
        smem = {}
        for t in np.nonzero(cond(plan.writer, T))[0]:
            for s in range(out.slots):
                key = (int(g[t]), int(okey[t, s]))
                if key in smem:  # replicas may write the same slot, with the same value
                    assert np.array_equal(smem[key], counts[t, s]), "two writers disagree"
                smem[key] = counts[t, s]
        counts = np.stack([np.stack([sum(smem[(q, int(okey[t, s]))] for q in range(plan.groups))
                                     for s in range(out.slots)]) for t in range(T)])
    assert (counts == 1).all(), (str(L), axis)


@pytest.mark.parametrize("root", ROOTS_128 + ROOTS_256 + [canonical((1024,), 128), canonical((8, 64), 256),
                                                          canonical((128, 128), 256)], ids=str)
def test_reduction_plan_combines_exactly_the_threads_of_a_row(root):
    views = [Layout.of(root)]
    if isinstance(root, Fragment):
        views.append(Layout(root, (0,), Layout.of(root).digits))  # replicated row view: no double counting
    for L in views:
        for axis in range(len(L.dims)):
            _simulate(L, axis)


def test_reduction_plan_fragment_groups():
    # columns of a 2x2-warp fragment: lanes t (xor 1, 2) in the warp, then the 2 column warps through shared memory
    L = Layout.of(mma_fragment((64, 64), 2, 2))
    p = reduction_plan(L, 1)
    assert p.shuffles == (1, 2) and p.groups == 2
    p0 = reduction_plan(L, 0)
    assert p0.shuffles == (4, 8, 16) and p0.groups == 2
    # 8x1 warps: a row lives in one warp, no shared memory
    assert reduction_plan(Layout.of(mma_fragment((128, 64), 8, 1)), 1).groups == 1


def test_blocked_reduction_plan_straddling_warps():
    root = canonical((2, 1024), 256)  # threads [2, 128]: a row spans 4 warps
    assert root.threads == (2, 128)
    p = reduction_plan(Layout.of(root), 1)
    assert p.shuffles == (1, 2, 4, 8, 16) and p.groups == 4
    root = canonical((64, 32), 128)   # threads [32, 4]: axis 0 has stride 4, 8 rows per warp, 4 warps
    p = reduction_plan(Layout.of(root), 0)
    assert p.shuffles == (4, 8, 16) and p.groups == 4
