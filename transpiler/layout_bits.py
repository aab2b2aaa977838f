"""Where each bit of a tile axis's coordinate lives in a register layout: a slot, a lane or a warp.

Scans and sorts along an axis (codegen/scan.py) are networks of exchanges between the element at
coordinate i and the one at i ^ 2^b. Tile extents, vector widths and thread counts are powers of two, so
every coordinate bit is one bit of a register slot index (the partner is in the same thread: slot ^ m),
of the lane (a warp shuffle `__shfl_xor_sync(v, m)`) or of the warp (shared memory, the thread
`threadIdx.x ^ m`). `axis_bits` reads that off the layout's root (`Blocked` or `Fragment`) as data.
"""
from __future__ import annotations

from dataclasses import dataclass

from .layout import Blocked, Layout


@dataclass(frozen=True)
class AxisBit:
    value: int  # the coordinate bit, 1 << b
    where: str  # "slot" (in the thread), "lane" (a shuffle in the warp), "warp" (through shared memory)
    mask: int  # xor on the slot index ("slot") or on threadIdx.x ("lane", "warp")


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def axis_bits(layout: Layout, axis: int) -> tuple[AxisBit, ...]:
    """The bits of tile axis `axis`'s coordinate in `layout`, lowest first (one per power of two below the
    extent). ValueError when a bit is not a single slot or thread bit (a thread count that is not a power of
    two, or a view that does not hold the axis's register digits)."""
    d = layout.dims[axis]
    n = layout.shape[axis]
    if d is None or n == 1:
        return ()
    root = layout.root
    pieces = []  # (coordinate stride, radix, slot or thread, xor stride)
    held = set(layout.digits)

    def slot(g: int) -> int:
        if g not in held:
            raise ValueError(f"the layout {layout} does not hold the register digit {g} of axis {axis}")
        return layout.stride(g)

    if isinstance(root, Blocked):
        c, t, r = root.chunk(d), root.threads[d], root.reps(d)
        if c > 1:
            pieces.append((1, c, "slot", slot(root.rank)))
        if t > 1:
            pieces.append((c, t, "thread", root.tstride(d)))
        if r > 1:
            pieces.append((c * t, r, "slot", slot(d)))
    else:
        for g, (ax, radix, stride) in enumerate(root.regs):
            if ax == d and radix > 1:
                pieces.append((stride, radix, "slot", slot(g)))
        for ax, radix, stride, ts in root.thr:
            if ax == d and radix > 1:
                pieces.append((stride, radix, "thread", ts))
    bits = []
    for cs, radix, what, ms in pieces:
        if not (_pow2(cs) and _pow2(radix) and _pow2(ms)):
            raise ValueError(f"axis {axis} of {layout} is not split in powers of two")
        for b in range(radix.bit_length() - 1):
            m = ms << b
            where = what if what == "slot" else ("lane" if m < 32 else "warp")
            bits.append(AxisBit(cs << b, where, m))
    bits.sort(key=lambda x: x.value)
    if [x.value for x in bits] != [1 << b for b in range(n.bit_length() - 1)] or not _pow2(n):
        raise ValueError(f"the coordinate bits of axis {axis} of {layout} are not one per power of two")
    return tuple(bits)


def crosses_warps(layout: Layout, axis: int) -> bool:
    """Whether an exchange network along `axis` goes through shared memory (a coordinate bit in the warp)."""
    return any(b.where == "warp" for b in axis_bits(layout, axis))
