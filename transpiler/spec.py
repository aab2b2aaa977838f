"""KernelSpec: everything the host side needs to launch one generated kernel.

Codegen produces a KernelSpec next to the CUDA source; the CuPy runtime, the C++ host
launcher and the interpreter's argument binding all read it. It is plain data (no AST),
so it can be cached and printed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .types import DType, StrEnum


class ParamKind(StrEnum):
    TENSOR = "tensor"
    SCALAR = "scalar"


@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter as the caller sees it."""

    name: str
    kind: ParamKind
    dtype: DType  # one of types.PARAM_DTYPES (a str enum: compares equal to its name, "bf16")
    dims: tuple = ()  # tensor dims: symbol names (str) or fixed sizes (int); () for scalars
    is_out: bool = False
    default: float | int | bool | None = None  # scalar default value, if the source gives one


@dataclass(frozen=True)
class ConstraintSpec:
    """A `where` constraint, checked at launch."""

    py: str  # Python expression over symbol names (and `cdiv`), e.g. "N % 8 == 0"
    text: str  # the constraint as written in the source
    line: int  # source line, for messages


@dataclass(frozen=True)
class TmaMap:
    """A TMA descriptor the host encodes at launch, 128-byte swizzled, zero fill outside the tensor; passed by
    value after the symbols. Without `box`: a 2-D map of a row-major 2-D tensor with [box_rows, box_cols] boxes
    (a wgmma main loop). With `box`: an N-D map mirroring the tensor's dims (innermost first, the byte
    strides of a row-major tensor) with that box, innermost first (a streamed loop's ring,
    runtime/tma.py `geometry`)."""

    param: str  # kernel parameter name
    tensor: str  # the tensor parameter it describes
    box_rows: int
    box_cols: int = 64
    box: tuple = ()


# the element types a TMA map may have: CUtensorMapDataType's enumerator in cuda.h and its value (the C++ host
# launcher spells the name, the runtime passes the value to cuTensorMapEncodeTiled)
TMA_DATA_TYPE: dict[DType, tuple[str, int]] = {
    DType.F16: ("CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 6),
    DType.F32: ("CU_TENSOR_MAP_DATA_TYPE_FLOAT32", 7),
    DType.BF16: ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 9),
    DType.F8E4M3: ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 0),  # fp8: TMA moves bytes
    DType.F8E5M2: ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 0),
}


@dataclass(frozen=True)
class KernelSpec:
    """How to launch one kernel of a translated .tile file.

    The CUDA entry point `name` takes, in this order: one device pointer per tensor
    parameter, one value per scalar parameter (C type from `dtype`), then one `int` per
    symbol in `symbols`, then one 128-byte TMA descriptor per entry of `tma`. Tensors are dense
    and row-major (C-contiguous).
    """

    name: str
    params: tuple[ParamSpec, ...]
    symbols: tuple[str, ...]
    constraints: tuple[ConstraintSpec, ...]
    grid: tuple[str, ...]  # Python expressions over symbols and `cdiv`, 1 to 3 entries
    threads: int  # threads per block
    smem_bytes: int  # dynamic shared memory per block
    defines: tuple[tuple[str, int | float | bool], ...] = ()  # compile-time params used
    source_file: str = "<string>"
    line: int = 0
    tma: tuple[TmaMap, ...] = ()
    extra: dict = field(default_factory=dict, compare=False)
