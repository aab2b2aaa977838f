"""GPU: tilex.stdlib.topk on torch CUDA tensors against torch.topk (values, exactly) and a float64 stable
sort on the host (indices, exactly: ties to the lower index, NaN largest) at odd lengths up to 152064.
Outputs are poisoned first (_launch.POISON). Run: pytest -m gpu tests/test_stdlib_topk_gpu.py"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import tilex.stdlib as S  # noqa: E402
from tilex.stdlib import _launch as L  # noqa: E402

TD = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setattr(L, "POISON", True)
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    yield
    torch.cuda.synchronize()


def reference(x, k):
    x64 = x.double().cpu().numpy()
    nan = np.isnan(x64)
    pos = np.broadcast_to(np.arange(x64.shape[-1]), x64.shape)
    order = np.lexsort((pos, np.where(nan, 0, -x64), ~nan), axis=-1)[:, :k]
    return order


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("b,v,k", [(1, 1, 1), (3, 7, 5), (2, 100, 16), (5, 1000, 50), (1, 152064, 50),
                                   (7, 152064, 64), (2, 152064, 1), (2, 40000, 1000)])
def test_topk_vs_torch(dt, b, v, k):
    g = torch.Generator(device="cuda").manual_seed(v + k)
    x = torch.randn((b, v), generator=g, device="cuda").to(TD[dt])
    if b > 1:
        x[1] = torch.round(x[1] * 2)  # ties
    if b > 2:
        x[2, ::11] = float("nan")
        x[2, 1::13] = float("inf")
    val, idx = S.topk(x, k)
    assert val.dtype == x.dtype and idx.dtype == torch.int64 and val.shape == (b, k)
    np.testing.assert_array_equal(idx.cpu().numpy(), reference(x, k))
    tv, _ = torch.topk(x.float(), k, dim=-1)
    np.testing.assert_array_equal(val.float().cpu().numpy(), tv.cpu().numpy())
