"""C spellings of tilex values: register and storage types per dtype, float literals, operators."""
from __future__ import annotations

import math

from .. import ast as A
from ..types import DType

B = A.BinOpKind

# register (compute) C type per dtype
REG = {d: d.info.reg for d in DType}  # types.DTYPES
ROUND = {DType.BF16: "tilex_round_bf16", DType.F16: "tilex_round_f16", DType.F8E4M3: "tilex_round_fp8e4m3",
         DType.F8E5M2: "tilex_round_fp8e5m2"}


def rounded_scalar(p: A.Param) -> bool:
    """A bf16/f16/fp8 scalar parameter: the host passes a float (kernel parameter `tx_arg_<name>`), which the
    kernel rounds to the dtype on entry, as the interpreter does when the launch binds it."""
    return p.type.dims is None and DType(p.type.dtype) in ROUND
C_BINOP = {B.ADD: "+", B.SUB: "-", B.MUL: "*", B.EQ: "==", B.NE: "!=", B.LT: "<", B.LE: "<=", B.GT: ">", B.GE: ">=",
           B.AND: "&&", B.OR: "||", B.BITAND: "&", B.BITOR: "|",
           B.BITXOR: "^"}


def reg(dt: DType) -> str:
    return REG[dt]


def storage(dt: DType) -> str:
    return dt.ctype


def flit(v: float) -> str:
    if math.isnan(v):
        return "__int_as_float(0x7fc00000)"
    if math.isinf(v):
        return "__int_as_float(0x7f800000)" if v > 0 else "__int_as_float(0xff800000)"
    r = repr(float(v))
    if "e" not in r and "." not in r:
        r += ".0"
    return r + "f"


def barrier(b) -> str:
    """The C statement of block barrier `b` (passes/plan_barriers.Barrier)."""
    if b.threads is None:
        return "__syncthreads();"
    return f'asm volatile("bar.sync {b.id}, {b.threads};" ::: "memory");'
