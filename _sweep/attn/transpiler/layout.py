"""Distributed layouts: which thread holds which element of a register tile.

A `Blocked` root layout splits a tile shape over the T threads of a block the way Triton
does: each thread owns `vec` contiguous elements of the last axis (so global accesses
are 16-byte vectors), consecutive threads own consecutive chunks (so they coalesce), and
the chunks repeat `reps` times per axis. Threads beyond the distinct ones hold replicas.

A `Layout` is a view of a root: which root axis each tile axis follows (None for a
size-1 axis) and which root "digits" (per-axis repeat counters and the vector lane) its
register slots enumerate. Reductions drop an axis and its digits (a slice layout);
`t[:, None]` inserts a None axis; `.T` permutes axes; reading a broadcast operand at a
result's layout is a view that keeps all of the result's digits. Everything is data, so
codegen can print the coordinates of slot `s` as C expressions and prove two layouts
compatible (a register-to-register slot map) without running anything.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .types import numel

VEC = 8  # elements per thread chunk along the contiguous axis (16 bytes of bf16)


@dataclass(frozen=True)
class Blocked:
    shape: tuple[int, ...]
    vec: int
    threads: tuple[int, ...]  # distinct threads along each axis
    T: int  # threads per block

    @property
    def rank(self) -> int:
        return len(self.shape)

    def chunk(self, d: int) -> int:
        return self.vec if d == self.rank - 1 else 1

    def reps(self, d: int) -> int:
        return self.shape[d] // (self.chunk(d) * self.threads[d])

    def tstride(self, d: int) -> int:
        return numel(self.threads[d + 1:])

    @property
    def distinct(self) -> int:
        return numel(self.threads)

    def radix(self, digit: int) -> int:
        """Digit i < rank is axis i's repeat counter; digit == rank is the vector lane."""
        return self.vec if digit == self.rank else self.reps(digit)

    def thr(self, d: int, tid: str = "threadIdx.x") -> str:
        """C expression: this thread's index along axis d."""
        t = self.threads[d]
        if t == 1:
            return "0"
        base = f"({tid} % {self.distinct})" if self.distinct < self.T else tid
        stride = self.tstride(d)
        inner = f"{base} / {stride}" if stride > 1 else base
        return f"({inner}) % {t}" if stride * t < self.T or self.distinct < self.T else f"({inner})"

    # ---- the root protocol Layout uses (shared with Fragment)
    @property
    def ndigits(self) -> int:
        return self.rank + 1

    @property
    def vec_digit(self) -> int | None:
        """The register digit that enumerates contiguous elements of the last axis (a vector)."""
        return self.rank if self.vec > 1 else None

    def axis_digits(self, d: int) -> set[int]:
        return {d} | ({self.rank} if d == self.rank - 1 else set())

    def thread_groups(self, d: int) -> list[tuple[int, int]]:
        """(threads, tid stride) groups along axis d that hold different coordinates."""
        return [(self.threads[d], self.tstride(d))] if self.threads[d] > 1 else []

    def coord_expr(self, d: int, digit) -> str:
        """C expression of the coordinate along axis d; digit(g) is the held digit's expression or None."""
        t, c = self.threads[d], self.chunk(d)
        r = digit(d) if self.reps(d) > 1 else None
        thr = self.thr(d) if t > 1 else None
        if r and thr:
            chunk = f"({r}) * {t} + {thr}"
        elif r:
            chunk = f"({r}) * {t}" if t > 1 else r
        else:
            chunk = thr
        if c == 1:
            return chunk or "0"
        v = digit(self.rank)
        head = f"({chunk}) * {c}" if chunk else None
        if head and v:
            return f"{head} + {v}"
        return head or v or "0"

    def __str__(self) -> str:
        return (f"blocked{list(self.shape)} vec={self.vec} threads={list(self.threads)}"
                + (f" (x{self.T // self.distinct} replicated)" if self.distinct < self.T else ""))


def canonical(shape: tuple[int, ...], T: int) -> Blocked:
    """The default layout of a tile of `shape` over T threads."""
    vec = min(VEC, shape[-1])
    n = len(shape)
    threads = [1] * n
    left = T
    for d in reversed(range(n)):
        cap = shape[d] // (vec if d == n - 1 else 1)
        t = min(left, cap)
        threads[d] = t
        left //= t
    return Blocked(tuple(shape), vec, tuple(threads), T)


@dataclass(frozen=True)
class Fragment:
    """Tensor-core accumulator fragments: which thread holds which element of an MMA result.

    Coordinates are mixed-radix sums. `regs` lists the register digits in slot order (major
    first) as (axis, radix, coordinate stride); `thr` the thread digits as (axis, radix,
    coordinate stride, thread-index stride). `mma_fragment` builds the layout that both
    `mma.sync.m16n8k16` (warp tiles) and `wgmma.m64nNk16` (warpgroups of four m16 warps) give
    their f32 accumulators: lane = 4*g + t holds rows g and g+8, columns 2t and 2t+1 of every
    16x8 block.
    """

    shape: tuple[int, int]
    regs: tuple[tuple[int, int, int], ...]
    thr: tuple[tuple[int, int, int, int], ...]
    T: int
    what: str = "mma"
    warps: tuple[int, int] = (1, 1)  # warps along (rows, columns)

    rank = 2

    @property
    def ndigits(self) -> int:
        return len(self.regs)

    @property
    def distinct(self) -> int:
        return numel(tuple(r for _, r, _, _ in self.thr))

    @property
    def vec(self) -> int:
        g = self.vec_digit
        return self.regs[g][1] if g is not None else 1

    @property
    def vec_digit(self) -> int | None:
        axis, radix, stride = self.regs[-1]
        return len(self.regs) - 1 if axis == 1 and stride == 1 and radix > 1 else None

    def radix(self, digit: int) -> int:
        return self.regs[digit][1]

    def axis_digits(self, d: int) -> set[int]:
        return {g for g, (axis, _, _) in enumerate(self.regs) if axis == d}

    def thread_groups(self, d: int) -> list[tuple[int, int]]:
        return [(r, ts) for axis, r, _, ts in self.thr if axis == d and r > 1]

    def coord_expr(self, d: int, digit) -> str:
        terms = []
        for g, (axis, radix, stride) in enumerate(self.regs):
            if axis == d and radix > 1:
                e = digit(g)
                if e:
                    terms.append(f"({e}) * {stride}" if stride > 1 else f"({e})")
        for axis, radix, stride, ts in self.thr:
            if axis == d and radix > 1:
                e = _tid_digit(radix, ts, self.T)
                terms.append(f"({e}) * {stride}" if stride > 1 else e)
        return " + ".join(terms) or "0"

    def __str__(self) -> str:
        return f"{self.what}{list(self.shape)} regs={[r for _, r, _ in self.regs]}"


def _tid_digit(radix: int, tstride: int, T: int) -> str:
    q = "threadIdx.x" if tstride == 1 else f"(threadIdx.x / {tstride})"
    return q if radix * tstride >= T else f"({q} % {radix})"


def mma_fragment(shape: tuple[int, int], warps_m: int, warps_n: int, what: str = "mma") -> Fragment:
    """The accumulator layout of a [BM, BN] tile computed by warps_m x warps_n warps (warp w = wm * warps_n + wn).

    Warp (wm, wn) owns rows [wm*WM, (wm+1)*WM) and columns [wn*WN, (wn+1)*WN) as RM x RN blocks of 16x8.
    """
    bm, bn = shape
    wm, wn = bm // warps_m, bn // warps_n
    regs = ((0, wm // 16, 16), (1, wn // 8, 8), (0, 2, 8), (1, 2, 1))
    thr = ((0, 8, 1, 4), (1, 4, 2, 1), (0, warps_m, wm, 32 * warps_n), (1, warps_n, wn, 32))
    return Fragment(tuple(shape), regs, thr, 32 * warps_m * warps_n, what, (warps_m, warps_n))


def mma_warp_grid(m: int, n: int, warps: int) -> tuple[int, int] | None:
    """Arrange `warps` warps over an [m, n] mma.sync result: 16-row warp tiles first, 16-column multiples."""
    wm = 1
    while wm * 2 <= warps and m % (16 * wm * 2) == 0:
        wm *= 2
    wn = warps // wm
    if wm * wn != warps or m % (16 * wm) or n % (16 * wn):
        return None
    return wm, wn


@dataclass(frozen=True)
class Layout:
    """A tile's layout: a view of a root Blocked layout."""

    root: "Blocked | Fragment"
    dims: tuple[int | None, ...]  # per tile axis: the root axis it follows, or None (size 1)
    digits: tuple[int, ...]  # root digits enumerated by the register slots, major first

    @staticmethod
    def of(root: Blocked) -> "Layout":
        return Layout(root, tuple(range(root.rank)), tuple(range(root.ndigits)))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(1 if d is None else self.root.shape[d] for d in self.dims)

    @cached_property
    def slots(self) -> int:
        return numel(tuple(self.root.radix(g) for g in self.digits))

    def stride(self, digit: int) -> int:
        """Slot-index stride of one held digit (row-major over held digits)."""
        i = self.digits.index(digit)
        return numel(tuple(self.root.radix(g) for g in self.digits[i + 1:]))

    def digit_expr(self, digit: int, s: str) -> str:
        r = self.root.radix(digit)
        if r == 1:
            return "0"
        st = self.stride(digit)
        q = f"{s} / {st}" if st > 1 else s
        return f"({q}) % {r}" if st * r < self.slots else f"({q})"

    def coord(self, axis: int, s: str = "tx_s") -> str:
        """C expression: the coordinate along tile axis `axis` of this thread's slot `s`."""
        d = self.dims[axis]
        if d is None:
            return "0"
        return self.root.coord_expr(d, lambda g: self.digit_expr(g, s) if g in self.digits else None)

    def __str__(self) -> str:
        if self.dims == tuple(range(self.root.rank)) and len(self.digits) == self.root.ndigits:
            return f"{self.root}, {self.slots}/thread"
        view = ",".join("_" if d is None else str(d) for d in self.dims)
        return f"view({view}) of {self.root}, {self.slots}/thread"

    # ---- derived layouts
    def transpose(self) -> "Layout":
        return Layout(self.root, tuple(reversed(self.dims)), self.digits)

    def expand(self, axis: int) -> "Layout":
        dims = list(self.dims)
        dims.insert(axis, None)
        return Layout(self.root, tuple(dims), self.digits)

    def reduce(self, axis: int, keepdims: bool = False) -> "Layout":
        d = self.dims[axis]
        dims = list(self.dims)
        if keepdims:
            dims[axis] = None
        else:
            dims.pop(axis)
        if d is None:
            return Layout(self.root, tuple(dims), self.digits)
        drop = self.root.axis_digits(d)
        return Layout(self.root, tuple(dims), tuple(g for g in self.digits if g not in drop))

    def axes(self, *axes: int) -> "Layout":
        """The view holding only tile axes `axes` (with all of this layout's digits): how a tile indexed
        by those coordinates alone is read at this layout's slots (the rows of a gather, `t` of `t[:, None]`)."""
        return Layout(self.root, tuple(self.dims[a] for a in axes), self.digits)

    def compact(self) -> "Layout":
        """This view holding only the digits its axes' coordinates depend on: one slot per distinct
        element (a gather's row indices read at a [rows, cols] tile's layout need a slot per row
        a thread holds, not per element). Reading it at the full view is a slot map (compatible)."""
        keep: set[int] = set()
        for d in self.dims:
            if d is not None:
                keep |= self.root.axis_digits(d)
        return Layout(self.root, self.dims, tuple(g for g in self.digits if g in keep))

    def view_for(self, shape: tuple[int, ...]) -> "Layout":
        """How an operand of `shape` is read when broadcast against a value in this layout."""
        if tuple(shape) == self.shape:
            return self
        off = len(self.dims) - len(shape)
        dims = tuple(None if shape[j] == 1 and self.shape[j + off] != 1 else self.dims[j + off] for j in range(len(shape)))
        return Layout(self.root, dims, self.digits)

    def _digit_map(self, want: "Layout") -> dict[int, int] | None:
        """For each digit this layout holds, the digit of `want`'s root that enumerates the same coordinates."""
        if len(self.dims) != len(want.dims):
            return None
        if self.root == want.root:
            for a, b, n in zip(self.dims, want.dims, self.shape):
                if a != b and n != 1:
                    return None
            held = {g: g for g in self.digits if self.root.radix(g) > 1}
            return held if set(held) <= set(want.digits) else None
        r, w = self.root, want.root
        if isinstance(r, Blocked) and isinstance(w, Blocked):
            return self._blocked_digit_map(want)
        if not (isinstance(r, Fragment) and isinstance(w, Fragment)) or r.T != w.T:
            return None
        out = {}
        for i, a in enumerate(self.dims):  # kept axes must be distributed identically over threads
            if a is None:
                continue
            b = want.dims[i]
            if b is None or sorted(t[1:] for t in r.thr if t[0] == a) != sorted(t[1:] for t in w.thr if t[0] == b):
                return None
        for g in self.digits:
            axis, radix, stride = r.regs[g]
            if radix == 1:
                continue
            i = self.dims.index(axis) if axis in self.dims else None
            if i is None:
                return None
            match = [h for h in want.digits if w.regs[h] == (want.dims[i], radix, stride)]
            if not match:
                return None
            out[g] = match[0]
        return out

    def _blocked_digit_map(self, want: "Layout") -> dict[int, int] | None:
        """_digit_map between views of two different Blocked roots: every thread must hold the
        same coordinates in both. Along a root axis, thread `tid` holds the chunks
        (rep * threads + (tid / tstride) % threads) * chunk + lane, so two axes match when their
        threads, tstride, chunk and reps are equal (and the blocks have the same size). A value
        is held by every thread (replicas included; a reduction leaves its result in all of
        them), so no other axis of either root matters. E.g. a sum over the rows of an [8, 512]
        tile and a [512] accumulator, which a reduction loop adds together every iteration."""
        r, w = self.root, want.root
        if r.T != w.T:
            return None
        out = {}
        kept = set()
        for i, (a, b) in enumerate(zip(self.dims, want.dims)):
            if self.shape[i] == 1 and want.shape[i] == 1:
                continue
            if a is None or b is None:
                return None
            if (r.shape[a], r.threads[a], r.tstride(a), r.chunk(a), r.reps(a)) != \
                    (w.shape[b], w.threads[b], w.tstride(b), w.chunk(b), w.reps(b)):
                return None
            kept.add(a)
            out[a] = b  # the rep digits
            if r.chunk(a) > 1:
                out[r.rank] = w.rank  # the vector lanes
        for g in self.digits:
            if r.radix(g) == 1:
                continue
            axis = r.rank - 1 if g == r.rank else g
            if axis not in kept or g not in out or out[g] not in want.digits:
                return None
        return {g: out[g] for g in self.digits if r.radix(g) > 1}

    def compatible(self, want: "Layout") -> bool:
        """True if a tile in this layout can be read at `want`'s slots without moving data."""
        return self._digit_map(want) is not None

    def slot_map(self, want: "Layout", s: str = "tx_s") -> str:
        """C expression: which of this layout's slots holds the element `want` has at slot `s`."""
        if self == want or self.slots == 1:
            return s if self.slots > 1 else "0"
        digits = {g: g for g in self.digits} if self.root == want.root else self._digit_map(want)
        terms = []
        for g in self.digits:
            if self.root.radix(g) == 1:
                continue
            e = want.digit_expr(digits[g], s)
            st = self.stride(g)
            terms.append(f"({e}) * {st}" if st > 1 else e)
        return " + ".join(terms) or "0"


def thread_groups(layout: Layout, axis: int) -> list[tuple[int, int]]:
    """(threads, tid stride) groups to combine over when reducing tile axis `axis` across threads."""
    d = layout.dims[axis]
    return [] if d is None else layout.root.thread_groups(d)


@dataclass(frozen=True)
class ReductionPlan:
    """How threads combine partial results along one tile axis: warp shuffles, then shared memory."""

    shuffles: tuple[int, ...]  # xor lane offsets, in order
    groups: int  # warps' partials to combine through shared memory (1: none)
    group_expr: str = "0"  # C expression: this thread's group (warp) index, 0 <= g < groups
    writer: str = "true"  # C condition: this thread writes its group's partial


def reduction_plan(layout: Layout, axis: int) -> ReductionPlan:
    groups = thread_groups(layout, axis)
    shuffles: list[int] = []
    cross: list[tuple[int, int]] = []
    inwarp_parts: list[tuple[int, int]] = []
    for t, st in groups:
        off = st
        while off < min(32, st * t):
            shuffles.append(off)
            off *= 2
        if st * t > 32:
            cross.append((t, st))
        else:
            inwarp_parts.append((t, st))
    if not cross:
        return ReductionPlan(tuple(shuffles), 1)
    if len(cross) > 1:
        raise NotImplementedError("a reduction across two independent warp dimensions")
    t, st = cross[0]
    root = layout.root
    if isinstance(root, Blocked):  # one group, maybe straddling the warp boundary
        d = layout.dims[axis]
        inwarp = 1 if st >= 32 else min(t, 32 // st)
        thr = root.thr(d)
        return ReductionPlan(tuple(shuffles), t // inwarp, f"({thr}) / {inwarp}", f"({thr}) % {inwarp} == 0")
    writer = " && ".join(f"{_tid_digit(r, s, root.T)} == 0" for r, s in inwarp_parts) or "true"
    return ReductionPlan(tuple(shuffles), t, _tid_digit(t, st, root.T), writer)


def flat_index(layout: Layout, shape: tuple) -> str:
    """C expression: the row-major flat index in `shape` of the element at slot `tx_s`."""
    terms = []
    for i in range(len(shape)):
        stride = numel(shape[i + 1:])
        c = layout.coord(i, "tx_s")
        if c == "0":
            continue
        terms.append(f"({c}) * {stride}" if stride > 1 else f"({c})")
    return " + ".join(terms) or "0"
