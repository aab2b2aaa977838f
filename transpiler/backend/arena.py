"""The arena at run time (options={"arena": True}): one allocation per call, laid out by memory.plan.

`Arena(io, placeholders, outputs)` plans once per binding of the symbolic sizes (kept, 16 at most).
Each call, `begin(args)` allocates the arena (one uint8 tensor on the inputs' device, from torch's
allocator, released when the call ends) and returns a `CallArena` that hands out each planned
value's bytes: `tensor(node, shape, dtype)` for the executor's own outputs (generated kernels), and
`providing(nodes)` around a library call, during which each output `tilex.stdlib` allocates with
the planned bytes and dtype of one of the call's output nodes is that node's view (the stdlib's
`_launch.OUTPUT` hook; a kernel with several outputs has them planned with one lifetime, so which
of equal-sized regions each gets does not matter). `check(nodes, values)` after each step refuses
(a RuntimeError, never silent corruption) a value that lies in the arena where the plan did not
put it.
"""
from __future__ import annotations

import contextlib

import torch

from . import memory


class Arena:
    def __init__(self, io: list, placeholders: list, outputs: set):
        self.io = io
        self.placeholders = placeholders
        self.outputs = set(outputs)
        self.placeable = [v for s in io for v in s.placeable]
        self.plans: dict = {}
        self.placed: set = set()      # values that were put in the arena at least once
        self.unplaced: set = set()    # planned values a callee allocated elsewhere (its own temporaries)
        self.last_plan: memory.Plan | None = None
        self.last_binding: dict = {}

    @classmethod
    def for_program(cls, prog) -> "Arena":
        """The arena of a lowered Program (program.step_io gives each step's reads and writes)."""
        from torch.fx.node import map_arg

        from .program import step_io

        outs: list = []
        map_arg(prog.output_args, outs.append)
        return cls([step_io(s) for s in prog.steps], prog.placeholders, set(outs))

    def plan_for(self, args) -> memory.Plan:
        binding = memory.bind_sizes(self.placeholders, args)
        key = tuple(sorted((str(k), v) for k, v in binding.items()))
        p = self.plans.get(key)
        if p is None:
            nbytes = {}
            for v in self.placeable:
                n = memory.node_nbytes(v, binding)
                if n is not None:
                    nbytes[v] = n
            p = memory.plan(self.io, nbytes, self.outputs)
            if len(self.plans) >= 16:
                self.plans.clear()
            self.plans[key] = p
        self.last_plan, self.last_binding = p, binding
        return p

    def begin(self, args) -> "CallArena":
        p = self.plan_for(args)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        device = next((t.device for t in tensors if t.is_cuda), tensors[0].device if tensors else "cpu")
        return CallArena(self, p, torch.empty(max(p.arena_bytes, 1), dtype=torch.uint8, device=device))


class CallArena:
    def __init__(self, owner: Arena, plan: memory.Plan, storage: torch.Tensor):
        self.owner = owner
        self.plan = plan
        self.storage = storage
        self.base = storage.data_ptr()
        self.span = (self.base, plan.arena_bytes)

    def region(self, node, nbytes: int, dtype: torch.dtype) -> torch.Tensor | None:
        """The planned bytes of `node` as a flat tensor of `dtype`, or None (not planned, or another size)."""
        b = self.plan.by_value.get(node)
        if b is None or b.nbytes != nbytes or nbytes % _itemsize(dtype):
            return None
        return self.storage[b.offset:b.offset + nbytes].view(dtype)

    def tensor(self, node, shape, dtype: torch.dtype, device) -> torch.Tensor:
        """A fresh output of `shape` for `node`: its arena bytes, else a new tensor."""
        n = _itemsize(dtype)
        for d in shape:
            n *= int(d)
        r = self.region(node, n, dtype) if torch.device(device) == self.storage.device else None
        if r is None:
            return torch.empty(shape, dtype=dtype, device=device)
        self.owner.placed.add(node)
        return r.view(shape)

    @contextlib.contextmanager
    def providing(self, nodes):
        """During a library call: each stdlib output of a planned size and dtype of one of `nodes` (a node, or a
        kernel's several output nodes, planned with one lifetime) is that node's region, in allocation order."""
        from ..stdlib import _launch as L

        nodes = nodes if isinstance(nodes, tuple) else (nodes,)
        tensors = [n for n in nodes if isinstance(n.meta.get("val"), torch.Tensor)]
        todo = [n for n in tensors if self.plan.by_value.get(n) is not None]
        if not todo:
            yield
            return
        # an output outside the plan (a graph output) of a dtype and size a planned one has: an allocation of that
        # class may be either, so none of that class gets a region (a graph output in a planned region would be
        # overwritten once the region's value dies)
        unplanned = [(n.meta["val"].dtype, _static_nbytes(n.meta["val"])) for n in tensors if n not in todo]

        def provide(kind, shape, name):
            if kind not in ("torch", "numpy"):
                return None
            dt = L._torch_dtypes().get(name)
            for node in todo:
                want = node.meta["val"].dtype
                if dt != want:
                    continue
                n = _itemsize(want)
                for d in shape:
                    n *= int(d)
                if any(u_dt == want and u_n in (None, n) for u_dt, u_n in unplanned):
                    return None
                r = self.region(node, n, want)
                if r is None:
                    continue
                if (kind == "torch") != (r.device.type != "cpu"):
                    return None  # CPU torch callers get NumPy arrays (the interpreter path)
                todo.remove(node)
                if kind == "torch":
                    return r.view(tuple(shape))
                from .kernels import to_numpy

                return to_numpy(r).reshape(tuple(shape))
            return None
        prev = L.OUTPUT.fn
        L.OUTPUT.fn = provide
        try:
            yield
        finally:
            L.OUTPUT.fn = prev

    def check(self, nodes, values) -> None:
        """After a step: each of `values` (of `nodes`, one node or a tuple planned together) may lie in the arena
        only at the planned bytes of one of `nodes`."""
        nodes = nodes if isinstance(nodes, tuple) else (nodes,)
        values = values if isinstance(values, tuple) else (values,)
        regions = [(n, self.plan.by_value.get(n)) for n in nodes]
        for node, value in zip(nodes, values):
            if not isinstance(value, torch.Tensor) or value.device != self.storage.device or value.numel() == 0:
                continue
            ptr = value.untyped_storage().data_ptr()
            if not self.base <= ptr < self.base + self.plan.arena_bytes and not (
                    self.base <= value.data_ptr() < self.base + self.plan.arena_bytes):
                if node in self.plan.by_value:
                    self.owner.unplaced.add(node)
                continue
            if not any(b is not None and self.base + b.offset <= value.data_ptr() < self.base + b.offset + b.nbytes
                       for _, b in regions):
                raise RuntimeError(f"tilex backend: {node.name} lies in the memory arena where the plan did not "
                                   "put it (an alias the plan does not know); run with options={'arena': False} "
                                   "and report this")
            self.owner.placed.add(node)


def _static_nbytes(v: torch.Tensor) -> int | None:
    """The bytes of a value of static shape; None for a symbolic one (any size)."""
    if not all(isinstance(d, int) for d in v.shape):
        return None
    n = _itemsize(v.dtype)
    for d in v.shape:
        n *= d
    return n


def _itemsize(dtype: torch.dtype) -> int:
    return dtype.itemsize
