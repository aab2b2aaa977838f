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
class Layout:
    """A tile's layout: a view of a root Blocked layout."""

    root: Blocked
    dims: tuple[int | None, ...]  # per tile axis: the root axis it follows, or None (size 1)
    digits: tuple[int, ...]  # root digits enumerated by the register slots, major first

    @staticmethod
    def of(root: Blocked) -> "Layout":
        return Layout(root, tuple(range(root.rank)), tuple(range(root.rank + 1)))

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
        root = self.root
        t, c = root.threads[d], root.chunk(d)
        r = self.digit_expr(d, s) if root.reps(d) > 1 else None
        thr = root.thr(d) if t > 1 else None
        if r and thr:
            chunk = f"({r}) * {t} + {thr}"
        elif r:
            chunk = f"({r}) * {t}" if t > 1 else r
        else:
            chunk = thr
        if c == 1:
            return chunk or "0"
        v = self.digit_expr(root.rank, s) if root.rank in self.digits else None
        head = f"({chunk}) * {c}" if chunk else None
        if head and v:
            return f"{head} + {v}"
        return head or v or "0"

    def __str__(self) -> str:
        if self.dims == tuple(range(self.root.rank)) and len(self.digits) == self.root.rank + 1:
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
        drop = {d} | ({self.root.rank} if d == self.root.rank - 1 else set())
        return Layout(self.root, tuple(dims), tuple(g for g in self.digits if g not in drop))

    def view_for(self, shape: tuple[int, ...]) -> "Layout":
        """How an operand of `shape` is read when broadcast against a value in this layout."""
        if tuple(shape) == self.shape:
            return self
        off = len(self.dims) - len(shape)
        dims = tuple(None if shape[j] == 1 and self.shape[j + off] != 1 else self.dims[j + off] for j in range(len(shape)))
        return Layout(self.root, dims, self.digits)

    def compatible(self, want: "Layout") -> bool:
        """True if a tile in this layout can be read at `want`'s slots without moving data."""
        if self.root != want.root or len(self.dims) != len(want.dims):
            return False
        for a, b, n in zip(self.dims, want.dims, self.shape):
            if a != b and n != 1:
                return False
        return set(g for g in self.digits if self.root.radix(g) > 1) <= set(want.digits)

    def slot_map(self, want: "Layout", s: str = "tx_s") -> str:
        """C expression: which of this layout's slots holds the element `want` has at slot `s`."""
        if self == want or self.slots == 1:
            return s if self.slots > 1 else "0"
        terms = []
        for g in self.digits:
            if self.root.radix(g) == 1:
                continue
            e = want.digit_expr(g, s)
            st = self.stride(g)
            terms.append(f"({e}) * {st}" if st > 1 else e)
        return " + ".join(terms) or "0"


def cross_thread_axes(layout: Layout, axis: int) -> tuple[int, int]:
    """(threads, tid stride) to combine over when reducing tile axis `axis` across threads."""
    d = layout.dims[axis]
    if d is None:
        return 1, 1
    return layout.root.threads[d], layout.root.tstride(d)
