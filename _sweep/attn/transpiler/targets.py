"""What each GPU target offers the compiler: shared memory per block, and which tensor-core paths exist."""
from __future__ import annotations

from .types import DType

# shared memory a block may use, by target (bytes, with the opt-in attribute)
SMEM_LIMIT = {"sm_90": 232448, "sm_90a": 232448, "sm_80": 166912, "sm_86": 101376, "sm_87": 166912,
              "sm_89": 101376, "sm_100": 232448, "sm_100a": 232448, "sm_120": 101376}
DEFAULT_SMEM_LIMIT = 49152

# elements of padding per staged shared-memory row of an '@' operand (16 bytes of bf16): ldmatrix and column
# reads of consecutive rows then fall in different banks
MATMUL_PAD = 8

# tensor cores: mma.sync (sm_80 on), wgmma + TMA (sm_90a only), on 2-byte floats with f32 accumulators
TENSOR_CORE_DTYPES = (DType.BF16, DType.F16)
MMA_ARCHS = ("sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_120")
WGMMA_ARCHS = ("sm_90a",)


def smem_limit(arch: str) -> int:
    return SMEM_LIMIT.get(arch, DEFAULT_SMEM_LIMIT)
