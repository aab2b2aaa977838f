"""The typed AST of a .tile program: frozen dataclasses, each carrying its source `span`.

The parser builds these with `ty=None`. Semantic passes return new trees (never mutate)
in which every expression's `ty` is filled in (dtype, shape, then memory space and
layout); that annotated tree is the kernel IR that codegen and the interpreter read.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any, Iterator

from .diagnostics import NO_SPAN, Span
from .types import DType, StrEnum, Ty


class BinOpKind(Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    FLOORDIV = "//"
    MOD = "%"
    POW = "**"
    MATMUL = "@"
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    AND = "and"
    OR = "or"
    BITAND = "&"
    BITOR = "|"
    BITXOR = "^"
    SHL = "<<"  # `<<` and `>>` on ints; `>>` is arithmetic for signed ints
    SHR = ">>"
    MAX = "max"  # only from `max=` augmented assignment
    MIN = "min"

    @property
    def is_compare(self) -> bool:
        return self in _COMPARES

    @property
    def is_logical(self) -> bool:
        return self in (BinOpKind.AND, BinOpKind.OR)


_COMPARES = {BinOpKind.EQ, BinOpKind.NE, BinOpKind.LT, BinOpKind.LE, BinOpKind.GT, BinOpKind.GE}


class UnaryOpKind(Enum):
    NEG = "-"
    NOT = "not"
    INVERT = "~"  # bitwise not of an int


class NameKind(Enum):
    """What a name refers to; set by the resolve pass."""

    UNRESOLVED = "unresolved"
    TENSOR = "tensor"  # a tensor parameter (global memory)
    SCALAR_PARAM = "scalar param"
    SYMBOL = "symbol"  # a shape symbol such as M, bound at launch
    LOCAL = "local"  # a value bound in the kernel body
    LOOP_VAR = "loop variable"
    CONST = "constant"  # inf, nan, pi


# ---------------------------------------------------------------- expressions
@dataclass(frozen=True)
class Expr:
    def children(self) -> Iterator["Node"]:
        for f in fields(self):
            if f.name in ("span", "ty"):
                continue
            v = getattr(self, f.name)
            if isinstance(v, Node):
                yield v
            elif isinstance(v, tuple):
                for x in v:
                    if isinstance(x, Node):
                        yield x
                    elif isinstance(x, tuple):  # kwargs: (name, expr)
                        for y in x:
                            if isinstance(y, Node):
                                yield y


@dataclass(frozen=True)
class Name(Expr):
    id: str
    span: Span = NO_SPAN
    kind: NameKind = NameKind.UNRESOLVED
    ty: Ty | None = None


@dataclass(frozen=True)
class IntLit(Expr):
    value: int
    span: Span = NO_SPAN
    ty: Ty | None = None


@dataclass(frozen=True)
class FloatLit(Expr):
    value: float
    span: Span = NO_SPAN
    ty: Ty | None = None


@dataclass(frozen=True)
class BoolLit(Expr):
    value: bool
    span: Span = NO_SPAN
    ty: Ty | None = None


@dataclass(frozen=True)
class DTypeLit(Expr):
    """A dtype used as a value: the argument of `.to(bf16)`."""

    dtype: DType
    span: Span = NO_SPAN
    ty: Ty | None = None


@dataclass(frozen=True)
class TileTypeExpr(Expr):
    """`f32[BM, BN]`: the argument of zeros/full/arange-style constructors."""

    dtype: DType
    dims: tuple[Expr, ...]
    span: Span = NO_SPAN
    ty: Ty | None = None


@dataclass(frozen=True)
class BinOp(Expr):
    op: BinOpKind
    lhs: Expr
    rhs: Expr
    span: Span = NO_SPAN
    ty: Ty | None = None


@dataclass(frozen=True)
class UnaryOp(Expr):
    op: UnaryOpKind
    operand: Expr
    span: Span = NO_SPAN
    ty: Ty | None = None


@dataclass(frozen=True)
class Call(Expr):
    """A builtin call: `exp(x)`, `sum(t, axis=1)`, `program_id(0)`, `range(0, N, B)`."""

    func: str
    args: tuple[Expr, ...]
    kwargs: tuple[tuple[str, Expr], ...] = ()
    span: Span = NO_SPAN
    ty: Ty | None = None

    def kwarg(self, name: str) -> Expr | None:
        for k, v in self.kwargs:
            if k == name:
                return v
        return None


@dataclass(frozen=True)
class Method(Expr):
    """`x.to(f32)`: a method call on a value."""

    obj: Expr
    name: str
    args: tuple[Expr, ...]
    kwargs: tuple[tuple[str, Expr], ...] = ()
    span: Span = NO_SPAN
    ty: Ty | None = None


@dataclass(frozen=True)
class Attr(Expr):
    """`w.T`: an attribute of a value."""

    obj: Expr
    name: str
    span: Span = NO_SPAN
    ty: Ty | None = None


@dataclass(frozen=True)
class Slice(Expr):
    """`start : stop` inside a subscript; either bound may be missing."""

    start: Expr | None
    stop: Expr | None
    span: Span = NO_SPAN
    ty: Ty | None = None


@dataclass(frozen=True)
class NewAxis(Expr):
    """`None` inside a subscript of a tile: inserts an axis of size 1."""

    span: Span = NO_SPAN
    ty: Ty | None = None


@dataclass(frozen=True)
class Index(Expr):
    """`x[i, a : b, other = v]`: a read of a tensor (a load) or a view of a tile."""

    base: Expr
    items: tuple[Expr, ...]
    kwargs: tuple[tuple[str, Expr], ...] = ()
    span: Span = NO_SPAN
    ty: Ty | None = None

    def kwarg(self, name: str) -> Expr | None:
        for k, v in self.kwargs:
            if k == name:
                return v
        return None


# ---------------------------------------------------------------- statements
@dataclass(frozen=True)
class Stmt:
    pass


@dataclass(frozen=True)
class Block:
    stmts: tuple[Stmt, ...]
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Assign(Stmt):
    """`name = value` (with `op`, `name op= value`, desugared by the resolve pass)."""

    name: str
    value: Expr
    span: Span = NO_SPAN
    op: BinOpKind | None = None


@dataclass(frozen=True)
class Store(Stmt):
    """`x[...] = value` (with `op`: `x[...] op= value`): a masked write of a tensor.

    With `atomic` (`atomic_add(x[...], value)`: "add", "max", "min", "xchg", "cas"; `compare` the expected
    value of "cas") each element is an atomic read-modify-write. `distinct`: the subscript's index tiles were
    declared never to repeat (`x[ids, distinct = True] = v`); `updates`: the value reads the target (a
    desugared `x[...] op= value`). `result`: the variable an atomic's old values are assigned to
    (`old = atomic_add(x[...], value)`: a tile of the subscript's shape and the tensor's dtype, or a scalar)."""

    target: Index
    value: Expr
    span: Span = NO_SPAN
    op: BinOpKind | None = None
    atomic: str | None = None
    compare: Expr | None = None
    distinct: bool = False
    updates: bool = False
    result: str | None = None


@dataclass(frozen=True)
class For(Stmt):
    """`for var in range(start, stop, step) { ... }` (or `pipeline(..., stages=S)`)."""

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: Block
    span: Span = NO_SPAN
    stages: int = 1  # > 1 for pipeline(...)
    pipelined: bool = False
    plan: Any = None  # plan_matmul result (tilex.passes.plan_matmul.MatmulPlan) for tensor-core main loops
    stream: tuple = ()  # plan_streams: tiles copied into shared memory one iteration ahead (StreamTile)
    mma: Any = None  # choose_mma: how a pipeline loop's products run (StreamedMma)
    not_main: str = ""  # plan_matmul, for a pipeline loop it did not plan: why it is not a tensor-core main loop


@dataclass(frozen=True)
class If(Stmt):
    cond: Expr
    then: Block
    orelse: Block | None
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Fence(Stmt):
    """`fence()`: the program's memory operations before it are ordered, at device scope, before those after it
    (the program's threads: a barrier, `__threadfence()`, a barrier; in a warp-specialized kernel the barrier is
    the consumers' named one), for atomics that tell programs apart."""

    span: Span = NO_SPAN


# ---------------------------------------------------------------- declarations
class CParamKind(StrEnum):
    """The declared type of a compile-time parameter. `warps` and `min_blocks` are ints that are also the
    kernel's launch parameters (`launch_params.requested_launch`)."""

    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    WARPS = "warps"  # warps per block (a power of two, 1 to 32)
    MIN_BLOCKS = "min_blocks"  # resident blocks per SM asked of ptxas (__launch_bounds__), 0: none
    DTYPE = "dtype"  # a dtype (`<T: dtype = bf16>`): usable wherever a dtype is written, never as a value

    @property
    def value_kind(self) -> "CParamKind":
        """The kind its values have: launch parameters are ints."""
        return CParamKind.INT if self in (CParamKind.WARPS, CParamKind.MIN_BLOCKS) else self


@dataclass(frozen=True)
class CParam:
    """A compile-time parameter `<BLOCK: int = 1024>`, or one tilex chooses per shape:
    `<BM: int = auto>` (a search space implied by its role) or `<BM: int in (64, 128)>` (declared)."""

    name: str
    kind: CParamKind | str  # a CParamKind; the parser keeps any other name as written (resolve_names reports it)
    default: int | float | bool | DType | None
    span: Span = NO_SPAN
    auto: bool = False  # chosen by tilex (tilex.autoconfig) unless defined
    space: tuple | None = None  # the declared candidates of `in (...)`; None: implied by the role (`= auto`)


@dataclass(frozen=True)
class TypeExpr:
    dtype: DType | None  # None until resolve_names when written as a dtype parameter
    dims: tuple[Expr, ...] | None  # None: a scalar
    span: Span = NO_SPAN
    param: str | None = None  # the dtype parameter written (`x: T[M, N]`), kept for the runtime's binding


@dataclass(frozen=True)
class Param:
    name: str
    type: TypeExpr
    is_out: bool
    default: Expr | None
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Kernel:
    name: str
    cparams: tuple[CParam, ...]
    params: tuple[Param, ...]
    where: tuple[Expr, ...]
    grid: tuple[Expr, ...]
    body: Block
    span: Span = NO_SPAN
    # filled by passes: values of compile-time params, shape symbols in order of appearance
    defines: tuple[tuple[str, Any], ...] = ()
    symbols: tuple[str, ...] = ()
    facts: Any = None  # check_constraints result (tilex.passes.check_constraints.Facts)
    info: Any = None  # choose_threads' LaunchConfig, the memory passes' MemoryPlan, budget_smem's KernelMemory


# ---------------------------------------------------------------- functions and imports
# `fn` helpers and the statements only they use; passes/inline_functions.py inlines every call, so none of
# these reaches the passes after it.
@dataclass(frozen=True)
class Return(Stmt):
    """`return a, b`: the last statement of a fn's body."""

    values: tuple[Expr, ...]
    span: Span = NO_SPAN


@dataclass(frozen=True)
class MultiAssign(Stmt):
    """`a, b = f(...)`: the results of a fn call bound to names."""

    names: tuple[str, ...]
    value: Expr
    span: Span = NO_SPAN


@dataclass(frozen=True)
class CallStmt(Stmt):
    """`f(...)` as a statement: a fn called for its stores."""

    call: Expr
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Function:
    """`fn name<CPARAMS>(params) { ... }`: a helper inlined at each call; its parameters take the dtype and
    shape of each call's arguments (they carry no types)."""

    name: str
    cparams: tuple[CParam, ...]
    params: tuple[str, ...]
    body: Block
    span: Span = NO_SPAN
    param_spans: tuple[Span, ...] = ()


@dataclass(frozen=True)
class Import:
    """`import "f.tile"` (names None: every fn of the file) or `from "f.tile" import a, b`."""

    path: str
    names: tuple[str, ...] | None
    span: Span = NO_SPAN
    name_spans: tuple[Span, ...] = ()


@dataclass(frozen=True)
class Program:
    kernels: tuple[Kernel, ...]
    file: str = "<string>"
    source: str = field(default="", repr=False)
    functions: tuple[Function, ...] = ()  # until inline_functions
    imports: tuple[Import, ...] = ()

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)


Node = Expr | Stmt | Block


def with_ty(node: Expr, ty: Ty) -> Expr:
    return replace(node, ty=ty)
