"""GPU: builtin math agrees with the NumPy interpreter where the two define the same numerics
(exp2 flushes subnormal results to 0 on both). Run: pytest -m gpu tests/test_math_gpu.py"""
from __future__ import annotations

import numpy as np
import pytest

import tilex

pytestmark = pytest.mark.gpu

SRC = """
kernel k(x: f32[N], y: out f32[N])
    grid (cdiv(N, 256),)
{
    i = program_id(0) * 256
    y[i : i + 256] = exp2(x[i : i + 256])
}
"""


def test_exp2_gpu_matches_interpreter(tmp_path):
    cp = pytest.importorskip("cupy")
    f = tmp_path / "exp2.tile"
    f.write_text(SRC)
    mod = tilex.compile(str(f))
    rng = np.random.default_rng()
    x = np.concatenate([np.array([-130.0, -126.5, -126.0, -149.0, 127.0, 0.0], np.float32),
                        rng.uniform(-140, 120, 1000).astype(np.float32)])
    gpu = cp.full(x.shape, np.nan, np.float32)
    mod.k(x=cp.asarray(x), y=gpu)
    host = np.full(x.shape, np.nan, np.float32)
    mod.interp("k", x=x, y=host)
    gpu = cp.asnumpy(gpu)
    assert np.array_equal(gpu == 0, host == 0)  # the same results flushed to 0
    assert gpu[0] == 0 and gpu[2] == np.float32(2.0**-126)
    np.testing.assert_allclose(gpu, host, rtol=1e-6, atol=0)  # ex2.approx: within 2 ulp
