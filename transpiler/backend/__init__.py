"""tilex.backend: `torch.compile(model, backend="tilex")` (inference).

Importing this module registers the backend with torch._dynamo. Dynamo's graph goes through
AOTAutograd (functionalized ATen, our decompositions); the forward graph is lowered to a Program
(program.py): library kernels for matched subgraphs (patterns.py), generated `.tile` kernels for
fusion groups (fusion.py, tilegen.py), torch eager for the rest (listed; an error with
options={"strict": True}). On CUDA tensors the kernels run on the GPU; on CPU tensors the same
program runs through the NumPy interpreter. docs/backend.md explains the lowering.

Options (torch.compile(..., options={...})):
  strict: bool    any node without a tilex kernel is an error (StrictError) instead of eager
  programs: list  every lowered Program is appended here (for tests and reports)
  memory: bool    track each Program's peak live bytes (Program.peak_bytes; memory.py)
  report: DIR     write DIR/graph_N.html per lowered graph (report.py), again after its first call
  cuda_graphs: bool | "borrow"  capture static-shape CUDA calls in a CUDA graph and replay it (cudagraphs.py):
                  True returns copies of the outputs; "borrow" the graph's own output memory, as Inductor's
                  reduce-overhead does (a kept output that a later replay overwrote raises on access); an
                  object with eligible/warm_up/capture instead replaces torch.cuda's graphs (tests)
  profile: bool   time every step (Step.seconds, Program.time_shares(); synchronizes on CUDA)
  arena: bool     (default True) intermediates in one lifetime-planned allocation per call (arena.py)
  verbose: bool   progress on stderr (the `tilex.backend` logger at INFO): lowering, kernel builds
  epilogues: bool (default True) a fusion group after a linear becomes that GEMM's epilogue (epilogue.py);
                  False keeps it a generated kernel of its own (A/B)
"""
from __future__ import annotations

import logging
import sys
import time

import torch

from .program import Program, StrictError

__all__ = ["tilex_backend", "Program", "StrictError", "OPTIONS"]

log = logging.getLogger("tilex.backend")
OPTIONS = {"strict": False, "programs": None, "memory": False, "report": None, "cuda_graphs": False,
           "profile": False, "arena": True, "verbose": False, "epilogues": True}
_GRAPHS = [0]  # graphs lowered in this process (names the reports)
aten = torch.ops.aten

# ATen ops AOTAutograd decomposes for us before lowering: composite ops into the ones the
# patterns and the fusion rules know.
_DECOMPOSE = [aten._log_softmax, aten.addcmul, aten.hardswish,
              aten.leaky_relu, aten.clamp_min, aten.clamp_max, aten.rsub, aten.var_mean]


def _decompositions():
    from torch._decomp import get_decompositions

    table = get_decompositions(_DECOMPOSE)
    table[aten._safe_softmax.default] = _safe_softmax
    return table


def _safe_softmax(x, dim, dtype=None):
    """aten._safe_softmax (SDPA's math path on CUDA, e.g. f32 with grouped-query heads) as the row reductions
    and elementwise ops the fusion rules know: softmax, and 0 for a row that is all -inf (no NaN)."""
    if dtype is not None:
        x = x.to(dtype)
    m = torch.amax(x, dim, keepdim=True)
    e = torch.exp(x - torch.where(m == float("-inf"), 0.0, m))
    s = torch.sum(e, dim, keepdim=True)
    return torch.where(s == 0, 0.0, e / s)



def _progress_to_stderr() -> None:
    if not any(getattr(h, "_tilex_progress", False) for h in log.handlers):
        h = logging.StreamHandler(sys.stderr)
        h._tilex_progress = True
        h.setFormatter(logging.Formatter("[tilex %(asctime)s] %(message)s", "%H:%M:%S"))
        log.addHandler(h)
    log.setLevel(logging.INFO)


def _check_options(options: dict | None) -> dict:
    opts = dict(OPTIONS)
    for k, v in (options or {}).items():
        if k not in OPTIONS:
            raise ValueError(f"tilex backend: unknown option {k!r} (expected one of {', '.join(OPTIONS)})")
        opts[k] = v
    cg = opts["cuda_graphs"]
    if isinstance(cg, str) and cg != "borrow":
        raise ValueError(f"tilex backend: cuda_graphs={cg!r}: expected True, False or 'borrow'")
    return opts


def tilex_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None):
    """The torch.compile backend: AOTAutograd with a forward compiler that lowers to a Program."""
    from torch._dynamo.backends.common import aot_autograd

    entered = time.perf_counter()  # Dynamo has traced; AOTAutograd traces next (build_stats["aot_s"])
    opts = _check_options(options)
    if opts["verbose"]:
        _progress_to_stderr()

    def fw_compiler(fgm: torch.fx.GraphModule, inputs):
        t0 = time.perf_counter()
        prog = Program.lower(fgm, strict=bool(opts["strict"]), epilogues=bool(opts["epilogues"]))
        prog.measure_memory = bool(opts["memory"])
        prog.profile = bool(opts["profile"])
        if opts["arena"]:
            from .arena import Arena

            prog.arena = Arena.for_program(prog)
        _use_cache(prog, fgm)
        # every static generated kernel built now (distinct ones once, binaries in parallel)
        prog.prepare(any(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in inputs))
        prog.build_stats["lower_s"] = round(time.perf_counter() - t0 - prog.build_stats["seconds"], 3)
        prog.build_stats["aot_s"] = round(t0 - entered, 3)
        prog.build_stats["backend_entered"] = entered  # perf_counter when Dynamo handed over the graph
        if opts["report"] is not None:
            from . import report

            name = f"graph_{_GRAPHS[0]}"
            _GRAPHS[0] += 1
            report.write(prog, opts["report"], name)
            prog.after_first_call = _chain(prog.after_first_call, lambda: report.write(prog, opts["report"], name))
        if opts["programs"] is not None:
            opts["programs"].append(prog)
        log.info("tilex backend: lowered a graph of %d nodes into %d steps (%s)", len(fgm.graph.nodes),
                 len(prog.steps), prog.summary())
        if opts["cuda_graphs"]:
            from .cudagraphs import CudaGraphs, GraphRunner

            cg = opts["cuda_graphs"]
            graphs = None if isinstance(cg, bool) else CudaGraphs(clone_outputs=False) if cg == "borrow" else cg
            prog.graph_runner = GraphRunner(prog, _static_inputs(), prog.mutated_inputs(), graphs)
            return _boxed(prog.graph_runner)
        return _boxed(prog)

    def bw_compiler(fgm, inputs):
        raise NotImplementedError("tilex backend: training (a backward graph) is not supported; "
                                  "call the compiled model under torch.no_grad()")

    # keep_inference_input_mutations: a mutated input (HF StaticCache's index_copy_) stays in the graph
    # as copy_(input, new value), which the lowering turns into an in-place cache write (patterns.py)
    return aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler, decompositions=_decompositions(),
                        keep_inference_input_mutations=True)(gm, example_inputs)


def _static_inputs() -> list | None:
    """AOTAutograd's static input indices (parameters, buffers, static addresses), or None."""
    try:
        ctx = torch._guards.TracingContext.try_get()
        meta = ctx.fw_metadata if ctx is not None else None
        return None if meta is None else list(meta.static_input_indices)
    except Exception:  # noqa: BLE001 - another torch version: the runner's address rule
        return None


def _arch() -> str:
    try:
        from ..runtime.nvrtc import default_arch

        return default_arch()
    except Exception:  # no GPU: the interpreter runs, and the record says so
        return "interp"


def _chain(first, then):
    if first is None:
        return then

    def both():
        first()
        then()
    return both


def _use_cache(prog: Program, fgm) -> None:
    """The graph cache (cache.py): fingerprint, record, prewarm; counts reused/built after call 1."""
    from . import cache

    cache.attach(prog, fgm, _arch(), _chain)


def _boxed(prog: Program):
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(prog)


def _register() -> None:
    """Register "tilex" with Dynamo, reading the registry's table directly: list_backends() imports every
    built-in backend (inductor's included: 0.7 s on a CPU) at `import tilex.backend`; torch 2.13's Dynamo
    still imports them at its first compile, so a warm start saves that only where Dynamo does not."""
    from torch._dynamo.backends import registry

    if "tilex" not in registry._COMPILER_FNS:
        registry.register_backend(name="tilex")(tilex_backend)


_register()
