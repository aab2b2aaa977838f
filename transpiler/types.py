"""Closed sets of the type system: dtypes, memory spaces, and the `Ty` annotation.

A table (`DTYPES`) holds every per-dtype fact (size, C type, NumPy type) so that the
passes, codegen and the interpreter read the same data instead of branching on names.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class StrEnum(str, Enum):
    """A closed set whose members are also their string values: `DType.BF16 == "bf16"`, `str()`, f-strings,
    hashing and JSON give the value, so code still comparing with strings keeps working during the
    transition (enum.StrEnum is 3.11+, the package supports 3.10)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class DTypeKind(StrEnum):
    FLOAT = "float"
    INT = "int"
    BOOL = "bool"


class DType(StrEnum):
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    I8 = "i8"
    I16 = "i16"
    I32 = "i32"
    I64 = "i64"
    U8 = "u8"
    U16 = "u16"
    BOOL = "bool"
    F8E4M3 = "f8e4m3"
    F8E5M2 = "f8e5m2"

    @property
    def info(self) -> "DTypeInfo":
        return DTYPES[self]

    @property
    def is_float(self) -> bool:
        return self.info.kind is DTypeKind.FLOAT

    @property
    def is_int(self) -> bool:
        return self.info.kind is DTypeKind.INT

    @property
    def is_bool(self) -> bool:
        return self is DType.BOOL

    @property
    def itemsize(self) -> int:
        return self.info.itemsize

    @property
    def ctype(self) -> str:
        return self.info.ctype

    @property
    def is_narrow_int(self) -> bool:
        """i8, u8, i16, u16: storage types; arithmetic on them is done in i32 (`widened`)."""
        return self.info.kind is DTypeKind.INT and self.info.bits < 32

    @property
    def int_range(self) -> tuple[int, int]:
        """(smallest, largest) value of an int dtype."""
        bits = self.info.bits
        return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if self.info.signed else (0, (1 << bits) - 1)

    @property
    def widened(self) -> "DType":
        """The dtype of arithmetic on this dtype: C's integer promotion, narrow ints compute (and give) i32."""
        return DType.I32 if self.is_narrow_int else self

    @property
    def compute(self) -> "DType":
        """The dtype arithmetic is done in: narrow floats compute in f32, then round."""
        return DType.F32 if self in (DType.F16, DType.BF16, DType.F8E4M3, DType.F8E5M2) else self


@dataclass(frozen=True)
class DTypeInfo:
    """Every fact about one dtype; the other dtype tables of the package are read from `DTYPES`."""

    name: str  # the tilex spelling ("bf16")
    kind: DTypeKind
    bits: int
    ctype: str  # storage type in generated CUDA
    reg: str  # register (compute) C type in generated CUDA: narrow floats compute in float
    numpy: str  # NumPy / ml_dtypes name
    torch: str | None  # torch dtype attribute (`torch.<name>`), None where torch has none
    rank: int  # promotion rank within its kind
    signed: bool
    # kernel-parameter facts: whether a kernel parameter may have it (`SUPPORTED`), and the ctypes type the host
    # passes a scalar parameter as (narrow floats go as float; the kernel rounds), None where it may not
    param: bool = False
    scalar_arg: str | None = None

    @property
    def itemsize(self) -> int:
        return self.bits // 8


def _d(dt, kind, bits, ctype, reg, numpy, torch, rank, signed, scalar_arg=None):
    return dt, DTypeInfo(dt.value, kind, bits, ctype, reg, numpy, torch, rank, signed, scalar_arg is not None,
                         scalar_arg)


_F, _I, _B = DTypeKind.FLOAT, DTypeKind.INT, DTypeKind.BOOL
DTYPES: dict[DType, DTypeInfo] = dict([
    _d(DType.BOOL, _B, 8, "bool", "bool", "bool", "bool", 0, False, "c_bool"),
    _d(DType.U8, _I, 8, "unsigned char", "int", "uint8", "uint8", 1, False, "c_int32"),
    _d(DType.I8, _I, 8, "signed char", "int", "int8", "int8", 1, True, "c_int32"),
    _d(DType.U16, _I, 16, "unsigned short", "int", "uint16", "uint16", 2, False, "c_int32"),
    _d(DType.I16, _I, 16, "short", "int", "int16", "int16", 2, True, "c_int32"),
    _d(DType.I32, _I, 32, "int", "int", "int32", "int32", 3, True, "c_int32"),
    _d(DType.I64, _I, 64, "long long", "long long", "int64", "int64", 4, True, "c_int64"),
    _d(DType.F8E4M3, _F, 8, "tilex_fp8e4m3", "float", "float8_e4m3fn", "float8_e4m3fn", 0, True, "c_float"),
    _d(DType.F8E5M2, _F, 8, "tilex_fp8e5m2", "float", "float8_e5m2", "float8_e5m2", 0, True, "c_float"),
    _d(DType.F16, _F, 16, "tilex_f16", "float", "float16", "float16", 1, True, "c_float"),
    _d(DType.BF16, _F, 16, "tilex_bf16", "float", "bfloat16", "bfloat16", 1, True, "c_float"),
    _d(DType.F32, _F, 32, "float", "float", "float32", "float32", 2, True, "c_float"),
    _d(DType.F64, _F, 64, "double", "double", "float64", "float64", 3, True),
])

# the dtypes a kernel parameter may have, in the order the runtime lists them
PARAM_DTYPES: tuple[DType, ...] = (DType.F16, DType.BF16, DType.F32, DType.I32, DType.I64, DType.BOOL, DType.F8E4M3,
                                   DType.I8, DType.U8, DType.I16, DType.U16, DType.F8E5M2)
assert {d for d in PARAM_DTYPES} == {d for d, i in DTYPES.items() if i.param}

# dtypes a kernel may use in this version (parsing accepts more, so the error is precise)
SUPPORTED = set(PARAM_DTYPES)


def parse_dtype(name: str) -> DType:
    return DType(name)


def numpy_dtype(dt: DType):
    """The NumPy dtype object for a tilex dtype (bf16 and fp8 through ml_dtypes)."""
    import numpy as np

    name = dt.info.numpy
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def promote(a: DType, b: DType) -> DType:
    """Result dtype of a binary arithmetic op on two tiles/scalars of dtypes a and b.

    float beats int beats bool; within floats the wider wins, and two different 16-bit
    floats (f16 with bf16) meet in f32. Within ints the wider wins; a signed and an unsigned int meet in the
    narrowest signed int that holds both (u8 with i8 is i16, u16 with i16 is i32).
    """
    if a == b:
        return a
    ka, kb = a.info.kind, b.info.kind
    order = {DTypeKind.BOOL: 0, DTypeKind.INT: 1, DTypeKind.FLOAT: 2}
    if order[ka] != order[kb]:
        return a if order[ka] > order[kb] else b
    if ka is DTypeKind.INT and a.info.signed != b.info.signed:  # the signed int that holds both: u8 + i8 is i16
        u, sg = (a, b) if not a.info.signed else (b, a)
        if sg.info.bits > u.info.bits:
            return sg
        return next(d for d, i in DTYPES.items() if i.kind is DTypeKind.INT and i.signed and i.bits == 2 * u.info.bits)
    if a.info.rank == b.info.rank:  # f16 vs bf16
        return DType.F32
    return a if a.info.rank > b.info.rank else b


class MemSpace(Enum):
    """Where a value lives on the GPU."""

    GLOBAL = "global"  # a tensor parameter in device memory
    SHARED = "shared"  # staged in shared memory (matmul operands, layout exchanges)
    REGISTERS = "registers"  # a tile distributed over the threads' registers
    FRAGMENT = "fragment"  # a tensor-core accumulator/operand fragment
    UNIFORM = "uniform"  # a scalar every thread of the block holds the same value of


class TyWhat(StrEnum):
    """What sort of value an expression is (`Ty.what`)."""

    VALUE = "value"  # a scalar (shape ()) or a tile (static int shape)
    TENSOR = "tensor"  # a global tensor parameter; `shape` holds its symbolic dims (str or int)
    DTYPE = "dtype"  # a dtype literal (`f32` in `.to(f32)`)
    TYPE = "type"  # a tile type (`f32[BM, BN]`)


class MmaStrategy(StrEnum):
    """How tensor-core products run: wgmma (sm_90a: warpgroups, operands in shared memory) or mma.sync."""

    WGMMA = "wgmma"
    MMA = "mma"


@dataclass(frozen=True)
class Ty:
    """The annotation every expression carries after the passes.

    `what` (`TyWhat`) says what sort of value it is: a scalar or tile value, a tensor parameter, a dtype
    literal or a tile type.
    """

    what: TyWhat = TyWhat.VALUE
    dtype: DType | None = None
    shape: tuple | None = None
    space: MemSpace | None = None
    layout: Any = None

    @property
    def is_scalar(self) -> bool:
        return self.what == TyWhat.VALUE and self.shape == ()

    @property
    def is_tile(self) -> bool:
        return self.what == TyWhat.VALUE and bool(self.shape)

    def show(self) -> str:
        if self.what == TyWhat.DTYPE:
            return f"dtype {self.dtype}"
        if self.shape is None:
            return str(self.dtype)
        if self.shape == ():
            return f"{self.dtype} scalar"
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
