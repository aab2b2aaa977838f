"""What every part of the emitter reads: the kernel's facts (fixed by the passes) and the emission scope."""
from __future__ import annotations

from contextlib import contextmanager

from .. import ast as A
from ..layout import Layout


class KernelFacts:
    """Read-only facts of one kernel for codegen: its tensor parameters, consumer threads, the tiles resident
    in shared memory, the scratch base, the swizzled resident tiles and the TMA maps (passes' decisions)."""

    def __init__(self, k: A.Kernel, file: str):
        self.k = k
        self.file = file
        self.T = k.info.threads
        self.tensors = {p.name: p for p in k.params if p.type.dims is not None}
        self.tma_maps = k.info.tma_maps  # plan_tma's TMA descriptors, passed by the host after the other arguments
        # tiles kept in shared memory for the whole kernel (matmul operands read in every loop iteration)
        self.resident = dict(getattr(k.info, "resident", {}) or {})
        base = getattr(k.info, "resident_bytes", 0)
        self.smem = f"(tilex_smem + {base})" if base else "tilex_smem"  # scratch space of one op at a time
        self.swizzled = frozenset(getattr(k.info, "swizzled", ()) or ())  # resident tiles in 128-byte swizzled rows

    def at(self, span) -> str:
        """`file:line` of a statement for the emitted comments: code inlined from a fn names the fn's file."""
        file = span.file.replace("\\", "/").rsplit("/", 1)[-1] if span.called_from else self.file
        return f"{file}:{span.line}"

    def stride(self, name: str, axis: int) -> str | None:
        p = self.tensors[name]
        return None if axis == len(p.type.dims) - 1 else f"tx_{name}_s{axis}"

    def dim(self, name: str, axis: int) -> str:
        d = self.tensors[name].type.dims[axis]
        return str(d.value) if isinstance(d, A.IntLit) else d.id

    def tma_map(self, tensor: str, box_rows: int, box: tuple = ()) -> str:
        return next(m.param for m in self.tma_maps if m.tensor == tensor and m.box_rows == box_rows and m.box == box)


class Scope:
    """The emission state that follows the statements: declared variables (tile variables with their layouts),
    the current statement's barrier (plan_barriers), and the tiles the enclosing pipeline loops stream."""

    def __init__(self, barrier: str | None):
        self.arrays: dict[str, Layout] = {}  # tile variables -> layout
        # tile variables recomputed where a use wants another layout (remat.py) -> their defining expression
        self.pure: dict = {}
        self.unstable: set[str] = set()      # names assigned more than once, loop variables (remat.py)
        self.declared: list[set[str]] = [set()]
        self.barrier = barrier
        # tiles a pipeline loop streams into shared memory: name -> (byte address of this iteration's stage, row pitch)
        self.streaming: dict[str, tuple[str, int]] = {}
        # of those, the 128-byte swizzled ones of a loop whose products run as wgmma
        self.wgmma_streams: frozenset = frozenset()

    def is_declared(self, name: str) -> bool:
        return any(name in d for d in self.declared)

    def declare(self, name: str, layout: Layout | None = None) -> None:
        self.declared[-1].add(name)
        if layout is not None:
            self.arrays[name] = layout

    @contextmanager
    def names(self, *names: str):
        """A nested scope of declarations (a block, a loop with its variable)."""
        self.declared.append(set(names))
        try:
            yield
        finally:
            self.declared.pop()

    @contextmanager
    def streamed(self, tiles: dict, wgmma: frozenset = frozenset()):
        """Inside a pipeline loop's body: `tiles` (name -> (stage address, pitch)) streamed, `wgmma` of them
        read by wgmma products."""
        outer, outer_wg = self.streaming, self.wgmma_streams
        self.streaming = {**outer, **tiles}
        self.wgmma_streams = outer_wg | wgmma
        try:
            yield
        finally:
            self.streaming, self.wgmma_streams = outer, outer_wg
