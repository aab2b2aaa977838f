"""What each GPU target offers the compiler (`Target`: shared memory, SMs, tensor-core and copy paths), one table."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .types import DType

DEFAULT_ARCH = "sm_90a"  # the target when none is given and no GPU names one (an H100/H200)
DEFAULT_SMEM_LIMIT = 49152  # shared memory per block of a target not in the table (no opt-in assumed)


@dataclass(frozen=True)
class Target:
    """One compilation target: the `-arch` name and what the passes may use on it."""

    arch: str  # the -arch value, e.g. "sm_90a"
    smem_per_block: int = DEFAULT_SMEM_LIMIT  # bytes of shared memory a block may use (with the opt-in attribute)
    smem_per_sm: int = DEFAULT_SMEM_LIMIT  # bytes of shared memory per SM
    sm_count: int = 0  # SMs of the usual part (the device's own count wins at launch); 0: unknown
    mma: bool = False  # mma.sync tensor cores (and ldmatrix)
    cp_async: bool = False  # cp.async copies (streamed rings)
    wgmma: bool = False  # warpgroup MMA
    tma: bool = False  # the tensor memory accelerator (cp.async.bulk.tensor, mbarriers)
    fp8: bool = True  # f8e4m3 storage and conversions

    @property
    def cc(self) -> int | None:
        """The compute capability of `sm_90a`-style names as 90; None for names it cannot read."""
        m = re.fullmatch(r"sm_(\d+)[a-z]?", self.arch)
        return int(m.group(1)) if m else None

    def __str__(self) -> str:
        return self.arch


def _t(arch, smem_block, smem_sm, sms, *, wgmma=False, fp8=True):
    # every target in the table has mma.sync and cp.async; wgmma and TMA only the `a` variant of sm_90
    return arch, Target(arch, smem_block, smem_sm, sms, True, True, wgmma, wgmma, fp8)


# the targets tilex knows; any other `sm_XY` compiles with DEFAULT_SMEM_LIMIT and without tensor cores
TARGETS: dict[str, Target] = dict([
    _t("sm_80", 166912, 167936, 108, fp8=False),  # A100
    _t("sm_86", 101376, 102400, 84, fp8=False),
    _t("sm_87", 166912, 167936, 16, fp8=False),
    _t("sm_89", 101376, 102400, 128),
    _t("sm_90", 232448, 233472, 132),
    _t(DEFAULT_ARCH, 232448, 233472, 132, wgmma=True),  # H100 / H200
    _t("sm_100", 232448, 233472, 148),
    _t("sm_100a", 232448, 233472, 148),
    _t("sm_120", 101376, 102400, 170),
])

# the archs f8e4m3 first appears on (infer_dtypes' message names it)
FP8_MIN_CC = 89


@functools.lru_cache(maxsize=None)
def target(arch: str) -> Target:
    """The Target of an -arch name: the table's row, else one with the defaults (f8e4m3 unless the name reads as
    older than sm_89)."""
    known = TARGETS.get(arch)
    if known is not None:
        return known
    t = Target(arch)
    return Target(arch, fp8=t.cc is None or t.cc >= FP8_MIN_CC)


def resolve_arch(arch: str | None = None) -> str:
    """The arch to compile for: `arch` if given, else the current GPU's (`runtime.nvrtc.default_arch`), else
    DEFAULT_ARCH where there is no GPU (the target then only matters when launching)."""
    if arch is not None:
        return arch
    try:
        from .runtime.nvrtc import default_arch

        return default_arch()
    except Exception:  # no CuPy or no GPU
        return DEFAULT_ARCH


# Views of the table kept for the modules that still take an arch name (passes/plan_matmul.py)
SMEM_LIMIT = {a: t.smem_per_block for a, t in TARGETS.items()}
MMA_ARCHS = tuple(a for a, t in TARGETS.items() if t.mma)
WGMMA_ARCHS = tuple(a for a, t in TARGETS.items() if t.wgmma)


def smem_limit(arch: str) -> int:
    return target(arch).smem_per_block


# elements of padding per staged shared-memory row of an '@' operand (16 bytes of bf16): ldmatrix and column
# reads of consecutive rows then fall in different banks
MATMUL_PAD = 8

# tensor cores: mma.sync (sm_80 on), wgmma + TMA (sm_90a only), on 2-byte floats with f32 accumulators
TENSOR_CORE_DTYPES = (DType.BF16, DType.F16)
# fp8 operands of a main loop: wgmma only (m64nNk32.f32.e4m3.e4m3, both operands K-major), no mma.sync path
WGMMA_ONLY_DTYPES = (DType.F8E4M3, DType.F8E5M2)
