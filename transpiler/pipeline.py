"""The pass pipeline: parse, then each semantic pass in order.

`PASSES` is the visible list; `compile_program` runs it and `tilex translate
--dump-after NAME` shows the IR after any one of them. The memory passes (`MEMORY_PASSES`, from
place_resident to budget_smem) run kernel by kernel: while budget_smem's verdict is that a kernel's
shared memory does not fit, the pipeline runs them again for it with the next attempt of `SMEM_POLICY`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from . import ast as A
from .deep import deep
from .diagnostics import CompileError, Span
from .parser import parse
from .passes.assign_layouts import assign_layouts
from .passes.budget_smem import (Attempt, budget_smem, check_budget, fewer_stream_stages, fits, next_attempt,
                                 no_register_streams, shallower_ring, streamed)
from .passes.check_constraints import check_constraints
from .passes.choose_mma import choose_mma
from .passes.choose_threads import choose_threads
from .passes.infer_dtypes import infer_dtypes
from .passes.infer_shapes import infer_shapes
from .passes.inline_functions import inline_functions
from .passes.memory_info import MemoryPlan
from .passes.place_resident import place_resident
from .passes.plan_barriers import plan_barriers
from .passes.plan_matmul import plan_matmul
from .passes.plan_streams import plan_streams
from .passes.plan_tma import plan_tma
from .passes.resolve_names import resolve_names
from .source import read_file
from .targets import DEFAULT_ARCH, Target, target
from .verify import verify


@dataclass(frozen=True)
class Options:
    """Everything that changes what the compiler produces; passed explicitly, never read from the environment."""

    defines: dict = field(default_factory=dict)
    arch: str = DEFAULT_ARCH  # the -arch name; `target` is what the passes read
    kernel: str | None = None  # restrict to one kernel
    # launch facts added as `where` constraints (checked at launch like the written ones): ((symbol, divisor), ...),
    # the launch-time specialization of tilex.specialize
    assume: tuple = ()
    # the values of parameters left to tilex (`= auto`, `in (...)`) per kernel, ((kernel, ((name, value), ...)), ...);
    # those not given here nor in `defines` are chosen by tilex.autoconfig at its nominal sizes
    auto: tuple = ()

    @property
    def target(self) -> Target:
        """The Target of `arch` (targets.TARGETS), what every pass is given."""
        return target(self.arch)

    def key(self) -> str:
        return repr((sorted(self.defines.items()), self.arch, self.kernel, self.assume, self.auto))


# what the pipeline gives up, in this order, while a kernel's shared memory is over the target's limit
# (passes/budget_smem.py): each time, the memory passes run again; when none applies, the budget's error
SMEM_POLICY = (fewer_stream_stages, no_register_streams, shallower_ring)

PASSES: list[tuple[str, Callable]] = [
    ("inline_functions", lambda p, o: inline_functions(p)),
    ("resolve_names", lambda p, o: resolve_names(p, o.defines, {k: dict(v) for k, v in o.auto})),
    ("infer_dtypes", lambda p, o: infer_dtypes(p, o.target)),
    ("infer_shapes", lambda p, o: infer_shapes(p)),
    ("check_constraints", lambda p, o: check_constraints(p)),
    ("plan_matmul", lambda p, o: plan_matmul(p, o.target.arch)),
    ("choose_threads", lambda p, o: choose_threads(p)),
    ("choose_mma", lambda p, o: choose_mma(p, o.target)),
    ("place_resident", lambda p, o: place_resident(p, o.target)),
    ("plan_streams", lambda p, o: plan_streams(p, o.target)),
    ("assign_layouts", lambda p, o: assign_layouts(p, o.target)),
    ("plan_tma", lambda p, o: plan_tma(p, o.target)),
    ("budget_smem", lambda p, o: budget_smem(p, o.target)),
    ("plan_barriers", lambda p, o: plan_barriers(p)),
]

# the memory passes: run per kernel, again with SMEM_POLICY's next attempt while budget_smem finds it over budget
MEMORY_PASSES = ("place_resident", "plan_streams", "assign_layouts", "plan_tma", "budget_smem")

PASS_NAMES = ["parse"] + [n for n, _ in PASSES]


@deep
def compile_program(source: str, file: str = "<string>", options: Options | None = None,
                    stop_after: str | None = None, check: bool = False) -> A.Program:
    """Parse and check a .tile program; returns the annotated IR (after `stop_after`, if given)."""
    options = options or Options()
    try:
        program = parse(source, file)
        if options.kernel is not None:
            names = [k.name for k in program.kernels]
            if options.kernel not in names:
                raise CompileError(f"no kernel named '{options.kernel}' in {file} (it has: {', '.join(names) or 'none'})",
                                   Span(file, 0, 0, 0, 0))
            program = replace(program, kernels=tuple(k for k in program.kernels if k.name == options.kernel))
        _check_defines(program, options)
        if stop_after == "parse":
            return program
        program = _assume(program, options.assume)
        options = _choose_auto(program, options)
        i = 0
        while i < len(PASSES):
            name, run = PASSES[i]
            if name == MEMORY_PASSES[0]:
                program = fit_memory(program, options, SMEM_POLICY, stop_after, check)
                if stop_after in MEMORY_PASSES:
                    return program
                i += len(MEMORY_PASSES)
                continue
            program = run(program, options)
            if check:
                verify(program, name)
            if stop_after == name:
                return program
            i += 1
        return program
    except CompileError as e:
        raise e.with_source(source)


def fit_memory(program: A.Program, options: Options, policy: tuple = SMEM_POLICY, stop_after: str | None = None,
               check: bool = False) -> A.Program:
    """Each kernel (after choose_mma) through the memory passes; while budget_smem's KernelMemory does not fit,
    again from the kernel as it was before them with the next attempt of `policy` (budget_smem.next_attempt);
    when none applies, the budget's error. Kernel by kernel, so errors come in kernel order. Returns the program
    after the memory passes, or after `stop_after` (one of them) in each kernel's last attempt."""
    at = PASS_NAMES.index(MEMORY_PASSES[0]) - 1
    group = PASSES[at: at + len(MEMORY_PASSES)]
    assert tuple(n for n, _ in group) == MEMORY_PASSES, "the memory passes must be consecutive in PASSES"
    kernels = []
    for k in program.kernels:
        attempt = Attempt(k)
        while True:
            one = replace(program, kernels=(replace(attempt.kernel, info=MemoryPlan(k.info, attempt.shrink)),))
            after = {}
            for name, run in group:
                one = run(one, options)
                if check:
                    verify(one, name)
                after[name] = one.kernels[0]
            out = one.kernels[0]
            if fits(out):
                break
            attempt = next_attempt(policy, attempt, bool(streamed(out)))
            if attempt is None:
                check_budget(out)
        kernels.append(after.get(stop_after, out))
    return replace(program, kernels=tuple(kernels))


def _check_defines(program: A.Program, options: Options) -> None:
    known = {cp.name for k in program.kernels for cp in k.cparams}
    for name in options.defines:
        if name not in known:
            raise CompileError(f"-D {name}: no kernel in {program.file} has a compile-time parameter '{name}'"
                               + (f" (they have: {', '.join(sorted(known))})" if known else ""), Span(program.file, 0, 0, 0, 0))


def _assume(program: A.Program, facts: tuple) -> A.Program:
    """Each kernel with the launch facts `(symbol, divisor)` of its own symbols added as `where SYM % D == 0`."""
    if not facts:
        return program
    kernels = []
    for k in program.kernels:
        dims = {d.id for p in k.params for d in (p.type.dims or ()) if isinstance(d, A.Name)}
        span = Span(program.file, 0, 0, 0, 0)
        extra = tuple(A.BinOp(A.BinOpKind.EQ, A.BinOp(A.BinOpKind.MOD, A.Name(sym, span), A.IntLit(int(d), span), span),
                              A.IntLit(0, span), span) for sym, d in facts if sym in dims)
        kernels.append(replace(k, where=k.where + extra) if extra else k)
    return replace(program, kernels=tuple(kernels))


def _choose_auto(program: A.Program, options: Options) -> Options:
    """`options` with a value for every parameter left to tilex (what tilex.autoconfig picks at nominal sizes
    for those neither defined nor in `options.auto`)."""
    given = {k: dict(v) for k, v in options.auto}
    if not any(c.auto and c.name not in options.defines and c.name not in given.get(k.name, {})
               for k in program.kernels for c in k.cparams):
        return options
    from .autoconfig import nominal_defines

    chosen = nominal_defines(program, options)
    merged = {k: {**chosen.get(k, {}), **given.get(k, {})} for k in {*chosen, *given}}
    return replace(options, auto=tuple((k, tuple(sorted(v.items()))) for k, v in sorted(merged.items())))


def compile_file(path: str, options: Options | None = None, **kw) -> A.Program:
    source, name = read_file(path, "tilex.pipeline.compile_file()")
    return compile_program(source, name, options, **kw)
