"""The memory plan of a lowered program: value lifetimes, one arena's offsets, and live-bytes accounting.

`lifetimes(io, ...)` turns the program's steps (the values each reads and writes, which outputs
alias which inputs) into `Buffer`s, one per value the arena can hold, each live over the inclusive
step interval [start, end] (a step's inputs and outputs are live at once; a view keeps its base
alive; a graph output, or anything it may alias, never enters the arena). `assign_offsets` packs
them into one allocation: greedy by size, each buffer at the best-fitting gap (the smallest that
fits) among the already placed buffers whose lifetimes overlap its own, offsets aligned.
`check_plan` verifies that no two overlapping lifetimes share a byte.

Accounting: `live_bytes` (distinct storages held, an arena counted once at its size), `eager_peak_bytes`
(the graph run op by op in torch eager, values freed at their last use: the baseline the plan is
reported against) and `eager_intermediate_bytes` (the same from the graph's metadata alone, no run).
Inputs are not counted (the caller holds them).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.fx import GraphModule, Interpreter

ALIGN = 256  # bytes: every buffer starts on a 256-byte boundary (cudaMalloc's alignment)


@dataclass(frozen=True)
class StepIO:
    """What one step of a program does to memory, as the planner needs it."""
    reads: tuple                 # values read
    writes: tuple                # values produced
    placeable: tuple = ()        # the produced values the executor can put in the arena (fresh, dense)
    aliases: bool = False        # a produced value may share memory with the values read (a view)
    inplace: tuple = ()          # values read that this step also writes in place
    together: bool = False       # the placeable values share one lifetime (a kernel with several outputs:
                                 # the arena may serve its allocations to them in any order of equal sizes)


@dataclass
class Buffer:
    value: object                # the graph node
    nbytes: int
    start: int                   # first step the buffer is live (the step writing it)
    end: int                     # last step it is live, inclusive
    offset: int = -1             # in the arena; -1 until assigned

    def overlaps(self, other: "Buffer") -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass
class Plan:
    buffers: list                # Buffer per arena value, offsets assigned
    arena_bytes: int             # the arena's size
    live_peak: int               # max over steps of the live buffers' bytes (a lower bound on arena_bytes)
    steps: int = 0
    by_value: dict = field(default_factory=dict)

    def __post_init__(self):
        self.by_value = {b.value: b for b in self.buffers}

    @property
    def naive_bytes(self) -> int:
        """What the same buffers take without reuse (one allocation each)."""
        return sum(align(b.nbytes) for b in self.buffers)

    def shared(self) -> dict:
        """value -> the other values that occupy some of the same bytes at other times (reuse)."""
        out: dict = {b.value: [] for b in self.buffers}
        bs = sorted(self.buffers, key=lambda b: b.offset)
        for i, a in enumerate(bs):
            for b in bs[i + 1:]:
                if b.offset >= a.offset + align(a.nbytes):
                    break
                out[a.value].append(b.value)
                out[b.value].append(a.value)
        return out


def align(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


def lifetimes(io: list, nbytes: dict, keep: set = frozenset()) -> list:
    """Buffers for the placeable values of steps `io` (a list of StepIO in execution order).

    nbytes: value -> bytes (values without an entry, e.g. a size not known, are not placed);
    keep: values that must outlive the program (graph outputs), with everything they alias."""
    producer, last, base_of = {}, {}, {}
    for i, s in enumerate(io):
        for v in s.writes:
            producer[v] = i
            last.setdefault(v, i)
            if s.aliases:
                base_of[v] = [a for a in s.reads]
        for v in (*s.reads, *s.inplace):
            last[v] = i
        for v in s.inplace:   # the produced values are the written input, seen through a new name
            for w in s.writes:
                base_of.setdefault(w, []).append(v)
    # a view keeps its bases alive to its own last use; a kept value keeps its bases out of the arena
    kept = set(keep)
    for i in range(len(io) - 1, -1, -1):
        for w in io[i].writes:
            for b in base_of.get(w, ()):
                if b in last:
                    last[b] = max(last[b], last[w])
                if w in kept:
                    kept.add(b)
    out = []
    for i, s in enumerate(io):
        end = max((last[v] for v in s.placeable), default=i) if s.together else None
        for v in s.placeable:
            if v in kept or v not in nbytes or nbytes[v] <= 0:
                continue
            out.append(Buffer(v, int(nbytes[v]), i, end if end is not None else last[v]))
    return out


def assign_offsets(buffers: list, alignment: int = ALIGN) -> int:
    """Give every buffer an offset (greedy by size, best fit); the arena size in bytes."""
    placed: list = []
    order = sorted(buffers, key=lambda b: (-b.nbytes, b.start, b.end))
    top = 0
    for b in order:
        size = align(b.nbytes, alignment)
        busy = sorted((p.offset, p.offset + align(p.nbytes, alignment)) for p in placed if p.overlaps(b))
        best, best_gap, cur = None, None, 0
        for lo, hi in busy:
            gap = lo - cur
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cur, gap
            cur = max(cur, hi)
        b.offset = cur if best is None else best
        top = max(top, b.offset + size)
        placed.append(b)
    return top


def live_peak(buffers: list, alignment: int = ALIGN) -> int:
    events: dict = {}
    for b in buffers:
        events[b.start] = events.get(b.start, 0) + align(b.nbytes, alignment)
        events[b.end + 1] = events.get(b.end + 1, 0) - align(b.nbytes, alignment)
    peak = cur = 0
    for t in sorted(events):
        cur += events[t]
        peak = max(peak, cur)
    return peak


def plan(io: list, nbytes: dict, keep: set = frozenset(), alignment: int = ALIGN) -> Plan:
    """The arena plan of a program: lifetimes, then offsets."""
    bufs = lifetimes(io, nbytes, keep)
    size = assign_offsets(bufs, alignment)
    p = Plan(bufs, size, live_peak(bufs, alignment), len(io))
    check_plan(p, alignment)
    return p


def check_plan(p: Plan, alignment: int = ALIGN) -> None:
    """Raise AssertionError if two buffers live at the same step share a byte, or one is misaligned."""
    bs = sorted(p.buffers, key=lambda b: b.offset)
    for i, a in enumerate(bs):
        if a.offset < 0 or a.offset % alignment or a.offset + a.nbytes > p.arena_bytes:
            raise AssertionError(f"tilex backend: arena buffer {a} misplaced (arena {p.arena_bytes} bytes)")
        for b in bs[i + 1:]:
            if b.offset >= a.offset + a.nbytes:
                break
            if a.overlaps(b):
                raise AssertionError(f"tilex backend: arena buffers {a} and {b} overlap while both live")


def schema_effects(node) -> tuple:
    """(whether node's output may alias an input, the input nodes it writes in place), from its
    op's schema; a target without a schema (operator.getitem, a Python function) may alias."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return True, ()
    aliases = any(r.alias_info is not None for r in schema.returns)
    inplace = []
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            v = node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
            if hasattr(v, "meta"):
                inplace.append(v)
    return aliases, tuple(inplace)


# ------------------------------------------------------------------ sizes from the graph's metadata
def node_nbytes(node, binding: dict) -> int | None:
    """Bytes of a dense tensor with node's meta shape and dtype, its symbols bound by `binding`
    (sympy symbol -> int); None when the node is not a tensor or a size stays unknown."""
    v = node.meta.get("val") if hasattr(node, "meta") else None
    if not isinstance(v, torch.Tensor):
        return None
    n = v.element_size()
    for d in v.shape:
        d = size_value(d, binding)
        if d is None:
            return None
        n *= d
    return n


def size_value(d, binding: dict) -> int | None:
    if isinstance(d, int):
        return d
    try:
        e = d.node.expr.xreplace(binding)
        return e if isinstance(e, int) else int(e) if e.is_number else None
    except (AttributeError, TypeError, ValueError):
        return None


def bind_sizes(placeholders: list, args) -> dict:
    """sympy symbol -> int for the symbolic sizes of the graph's inputs (tensor dims and SymInts)."""
    out: dict = {}
    for p, a in zip(placeholders, args):
        v = p.meta.get("val")
        if isinstance(v, torch.Tensor) and isinstance(a, torch.Tensor):
            pairs = zip(v.shape, a.shape)
        elif isinstance(v, torch.SymInt) and isinstance(a, int):
            pairs = [(v, a)]
        else:
            continue
        for d, x in pairs:
            expr = getattr(getattr(d, "node", None), "expr", None)
            if expr is not None and getattr(expr, "is_Symbol", False):
                out[expr] = int(x)
    return out


# ------------------------------------------------------------------ accounting
def live_bytes(values, exclude: set, arena: tuple | None = None) -> int:
    """Bytes of the distinct storages among `values` (tensors, nested lists/tuples), minus `exclude`'s;
    `arena` (base pointer, bytes) is counted once at its size, whatever of it is viewed."""
    seen: set = set()
    total = arena[1] if arena else 0
    stack = list(values)
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, torch.Tensor):
            s = v.untyped_storage()
            key = s.data_ptr()
            if key in seen or key in exclude or s.nbytes() == 0:
                continue
            if arena and arena[0] <= key < arena[0] + arena[1]:
                continue
            seen.add(key)
            total += s.nbytes()
    return total


def storage_keys(values) -> set:
    return {v.untyped_storage().data_ptr() for v in values if isinstance(v, torch.Tensor)}


class _Counting(Interpreter):
    def __init__(self, gm, inputs):
        super().__init__(gm, garbage_collect_values=True)
        self.exclude = storage_keys(inputs)
        self.peak = 0

    def run_node(self, n):
        out = super().run_node(n)
        self.peak = max(self.peak, live_bytes([*self.env.values(), out], self.exclude))
        return out


def eager_peak_bytes(gm: GraphModule, inputs) -> int:
    """Peak live bytes of `gm` run node by node in eager, values freed at their last use."""
    it = _Counting(gm, inputs)
    with torch.no_grad():
        it.run(*inputs)
    return it.peak


def eager_intermediate_bytes(gm: GraphModule, binding: dict | None = None) -> dict:
    """From the graph's metadata alone (no run): {"sum": bytes of every intermediate tensor,
    "peak": the most held at once in graph order with values freed at their last use}. Views
    (same storage as an input) count as their own tensors: an upper bound on eager's."""
    binding = binding or {}
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    last = {}
    for i, n in enumerate(nodes):
        for a in n.all_input_nodes:
            last[a] = i
    out = next(n for n in gm.graph.nodes if n.op == "output")
    keep = set(out.all_input_nodes)
    total = cur = peak = 0
    dies: dict = {}
    for i, n in enumerate(nodes):
        b = node_nbytes(n, binding) or 0
        total += b
        cur += b
        peak = max(peak, cur)
        if n not in keep:
            dies.setdefault(last.get(n, i), []).append(b)
        for x in dies.pop(i, ()):
            cur -= x
    return {"sum": total, "peak": peak}
