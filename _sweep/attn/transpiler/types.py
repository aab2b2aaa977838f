"""Closed sets of the type system: dtypes, memory spaces, and the `Ty` annotation.

A table (`DTYPES`) holds every per-dtype fact (size, C type, NumPy type) so that the
passes, codegen and the interpreter read the same data instead of branching on names.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class DType(Enum):
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    I8 = "i8"
    I16 = "i16"
    I32 = "i32"
    I64 = "i64"
    U8 = "u8"
    BOOL = "bool"
    F8E4M3 = "f8e4m3"

    @property
    def info(self) -> "DTypeInfo":
        return DTYPES[self]

    @property
    def is_float(self) -> bool:
        return self.info.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.info.kind == "int"

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
    def compute(self) -> "DType":
        """The dtype arithmetic is done in: narrow floats compute in f32, then round."""
        return DType.F32 if self in (DType.F16, DType.BF16, DType.F8E4M3) else self

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class DTypeInfo:
    kind: str  # "float" | "int" | "bool"
    itemsize: int
    ctype: str  # storage type in generated CUDA
    numpy: str  # NumPy / ml_dtypes name
    rank: int  # promotion rank within its kind


DTYPES: dict[DType, DTypeInfo] = {
    DType.BOOL: DTypeInfo("bool", 1, "bool", "bool", 0),
    DType.U8: DTypeInfo("int", 1, "unsigned char", "uint8", 1),
    DType.I8: DTypeInfo("int", 1, "signed char", "int8", 1),
    DType.I16: DTypeInfo("int", 2, "short", "int16", 2),
    DType.I32: DTypeInfo("int", 4, "int", "int32", 3),
    DType.I64: DTypeInfo("int", 8, "long long", "int64", 4),
    DType.F8E4M3: DTypeInfo("float", 1, "tilex_fp8e4m3", "float8_e4m3fn", 0),
    DType.F16: DTypeInfo("float", 2, "tilex_f16", "float16", 1),
    DType.BF16: DTypeInfo("float", 2, "tilex_bf16", "bfloat16", 1),
    DType.F32: DTypeInfo("float", 4, "float", "float32", 2),
    DType.F64: DTypeInfo("float", 8, "double", "float64", 3),
}

# dtypes a kernel may use in this version (parsing accepts more, so the error is precise)
SUPPORTED = {DType.F16, DType.BF16, DType.F32, DType.I32, DType.I64, DType.BOOL, DType.F8E4M3}


def parse_dtype(name: str) -> DType:
    return DType(name)


def numpy_dtype(dt: DType):
    """The NumPy dtype object for a tilex dtype (bf16 and fp8 through ml_dtypes)."""
    import numpy as np

    name = dt.info.numpy
    if name in ("bfloat16", "float8_e4m3fn"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def promote(a: DType, b: DType) -> DType:
    """Result dtype of a binary arithmetic op on two tiles/scalars of dtypes a and b.

    float beats int beats bool; within floats the wider wins, and two different 16-bit
    floats (f16 with bf16) meet in f32. Within ints the wider wins.
    """
    if a == b:
        return a
    ka, kb = a.info.kind, b.info.kind
    order = {"bool": 0, "int": 1, "float": 2}
    if order[ka] != order[kb]:
        return a if order[ka] > order[kb] else b
    if a.info.rank == b.info.rank:  # f16 vs bf16, i8 vs u8
        return DType.F32 if ka == "float" else DType.I16
    return a if a.info.rank > b.info.rank else b


class MemSpace(Enum):
    """Where a value lives on the GPU."""

    GLOBAL = "global"  # a tensor parameter in device memory
    SHARED = "shared"  # staged in shared memory (matmul operands, layout exchanges)
    REGISTERS = "registers"  # a tile distributed over the threads' registers
    FRAGMENT = "fragment"  # a tensor-core accumulator/operand fragment
    UNIFORM = "uniform"  # a scalar every thread of the block holds the same value of


@dataclass(frozen=True)
class Ty:
    """The annotation every expression carries after the passes.

    `what` says what sort of value it is:
      "value"  a scalar (shape ()) or a tile (static int shape)
      "tensor" a global tensor parameter; `shape` holds its symbolic dims (str or int)
      "dtype"  a dtype literal (`f32` in `.to(f32)`)
      "type"   a tile type (`f32[BM, BN]`)
    """

    what: str = "value"
    dtype: DType | None = None
    shape: tuple | None = None
    space: MemSpace | None = None
    layout: Any = None

    @property
    def is_scalar(self) -> bool:
        return self.what == "value" and self.shape == ()

    @property
    def is_tile(self) -> bool:
        return self.what == "value" and bool(self.shape)

    def show(self) -> str:
        if self.what == "dtype":
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
