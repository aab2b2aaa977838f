"""Lowering of an ATen FX graph to a Program (an ordered list of steps) and its execution.

Steps, in graph order:
  folded     a node that depends on no tensor input (masks, positions, rotary tables): evaluated
             in eager once per value of the symbolic sizes and kept
  library    a Match (patterns.py): one tilex.stdlib kernel
  generated  a fusion group (fusion.py) emitted as a `.tile` kernel (tilegen.py)
  view       a metadata-only ATen op (no kernel) or host arithmetic on sizes
  copy       a tensor moved to another device (_to_copy across devices): a memcpy, no kernel
  eager      anything else: torch eager, listed as a fallback (an error with strict=True)

Values are dropped from the environment after their last use, so the allocator reuses their
memory (the lifetime plan; docs/backend.md).
"""
from __future__ import annotations

import contextlib
import logging
import time
import operator
from dataclasses import dataclass, field

import torch
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg

from . import kernels, memory
from .epilogue import FusedGemm, fold
from .eager import call, eager as _eager, eager_nodes
from .fusion import absorbed_nodes, group_nodes, member_inputs, scalar_node, transpose_outer_products
from .generated import run_generated
from .patterns import Match, find_matches, is_inplace_copy_back
from .schedule import _last_uses, _order
from .tilegen import GeneratedKernel, generate, tile_config

log = logging.getLogger("tilex.backend")
aten = torch.ops.aten

METADATA_OPS = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.t.default,
    aten.transpose.int, aten.permute.default, aten.unsqueeze.default, aten.squeeze.dim,
    aten.squeeze.default, aten.squeeze.dims, aten.expand.default, aten.slice.Tensor, aten.select.int,
    aten.alias.default, aten.detach.default, aten.as_strided.default, aten.sym_size.int,
    aten.sym_numel.default, aten.sym_stride.int, aten.split.Tensor, aten.split_with_sizes.default,
    aten.unbind.int, operator.getitem, aten.lift_fresh_copy.default,
}
NONDETERMINISTIC = {aten.rand.default, aten.randn.default, aten.empty.memory_format, aten.empty_like.default,
                    aten.randint.default, aten.bernoulli.default, aten.native_dropout.default}


class StrictError(RuntimeError):
    """options={"strict": True} and the graph has nodes no tilex kernel computes."""


@dataclass
class Step:
    kind: str                     # folded | library | generated | view | copy | eager
    nodes: list                   # the graph nodes this step computes (the first is the root)
    match: Match | None = None
    kernel: GeneratedKernel | None = None
    calls: int = 0
    fallbacks: int = 0            # calls sent to eager: a library check declined, a generated row too long
    copies: int = 0               # inputs a generated step copied (a layout it cannot read in place)
    seconds: float = 0.0          # time spent in this step, with profile=True (synchronized on CUDA)
    alias: bool = False           # a view step that is copy_(cache, cache written in place): no work
    plans: dict = field(default_factory=dict)  # generated: launch plans per input layout (generated.py)
    argspec: object = None        # view / eager / copy: (target, ((is node, arg), ...)), False: map_arg's way

    @property
    def label(self) -> str:
        if self.kind == "library":
            return self.match.kernel
        if self.kind == "generated":
            return self.kernel.name
        return str(self.nodes[0].target)


def _host_scalar(v) -> bool:
    return isinstance(v, torch.Tensor) and v.dim() == 0 and v.device.type == "cpu"


def _is_metadata(node: Node) -> bool:
    if node.target in METADATA_OPS:
        return True
    # arithmetic on 0-d CPU tensors (floats Dynamo passes as tensors under dynamic=True, StaticCache's CPU
    # counter plus a SymInt kv_length): host work
    if _host_scalar(node.meta.get("val")) and node.all_input_nodes and all(
            _host_scalar(a.meta.get("val")) or scalar_node(a) for a in node.all_input_nodes):
        return True
    # host arithmetic on sizes (SymInt nodes): operator.mul, sym_float, ...
    return not isinstance(node.meta.get("val"), torch.Tensor) and getattr(node.target, "__module__", "") in (
        "_operator", "math", "torch.sym_float", "builtins")


def _is_transfer(node: Node) -> bool:
    """_to_copy of a tensor to another device (StaticCache's CPU counter moved to the GPU at its lazy
    initialization): a memcpy, no kernel (a "copy" step)."""
    if node.target is not aten._to_copy.default or not node.args or not isinstance(node.args[0], Node):
        return False
    src, val = node.args[0].meta.get("val"), node.meta.get("val")
    return isinstance(src, torch.Tensor) and isinstance(val, torch.Tensor) and src.device != val.device and \
        set(node.kwargs) <= {"dtype", "device", "layout", "pin_memory", "non_blocking"}


def _folded_nodes(gm: GraphModule) -> set:
    """Nodes computed from no tensor placeholder (sizes are allowed): evaluated once per size binding."""
    folded: set = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target in NONDETERMINISTIC:
            continue
        ok = True
        for a in node.all_input_nodes:
            if a in folded:
                continue
            if a.op == "placeholder" and not isinstance(a.meta.get("val"), torch.Tensor):
                continue  # a symbolic size
            ok = False
            break
        if ok:
            folded.add(node)
    return folded


@dataclass
class Program:
    gm: GraphModule
    steps: list
    placeholders: list
    output_args: object
    last_use: dict                 # step index -> nodes whose values die after it
    folded_cache: dict = field(default_factory=dict)
    strict: bool = False
    measure_memory: bool = False   # track peak_bytes (costs a scan of the live values per step)
    peak_bytes: int = 0
    live_trace: list = field(default_factory=list)  # live bytes at each step of the first measured call
    after_first_call: object = None  # a callback (the report's rewrite), run once
    launched: set = field(default_factory=set)   # (kernel, source, defines) launched: the cache record
    cache: dict = field(default_factory=dict)    # {"fingerprint", "hit", "reused"} (cache.py)
    graph_runner: object = None                  # the CUDA graph runner with cuda_graphs=True
    profile: bool = False                        # time every step (Step.seconds); synchronizes
    arena: object = None                         # the memory arena (arena.Arena) with arena=True
    build_stats: dict = field(default_factory=dict)  # prepare(): kernels built before the first call
    _frees: list = field(default_factory=list)   # per step: the nodes dropped after it (from last_use)

    # ----------------------------------------------------------------- lowering
    @classmethod
    def lower(cls, gm: GraphModule, strict: bool = False, epilogues: bool = True) -> "Program":
        graph = gm.graph
        if transpose_outer_products(graph):  # the rotary table written in the layout its cat reads
            gm.recompile()
        folded = _folded_nodes(gm)
        matches = find_matches(graph, folded)
        by_root = {m.root: m for m in matches}
        covered = set().union(*(m.interior | set(m.extra) for m in matches)) if matches else set()
        absorbed = absorbed_nodes(graph, folded | covered | set(by_root))
        covered |= absorbed
        excluded = folded | covered | set(by_root)
        groups = group_nodes(graph, excluded)
        if epilogues and matches and groups:  # a group after a linear becomes its epilogue (epilogue.py)
            matches, groups = fold(matches, groups)
            by_root = {m.root: m for m in matches}
            covered = set().union(*(m.interior | set(m.extra) for m in matches)) | absorbed
        owner = {}
        for g in groups:
            for n in g.nodes:
                owner[n] = g
        steps, done = [], set()
        in_place = {m.root for m in matches if m.kernel == "cache_write"}
        # a kernel's arg is not always a graph user of it (rms_norm reads x through a cast it computes itself)
        library_reads = {a for m in matches for a in m.args if isinstance(a, Node)}
        for node in graph.nodes:
            if node.op in ("placeholder", "output") or node in covered:
                continue
            if node in by_root:
                steps.append(Step("library", [node], match=by_root[node]))
            elif node in owner:
                g = owner[node]
                if g.id in done:
                    continue
                done.add(g.id)
                members = set(g.nodes)

                def used_outside(n, members=members):
                    return n in library_reads or any(u not in members for u in n.users)
                k = generate(g, None, used_outside)  # named by its text: one kernel per distinct group
                steps.append(Step("generated", list(g.nodes), kernel=k))
            elif node in folded:
                steps.append(Step("folded", [node]))
            elif is_inplace_copy_back(node, in_place):
                steps.append(Step("view", [node], alias=True))
            elif _is_metadata(node):
                steps.append(Step("view", [node]))
            elif _is_transfer(node):
                steps.append(Step("copy", [node]))
            else:
                steps.append(Step("eager", [node]))
        # generated steps run at their last member's position: move each after its inputs' producers
        steps = _order(steps)
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        out = next(n for n in graph.nodes if n.op == "output")
        prog = cls(gm, steps, placeholders, out.args[0], _last_uses(steps, out), strict=strict)
        for m in matches:
            if isinstance(m.call, FusedGemm):
                m.call.launched = prog.launched
        eager = prog.fallbacks()
        if strict and eager:
            raise StrictError("tilex backend (strict=True): these nodes have no tilex kernel: "
                              + ", ".join(f"{n} ({t})" for n, t in eager))
        for n, t in eager:
            log.info("tilex backend: %s (%s) runs as torch eager", n, t)
        return prog

    def mutated_inputs(self) -> set:
        """Indices of the placeholders the graph writes (copy_ into an input: AOTAutograd's kept mutations)."""
        index = {p: i for i, p in enumerate(self.placeholders)}
        return {index[n.args[0]] for n in self.gm.graph.nodes
                if n.op == "call_function" and n.target is aten.copy_.default and n.args[0] in index}

    def host_decisions(self) -> list:
        """Library steps whose check reads on the host a value that is not a folded constant (an input, or
        computed from one): a CUDA graph would replay the verdict of the captured call (cudagraphs.py)."""
        folded = {s.nodes[0] for s in self.steps if s.kind == "folded"}
        return [s.label for s in self.steps if s.kind == "library" and s.match.check is not None and any(
            isinstance(s.match.args[i], Node) and s.match.args[i] not in folded for i in s.match.decides)]

    def summary(self) -> str:
        counts: dict = {}
        for s in self.steps:
            counts[s.kind] = counts.get(s.kind, 0) + 1
        return ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))

    def time_shares(self) -> dict:
        """Share of the profiled time per step kind (library, generated, eager, ...)."""
        total = sum(s.seconds for s in self.steps) or 1.0
        out: dict = {}
        for s in self.steps:
            out[s.kind] = out.get(s.kind, 0.0) + s.seconds / total
        return out

    def fallbacks(self) -> list:
        return [(s.nodes[0].name, str(s.nodes[0].target)) for s in self.steps if s.kind == "eager"]

    # ---------------------------------------------------------------- building
    def kernel_launches(self) -> dict:
        """(source, name, defines) -> generated steps, for every generated step whose launch is static:
        what prepare() builds (the same group in every layer is one entry)."""
        out: dict = {}
        for s in self.steps:
            if s.kind != "generated":
                continue
            mn = s.kernel.static_launch()
            if mn is None:
                continue
            cfg = tuple(sorted(tile_config(mn[0], mn[1], s.kernel.has_reduction).items()))
            out.setdefault((s.kernel.source, s.kernel.name, cfg), []).append(s)
        return out

    def prepare(self, cuda: bool, workers: int | None = None) -> dict:
        """Build every static generated kernel before the first call: each distinct (source, config)
        translated once, then (on CUDA) their binaries compiled by a thread pool over NVRTC.
        Progress at INFO on the `tilex.backend` logger; returns (and keeps) the build statistics."""
        t0 = time.perf_counter()
        todo = self.kernel_launches()
        steps = sum(s.kind == "generated" for s in self.steps)
        library = []
        if cuda:
            from . import prewarm

            try:
                library = prewarm.library_jobs(self.steps, _sm_count())
            except Exception as e:  # noqa: BLE001 - an optimization only
                log.debug("tilex backend: library prewarm skipped: %s", e)
            try:  # the fused GEMMs' generated kernels (epilogue.py), in the same pool
                from .epilogue import prewarm_jobs

                library = library + prewarm_jobs(self.steps, torch.empty(0, device="cuda"))
            except Exception as e:  # noqa: BLE001 - an optimization only
                log.debug("tilex backend: fused GEMM prewarm skipped: %s", e)
        stats = kernels.build_all(list(todo), cuda, workers, library)
        self.build_stats = {"generated_steps": steps, "distinct_kernels": len({k[0] for k in todo}),
                            "builds": len(todo), "seconds": round(time.perf_counter() - t0, 3), **stats}
        log.info("tilex backend: built %d generated kernel(s) for %d generated step(s) in %.1f s",
                 len(todo), steps, self.build_stats["seconds"])
        return self.build_stats

    # ---------------------------------------------------------------- execution
    def __call__(self, *args):
        if self.after_first_call is not None:  # the first call: timed (build_stats["first_run_s"])
            self._first_t0 = time.perf_counter()
        env: dict = {}
        for p, a in zip(self.placeholders, args):
            env[p] = a
        sizes = tuple(a for p, a in zip(self.placeholders, args) if not isinstance(a, torch.Tensor))
        folded = self.folded_cache.get(sizes)
        if folded is None:
            folded = {}
            if len(self.folded_cache) >= 16:
                self.folded_cache.clear()
            self.folded_cache[sizes] = folded
        if not (self.profile or self.measure_memory):  # the flat executor: one call per step
            if len(self._frees) != len(self.steps):
                self._frees = [tuple(self.last_use.get(i, ())) for i in range(len(self.steps))]
            run = self._run
            arena = self.arena.begin(args) if self.arena is not None else None
            for step, frees in zip(self.steps, self._frees):
                run(step, env, folded, arena)
                for n in frees:
                    env.pop(n, None)
            return self._finish(env)
        exclude = memory.storage_keys(args) if self.measure_memory else None
        trace = [] if exclude is not None and not self.live_trace else None
        cuda = self.profile and any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
        arena = self.arena.begin(args) if self.arena is not None else None
        for i, step in enumerate(self.steps):
            if self.profile:
                if cuda:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
            self._run(step, env, folded, arena)
            if self.profile:
                if cuda:
                    torch.cuda.synchronize()
                step.seconds += time.perf_counter() - t0
            if exclude is not None:  # before the frees: the step's inputs and outputs are both live
                live = memory.live_bytes(list(env.values()), exclude, arena.span if arena else None)
                self.peak_bytes = max(self.peak_bytes, live)
                if trace is not None:
                    trace.append(live)
            for n in self.last_use.get(i, ()):
                env.pop(n, None)
        if trace is not None:
            self.live_trace = trace
        return self._finish(env)

    def _finish(self, env: dict):
        result = map_arg(self.output_args, lambda n: env[n])
        if self.after_first_call is not None:
            callback, self.after_first_call = self.after_first_call, None
            t0 = time.perf_counter()
            self.build_stats["first_run_s"] = round(t0 - getattr(self, "_first_t0", t0), 3)
            callback()
            self.build_stats["after_first_call_s"] = round(time.perf_counter() - t0, 3)
        return result

    def _run(self, step: Step, env: dict, folded: dict, arena=None) -> None:
        step.calls += 1
        node = step.nodes[0]
        if step.kind == "folded":
            if node not in folded:
                folded[node] = _eager(node, env)
            env[node] = folded[node]
        elif step.alias:
            env[node] = env[node.args[0]]  # the cache was written in place by its cache_write step
        elif step.kind in ("view", "eager", "copy"):
            spec = step.argspec
            if spec is None:
                spec = step.argspec = _argspec(node)
            env[node] = _eager(node, env) if spec is False else _call_flat(spec, env)
        elif step.kind == "library":
            m = step.match
            vals = [env[a] if isinstance(a, Node) else a for a in m.args]
            if m.check is not None and not m.check(*vals):
                step.fallbacks += 1
                env[node] = _eager_match(m, env)
                return
            # outputs of the planned sizes land in the arena (a kernel with several: in any order)
            with arena.providing((node, *m.extra)) if arena is not None else contextlib.nullcontext():
                out = m.call(*vals) if m.native else kernels.call_library(m.call, *vals)
            outs = (out,)
            if m.extra:  # a kernel with more outputs: (root, *extra)
                out, *more = out
                outs = (out, *more)
                for e, v in zip(m.extra, more):
                    env[e] = v
            env[node] = out
            if isinstance(m.call, FusedGemm):
                step.copies = m.call.copies
            if arena is not None:
                arena.check((node, *m.extra), outs)
        else:
            step.copies += run_generated(step, env, self.launched, arena)


def _sm_count() -> int:
    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)


def _argspec(node: Node):
    """(target, ((is a node, arg), ...)) for a node whose arguments are a flat tuple (each a node, or a constant
    holding no node) and that has no kwargs: its call needs no map_arg; False otherwise."""
    def has_node(a) -> bool:
        return isinstance(a, Node) or (isinstance(a, (list, tuple)) and any(has_node(x) for x in a)) or (
            isinstance(a, dict) and any(has_node(x) for x in a.values()))
    if node.kwargs or any(has_node(a) for a in node.args if not isinstance(a, Node)):
        return False
    return node.target, tuple((isinstance(a, Node), a) for a in node.args)


def _call_flat(spec, env: dict):
    """_eager for a node with an _argspec: the same call, the arguments read from env without map_arg."""
    target, flat = spec
    return call(target, [env[a] if is_node else a for is_node, a in flat])


def _eager_match(m: Match, env: dict):
    """The match's root computed in eager from its interior nodes (the check declined the kernel)."""
    inside = m.interior | {m.root}
    return eager_nodes([n for n in m.root.graph.nodes if n in inside], env)[m.root]


def step_io(step: Step) -> memory.StepIO:
    """What `step` reads and writes, for the memory plan (memory.py): library and generated
    outputs are fresh (placeable in the arena); a view or eager op's output may alias its inputs
    (by its schema), and an op that writes an input in place says which."""
    if step.kind == "library":
        reads = tuple(a for a in step.match.args if isinstance(a, Node))
        if step.match.writes is not None:  # written in place into an argument (a cache, a mutated input)
            return memory.StepIO(reads, (step.match.root,), aliases=True, inplace=(step.match.args[step.match.writes],))
        if step.match.extra:  # a kernel with more outputs: their regions share one lifetime (Program._run)
            outs = (step.match.root, *step.match.extra)
            return memory.StepIO(reads, outs, placeable=outs, together=True)
        return memory.StepIO(reads, (step.match.root,), placeable=(step.match.root,))
    if step.kind == "generated":
        members = set(step.nodes)
        reads = tuple(dict.fromkeys(a for n in step.nodes for a in member_inputs(n) if a not in members))
        outs = tuple(op.node for op in step.kernel.outputs)
        return memory.StepIO(reads, outs, placeable=outs)
    node = step.nodes[0]
    aliases, inplace = memory.schema_effects(node)
    return memory.StepIO(tuple(node.all_input_nodes), (node,), aliases=aliases or step.kind == "view",
                         inplace=inplace)
