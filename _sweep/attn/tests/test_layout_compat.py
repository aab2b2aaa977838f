"""Layout compatibility is sound: whenever `Layout.compatible` lets a tile be read in another
layout without moving data, every thread holds, at the mapped slot, exactly the element the
other layout expects. Checked by brute force over every thread and slot, evaluating the C
coordinate expressions codegen prints (no GPU needed)."""
from __future__ import annotations

import itertools

import pytest

from tilex.layout import Layout, canonical


def _ev(expr: str, tid: int, s: int) -> int:
    return eval(expr.replace("threadIdx.x", str(tid)).replace("tx_s", str(s)).replace("/", "//"))  # noqa: S307


def _coords(layout: Layout, tid: int, s: int) -> tuple[int, ...]:
    return tuple(_ev(layout.coord(i, "tx_s"), tid, s) for i in range(len(layout.dims)))


def _check(have: Layout, want: Layout) -> bool:
    """compatible(have, want), and if so, the slot map proven element by element."""
    if have.shape != want.shape or not have.compatible(want):
        return False
    expr = have.slot_map(want)
    for tid in range(want.root.T):
        for s in range(want.slots):
            hs = _ev(expr, tid, s)
            assert 0 <= hs < have.slots, (str(have), str(want), tid, s, hs)
            assert _coords(have, tid, hs) == _coords(want, tid, s), (str(have), str(want), tid, s)
    return True


SHAPES = [(8, 512), (4, 64), (2, 256), (16, 8), (3, 32), (1, 128), (32, 32), (8, 8192)]


@pytest.mark.parametrize("T", [32, 128, 256, 1024])
@pytest.mark.parametrize("shape", [s for s in SHAPES if s[0] * s[1] <= 65536])
def test_reduction_result_vs_accumulator(T, shape):
    """sum(t[SB, B], axis=0) added to a [B] accumulator (split-K sums) and the reverse axis."""
    r, c = shape
    two = Layout.of(canonical(shape, T))
    _check(two.reduce(0), Layout.of(canonical((c,), T)))
    _check(two.reduce(1), Layout.of(canonical((r,), T)))
    _check(Layout.of(canonical((c,), T)), two.reduce(0))


def test_split_k_sum_needs_no_conversion():
    """The case that used to go through shared memory every iteration (splitk_sum, 256 threads)."""
    assert _check(Layout.of(canonical((8, 512), 256)).reduce(0), Layout.of(canonical((512,), 256)))


@pytest.mark.parametrize("T", [32, 256])
def test_pairs_of_canonical_layouts(T):
    """Every pair of views of canonical layouts of equal shape: sound whenever compatible."""
    shapes = [(64,), (512,), (8, 64), (4, 128), (2, 8, 32)]
    layouts = []
    for shape in shapes:
        lay = Layout.of(canonical(shape, T))
        layouts.append(lay)
        for ax in range(len(shape)):
            layouts.append(lay.reduce(ax))
    ok = 0
    for a, b in itertools.product(layouts, repeat=2):
        ok += _check(a, b)
    assert ok >= len(layouts)  # at least every layout with itself


def test_non_canonical_roots():
    """Hand-made roots that spread the same axis over threads differently (other thread
    counts, strides, vector widths): only equal distributions may be compatible."""
    from tilex.layout import Blocked

    T = 16
    roots = [Blocked((64,), 8, (8,), T), Blocked((64,), 4, (16,), T), Blocked((64,), 1, (16,), T),
             Blocked((64,), 8, (4,), T), Blocked((64, 16), 8, (8, 2), T), Blocked((64, 16), 8, (16, 1), T),
             Blocked((64, 16), 4, (4, 4), T), Blocked((4, 64), 8, (2, 8), T), Blocked((4, 64), 4, (1, 16), T),
             Blocked((16, 64), 8, (2, 8), T)]
    layouts = []
    for root in roots:
        lay = Layout.of(root)
        layouts.append(lay)
        layouts.extend(lay.reduce(ax) for ax in range(root.rank))
    ok = sum(_check(a, b) for a, b in itertools.product(layouts, repeat=2))
    assert ok > len(layouts)  # some pairs of different roots are compatible


@pytest.mark.parametrize("shape,T", [((64, 128), 128), ((16, 64), 256), ((8, 8), 32), ((128, 32), 64)])
def test_compact_row_view_is_sound(shape, T):
    """A gather's row indices held once per row (`compact`) and read at every slot of the rows view."""
    rows = Layout.of(canonical(shape, T)).axes(0)
    small = rows.compact()
    assert small.slots <= rows.slots
    assert _check(small, rows)


GATHER = """kernel gather_rows<BN: int = 64, D: int = 128, WARPS: int = 4>(
    table: i32[R], x: bf16[N, D], y: out bf16[BN, D])
    grid (1,)
{
    idx = table[arange(0, BN)]
    y[0 : BN, 0 : D] = x[idx, 0 : D]
}
"""


def test_gather_indices_held_per_row():
    """The index tile of a [64, 128] gather over 128 threads: 8 rows per thread, so 8 slots (not 64)."""
    from tilex.pipeline import Options
    from tilex.translate import translate

    cu = translate(GATHER, "gather.tile", Options()).cuda
    assert "int idx[8];" in cu and "int idx[64];" not in cu
    assert "layout conversion" not in cu
