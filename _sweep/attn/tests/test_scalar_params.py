"""bf16 / f16 scalar parameters hold their dtype's value on every path.

The host passes a narrow-float scalar as a float; the kernel rounds it once on entry (the
interpreter rounds it when the launch binds it). `fill = 0.1` is not a bf16 value and
`scale = 1.3` not an f16 one, so a kernel that used them unrounded would differ from the
reference, which rounds them with ml_dtypes. `other = fill` reaches the sum through the
edge chunk of the last program (N = 1000 is not a multiple of BLOCK = 64).
"""
from __future__ import annotations

import numpy as np
import pytest

import tilex
from tilex.translate import Options, translate
from tilex.types import DType, numpy_dtype

BF16, F16 = numpy_dtype(DType.BF16), numpy_dtype(DType.F16)
SRC = """
kernel edge_sum<BLOCK: int = 64>(x: bf16[N], y: out f32[G], fill: bf16, scale: f16)
    grid (cdiv(N, BLOCK),)
{
    i = program_id(0) * BLOCK
    t = x[i : i + BLOCK, other = fill].to(f32)
    y[program_id(0)] = sum(t) * scale.to(f32)
}
"""
N, BLOCK, FILL, SCALE = 1000, 64, 0.1, 1.3


def _inputs():
    x = np.random.default_rng(7).standard_normal(N, dtype=np.float32).astype(BF16)
    g = -(-N // BLOCK)
    return x, np.full(g, np.nan, np.float32)


def _as(v, dt) -> float:
    return float(np.array(v, dtype=dt).astype(np.float64))


def _reference(x, fill=_as(FILL, BF16), scale=_as(SCALE, F16)):
    """float64 sums of each BLOCK with the edge filled by `fill`, times `scale`."""
    g = -(-N // BLOCK)
    padded = np.full(g * BLOCK, fill)
    padded[:N] = x.astype(np.float64)
    return padded.reshape(g, BLOCK).sum(axis=1) * scale


def test_kernel_rounds_narrow_scalars_on_entry():
    cuda = translate(SRC, "s.tile", Options(arch="sm_90a")).cuda
    assert "const float tx_arg_fill," in cuda and "const float tx_arg_scale," in cuda
    assert "const float fill = tilex_round_bf16(tx_arg_fill);" in cuda
    assert "const float scale = tilex_round_f16(tx_arg_scale);" in cuda


def test_interpreter_uses_the_rounded_values():
    x, y = _inputs()
    tilex.compile(SRC, arch="sm_90a").interp("edge_sum", x=x, y=y, fill=FILL, scale=SCALE)
    ref = _reference(x)
    assert np.max(np.abs(y - ref)) <= 1e-5 * np.max(np.abs(ref))
    # the unrounded values give another answer, beyond that tolerance: the check can fail
    unrounded = _reference(x, FILL, SCALE)
    assert np.max(np.abs(unrounded - ref)) > 1e-4 * np.max(np.abs(ref))


@pytest.mark.gpu
def test_gpu_uses_the_rounded_values():
    import cupy as cp

    x, y = _inputs()
    d_y = cp.asarray(y)
    tilex.compile(SRC).edge_sum(x=cp.asarray(x), y=d_y, fill=FILL, scale=SCALE)
    got, ref = cp.asnumpy(d_y), _reference(x)
    assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))
