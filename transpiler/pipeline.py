"""The pass pipeline: parse, then each semantic pass in order.

`PASSES` is the visible list; `compile_program` runs it and `tilex translate
--dump-after NAME` shows the IR after any one of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from . import ast as A
from .deep import deep
from .diagnostics import CompileError, Span
from .parser import parse
from .passes.budget_smem import fewer_stream_stages, no_register_streams, shallower_ring
from .passes.check_constraints import check_constraints
from .passes.choose_threads import choose_threads
from .passes.infer_dtypes import infer_dtypes
from .passes.infer_memory import infer_memory
from .passes.infer_shapes import infer_shapes
from .passes.plan_barriers import plan_barriers
from .passes.plan_matmul import plan_matmul
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


# what infer_memory gives up, in this order, while a kernel's shared memory is over the target's limit
# (passes/budget_smem.py); when none applies, the budget's error
SMEM_POLICY = (fewer_stream_stages, no_register_streams, shallower_ring)

PASSES: list[tuple[str, Callable]] = [
    ("resolve_names", lambda p, o: resolve_names(p, o.defines, {k: dict(v) for k, v in o.auto})),
    ("infer_dtypes", lambda p, o: infer_dtypes(p, o.target)),
    ("infer_shapes", lambda p, o: infer_shapes(p)),
    ("check_constraints", lambda p, o: check_constraints(p)),
    ("plan_matmul", lambda p, o: plan_matmul(p, o.target.arch)),
    ("choose_threads", lambda p, o: choose_threads(p)),
    ("infer_memory", lambda p, o: infer_memory(p, o.target, SMEM_POLICY)),
    ("plan_barriers", lambda p, o: plan_barriers(p)),
]

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
            program = A.Program(tuple(k for k in program.kernels if k.name == options.kernel), program.file, program.source)
        _check_defines(program, options)
        if stop_after == "parse":
            return program
        program = _assume(program, options.assume)
        options = _choose_auto(program, options)
        for name, run in PASSES:
            program = run(program, options)
            if check:
                verify(program, name)
            if stop_after == name:
                return program
        return program
    except CompileError as e:
        raise e.with_source(source)


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
    return A.Program(tuple(kernels), program.file, program.source)


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
