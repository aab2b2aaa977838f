"""GPU: the library default at the flash tiling rules' boundaries (attention_plan.prefill_config, session 20) against
float64 torch: D = 128 at S 65, 100, 127, 128 (64 x 32 tiles) and 129 (128 x 64); D = 64 at S 65, 2047, 2048
(64 x 64) and 2049 (128 x 64); GQA, causal and not, bf16 (f16 at two), outputs poisoned with NaN.

Run: pytest -m gpu tests/test_attention_prefill_tilings_gpu.py
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import tilex.stdlib as S  # noqa: E402

TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}


@pytest.fixture(autouse=True)
def _gpu():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    yield
    torch.cuda.synchronize()


def f64_ref(q, k, v, causal):
    g = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.repeat_interleave(g, dim=1).double(), v.repeat_interleave(g, dim=1).double()
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


CASES = [(3, 8, 2, 65, 128), (2, 28, 4, 100, 128), (1, 8, 8, 127, 128), (4, 32, 8, 128, 128), (2, 8, 2, 129, 128),
         (2, 8, 4, 65, 64), (1, 14, 2, 2047, 64), (1, 4, 1, 2048, 64), (1, 4, 2, 2049, 64)]


def _ids(c):
    return "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_default_at_the_rules_vs_float64(case, causal):
    _check(case, causal, torch.bfloat16)


@pytest.mark.parametrize("case", [(2, 28, 4, 100, 128), (1, 14, 2, 2047, 64)], ids=_ids)
def test_default_at_the_rules_f16(case):
    _check(case, True, torch.float16)


def _check(case, causal, dt):
    b, hq, hkv, s, d = case
    gen = torch.Generator(device="cuda").manual_seed(s * 7 + d)
    q, k, v = (torch.randn(sh, generator=gen, device="cuda").to(dt) for sh in ((b, hq, s, d), (b, hkv, s, d), (b, hkv, s, d)))
    out = torch.full_like(q, float("nan"))
    o = S.attention_prefill(q, k, v, causal=causal, out=out)
    assert o is out and torch.isfinite(o).all()
    ref = f64_ref(q, k, v, causal)
    assert float((o.double() - ref).abs().max() / ref.abs().max()) <= TOL[dt]
