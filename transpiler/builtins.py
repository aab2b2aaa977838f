"""The table of builtin functions: what each takes and returns, and how it computes.

Passes read `FUNCTIONS` for arity, result dtype and shape rules; the interpreter reads
`NUMPY`; codegen reads `CUDA`. One row per function keeps the three in step.
"""
from __future__ import annotations

from dataclasses import dataclass

from .types import DType, StrEnum


class BuiltinKind(StrEnum):
    """The family of a builtin: each pass has one rule per family, not per function."""

    MATH = "math"  # elementwise float math (ints converted to f32; narrow floats compute in f32)
    ABS = "abs"  # elementwise, same dtype
    MINMAX = "minmax"  # two operands: elementwise; one: a reduction
    WHERE = "where"  # elementwise select
    REDUCE = "reduce"  # sum, mean
    ARGREDUCE = "argreduce"  # index of the first max/min (i32)
    CTOR = "ctor"  # a tile of a given type (zeros, full)
    ARANGE = "arange"  # an i32 tile start..stop-1
    AXIS = "axis"  # program_id, num_programs
    SCALAR = "scalar"  # integer scalar functions (cdiv)
    ATOMIC = "atomic"  # a statement: atomic read-modify-write of tensor elements (ATOMICS below)
    FENCE = "fence"  # a statement: fence(), device-scope ordering of the program's memory operations
    SCAN = "scan"  # cumulative sum/max/min along an axis (same shape)
    SORT = "sort"  # sort / argsort along an axis (same shape)
    TOPK = "topk"  # the K first of a sort along an axis (values or i32 indices)


K = BuiltinKind


@dataclass(frozen=True)
class Builtin:
    name: str
    kind: BuiltinKind
    min_args: int
    max_args: int
    kwargs: tuple[str, ...] = ()
    doc: str = ""


def _b(name, kind, lo, hi, kwargs=(), doc=""):
    return name, Builtin(name, kind, lo, hi, tuple(kwargs), doc)


FUNCTIONS: dict[str, Builtin] = dict([
    # elementwise math on floats (ints are converted to f32); narrow floats compute in f32
    _b("exp", K.MATH, 1, 1, doc="e**x"),
    _b("exp2", K.MATH, 1, 1, doc="2**x (a subnormal result is flushed to 0)"),
    _b("log", K.MATH, 1, 1, doc="natural logarithm"),
    _b("log2", K.MATH, 1, 1, doc="base-2 logarithm"),
    _b("sqrt", K.MATH, 1, 1, doc="square root"),
    _b("rsqrt", K.MATH, 1, 1, doc="1 / sqrt(x)"),
    _b("tanh", K.MATH, 1, 1, doc="hyperbolic tangent"),
    _b("sigmoid", K.MATH, 1, 1, doc="1 / (1 + exp(-x))"),
    _b("silu", K.MATH, 1, 1, doc="x * sigmoid(x)"),
    _b("gelu", K.MATH, 1, 1, doc="x * Phi(x), the erf form"),
    _b("gelu_tanh", K.MATH, 1, 1, doc="the tanh approximation of gelu"),
    _b("sin", K.MATH, 1, 1, doc="sine"),
    _b("cos", K.MATH, 1, 1, doc="cosine"),
    _b("erf", K.MATH, 1, 1, doc="error function"),
    _b("floor", K.MATH, 1, 1, doc="round down"),
    _b("ceil", K.MATH, 1, 1, doc="round up"),
    _b("abs", K.ABS, 1, 1, doc="absolute value, same dtype"),
    # two-operand elementwise (with one operand: a reduction, see below)
    _b("max", K.MINMAX, 1, 2, ("axis", "keepdims"), doc="max(a, b) elementwise; max(t[, axis]) reduces"),
    _b("min", K.MINMAX, 1, 2, ("axis", "keepdims"), doc="min(a, b) elementwise; min(t[, axis]) reduces"),
    _b("where", K.WHERE, 3, 3, doc="where(cond, a, b) elementwise select"),
    # reductions
    _b("sum", K.REDUCE, 1, 1, ("axis", "keepdims"), doc="sum over all elements or one axis"),
    _b("mean", K.REDUCE, 1, 1, ("axis", "keepdims"), doc="arithmetic mean over all elements or one axis"),
    _b("argmax", K.ARGREDUCE, 1, 1, ("axis",), doc="index of the first maximum (i32)"),
    _b("argmin", K.ARGREDUCE, 1, 1, ("axis",), doc="index of the first minimum (i32)"),
    # tile constructors
    _b("zeros", K.CTOR, 1, 1, doc="zeros(f32[B, C]): a tile of zeros"),
    _b("full", K.CTOR, 2, 2, doc="full(f32[B], value): a tile filled with a scalar"),
    _b("arange", K.ARANGE, 2, 2, doc="arange(start, stop): i32 tile start..stop-1, stop-start constant"),
    # scans, sorts and top-k along one axis (transpiler/passes/scan_rules.py, codegen/scan.py, interp_scan.py)
    _b("cumsum", K.SCAN, 1, 1, ("axis", "exclusive"), doc="running sum along an axis (floats in f32)"),
    _b("cummax", K.SCAN, 1, 1, ("axis", "exclusive"), doc="running max along an axis (NaN ignored)"),
    _b("cummin", K.SCAN, 1, 1, ("axis", "exclusive"), doc="running min along an axis (NaN ignored)"),
    _b("sort", K.SORT, 1, 1, ("axis", "descending"), doc="values sorted along an axis (stable, NaN largest)"),
    _b("argsort", K.SORT, 1, 1, ("axis", "descending"), doc="i32 positions that sort along an axis (stable)"),
    _b("topk", K.TOPK, 2, 2, ("axis", "descending"), doc="topk(t, K): the K largest along an axis, in order"),
    _b("argtopk", K.TOPK, 2, 2, ("axis", "descending"), doc="argtopk(t, K): their i32 positions"),
    # scalars
    _b("program_id", K.AXIS, 1, 1, doc="index of this program along grid axis 0, 1 or 2"),
    _b("num_programs", K.AXIS, 1, 1, doc="number of programs along grid axis 0, 1 or 2"),
    _b("cdiv", K.SCALAR, 2, 2, doc="ceil(a / b) on integers"),
    # atomics: statements over a subscript of an out tensor (ATOMICS)
    _b("atomic_add", K.ATOMIC, 2, 2, doc="atomic_add(t[...], v): t[...] += v, every update kept (np.add.at)"),
    _b("atomic_max", K.ATOMIC, 2, 2, doc="atomic_max(t[...], v): t[...] = max(t[...], v) (np.fmax.at)"),
    _b("atomic_min", K.ATOMIC, 2, 2, doc="atomic_min(t[...], v): t[...] = min(t[...], v) (np.fmin.at)"),
    _b("atomic_xchg", K.ATOMIC, 2, 2, doc="atomic_xchg(t[...], v): t[...] = v, one of colliding writes wins"),
    _b("atomic_cas", K.ATOMIC, 3, 3, doc="atomic_cas(t[...], expected, v): t[...] = v where t[...] == expected"),
    _b("fence", K.FENCE, 0, 0, doc="fence(): this program's writes before it are seen by every program before its "
                                     "atomics after it (a statement)"),
])

MATH_FUNCS = {n for n, b in FUNCTIONS.items() if b.kind is K.MATH}
REDUCTIONS = {n for n, b in FUNCTIONS.items() if b.kind in (K.REDUCE, K.ARGREDUCE, K.MINMAX)}


def is_reduction(call) -> bool:
    """Whether a builtin call (an `ast.Call`) reduces its operand: sum/mean/argmax/argmin, or max/min of one
    operand."""
    kind = FUNCTIONS[call.func].kind
    return kind in (K.REDUCE, K.ARGREDUCE) or (kind is K.MINMAX and len(call.args) == 1)

# ---- atomics: one row per operation. `dtypes`: the element types it takes; `cuda`: the device helper of
# templates/tilex_atomic.cuh (`tilex_atomic_<op>(S* p, R v)`, cas: `(S* p, R expected, R v)`); `fetch`: the one of
# templates/tilex_atomic_fetch.cuh that returns the old value (`old = atomic_<op>(...)`), same arguments
@dataclass(frozen=True)
class Atomic:
    op: str
    dtypes: frozenset
    cuda: str
    fetch: str


def _atomic(op: str, *dtypes: str) -> tuple[str, Atomic]:
    return f"atomic_{op}", Atomic(op, frozenset(DType(d) for d in dtypes), f"tilex_atomic_{op}", f"tilex_atomic_fetch_{op}")


ATOMICS: dict[str, Atomic] = dict([
    _atomic("add", "i32", "i64", "f32", "f16", "bf16"),
    _atomic("max", "i32", "i64", "f32"),
    _atomic("min", "i32", "i64", "f32"),
    _atomic("xchg", "i32", "i64", "f32"),
    _atomic("cas", "i32", "i64", "f32"),
])
ATOMIC_OPS = {a.op: a for a in ATOMICS.values()}
# the atomic that an augmented store through repeating indices means (`t[ids] += v`: atomic_add)
ATOMIC_FOR_UPDATE = {"+": "atomic_add", "-": "atomic_add", "max": "atomic_max", "min": "atomic_min"}


def is_scan(call) -> bool:
    """Whether a builtin call (an `ast.Call`) is a scan, sort or top-k along an axis (a tile result)."""
    return FUNCTIONS[call.func].kind in (K.SCAN, K.SORT, K.TOPK)


@dataclass(frozen=True)
class ScanArgs:
    """The arguments of a scan, sort or top-k call after infer_shapes (which writes `axis=` and K as literals)."""

    axis: int  # >= 0
    flag: bool  # exclusive= of a scan, descending= of a sort or top-k
    k: int | None  # top-k's K
    indices: bool  # argsort / argtopk: the result is the i32 positions


def scan_args(call) -> ScanArgs:
    kind = FUNCTIONS[call.func].kind
    axis = call.kwarg("axis")
    flag = call.kwarg("exclusive" if kind is K.SCAN else "descending")
    return ScanArgs(int(axis.value) if axis is not None else -1,
                    bool(flag.value) if flag is not None else kind is K.TOPK,
                    int(call.args[1].value) if kind is K.TOPK else None,
                    call.func in ("argsort", "argtopk"))


# NumPy implementations (float32 in, float32 out) used by the interpreter
NUMPY_MATH = {
    "exp": "np.exp(x)",
    "exp2": "_ftz(np.exp2(x))",
    "log": "np.log(x)",
    "log2": "np.log2(x)",
    "sqrt": "np.sqrt(x)",
    "rsqrt": "1 / np.sqrt(x)",
    "tanh": "np.tanh(x)",
    "sigmoid": "1 / (1 + np.exp(-x))",
    "silu": "x / (1 + np.exp(-x))",
    "gelu": "0.5 * x * (1 + _erf(x / np.sqrt(2)))",
    "gelu_tanh": "0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))",
    "sin": "np.sin(x)",
    "cos": "np.cos(x)",
    "erf": "_erf(x)",
    "floor": "np.floor(x)",
    "ceil": "np.ceil(x)",
}

# CUDA device implementations on float (f32) operands; `{x}` is the operand expression
CUDA_MATH = {
    "exp": "expf({x})",
    "exp2": "tilex_exp2({x})",
    "log": "logf({x})",
    "log2": "log2f({x})",
    "sqrt": "sqrtf({x})",
    "rsqrt": "rsqrtf({x})",
    "tanh": "tanhf({x})",
    "sigmoid": "tilex_sigmoid({x})",
    "silu": "tilex_silu({x})",
    "gelu": "tilex_gelu({x})",
    "gelu_tanh": "tilex_gelu_tanh({x})",
    "sin": "sinf({x})",
    "cos": "cosf({x})",
    "erf": "erff({x})",
    "floor": "floorf({x})",
    "ceil": "ceilf({x})",
}
