"""GPU: the whole-sequence prefill kernel (KERNEL="whole", S <= 128) against float64 torch, on fresh random data.

Odd sequence lengths (1, 33, 61, 77, 100, 128), GQA 1/4/7/8, D 64 and 128, bf16 and f16, causal and not, both
layouts, more tiles than programs (PROGRAMS=7: every program walks many tiles through the ring), and outputs
poisoned with NaN (`out=`) so an element the kernel does not write fails. Tolerance: max |out - ref| / max |ref|
<= 1e-2 (bf16), 2e-3 (f16); ref: float64 on the same rounded inputs.

Run: pytest -m gpu tests/test_attention_prefill_whole_gpu.py
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import tilex.stdlib as S  # noqa: E402

TD = {"f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"bf16": 1e-2, "f16": 2e-3}


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


def rel(out, ref):
    out, ref = out.double(), ref.double()
    assert torch.isfinite(out).all(), "output has NaN/inf: some element was not written"
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


SHAPES = [(3, 32, 8, 128, 128), (5, 28, 4, 100, 128), (2, 8, 8, 77, 64), (4, 16, 2, 1, 128), (2, 8, 4, 61, 64),
          (1, 7, 1, 128, 128), (6, 8, 2, 33, 128)]
CONFIGS = [None, dict(PROGRAMS=7)]


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "default" if c is None else ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("case", SHAPES, ids=lambda c: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c))
def test_whole_kernel_vs_float64(case, cfg, causal, layout):
    b, hq, hkv, s, d = case
    gen = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ())))
    q, k, v = (torch.randn(sh, generator=gen, device="cuda").to(torch.bfloat16)
               for sh in ((b, hq, s, d), (b, hkv, s, d), (b, hkv, s, d)))
    ref = f64_ref(q, k, v, causal)
    config = dict(cfg or {}, KERNEL="whole")
    if layout == "bshd":
        tq, tk, tv = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        out = torch.full_like(tq, float("nan"))
        o = S.attention_prefill(tq, tk, tv, causal=causal, out=out, config=config, layout="bshd")
        assert o is out
        o = o.transpose(1, 2)
    else:
        out = torch.full_like(q, float("nan"))
        o = S.attention_prefill(q, k, v, causal=causal, out=out, config=config)
        assert o is out
    assert rel(o, ref) <= TOL["bf16"]


def test_whole_kernel_f16_does_not_write_past_its_output():
    """f16, S = 77: the output is the front of a bigger buffer whose tail keeps its sentinel (rows past S are
    computed on TMA's zero fill and not stored), and the result matches float64."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    b, hq, hkv, s, d = 3, 8, 2, 77, 128
    q, k, v = (torch.randn(sh, generator=gen, device="cuda").half() for sh in ((b, hq, s, d), (b, hkv, s, d), (b, hkv, s, d)))
    n = b * hq * s * d
    buf = torch.full((n + 64 * d,), 7.0, device="cuda", dtype=torch.float16)
    out = buf[:n].view(b, hq, s, d)
    S.attention_prefill(q, k, v, causal=True, out=out, config=dict(KERNEL="whole", PROGRAMS=5))
    assert (buf[n:] == 7.0).all()
    assert rel(out, f64_ref(q, k, v, True)) <= TOL["f16"]
