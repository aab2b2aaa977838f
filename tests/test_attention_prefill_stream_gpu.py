"""GPU: the stream prefill kernel (KERNEL="stream") against float64 torch and SDPA, on fresh random data.

Odd sequence lengths (1, 77, 130, 1000, 4097), S a multiple of the block (128, 512), GQA 1/4/7, D 64/128/256,
bf16 and f16, causal and not, both layouts, its two tilings (BM 64 / 4 warps; BM 128 / 8 warps with PROGRAMS=5,
fewer programs than heads: every program walks several heads through the ring), and outputs poisoned with NaN
(`out=`) so an element the kernel does not write fails. Tolerance: max |out - ref| / max |ref| <= 1e-2 (bf16),
2e-3 (f16); ref: float64 on the same rounded inputs.

Run: pytest -m gpu tests/test_attention_prefill_stream_gpu.py
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import tilex.stdlib as S  # noqa: E402

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


SHAPES = [(3, 8, 2, 128, 128), (2, 28, 4, 77, 128), (2, 8, 8, 1, 64), (1, 7, 1, 130, 64), (1, 8, 2, 1000, 128),
          (2, 4, 2, 512, 256), (1, 4, 4, 193, 256)]
CONFIGS = [dict(), dict(BM=128, WARPS=8, PROGRAMS=5)]


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
@pytest.mark.parametrize("case", SHAPES, ids=lambda c: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c))
def test_stream_kernel_vs_float64(case, cfg, causal, layout):
    b, hq, hkv, s, d = case
    if d == 256 and cfg.get("BM") == 128:
        pytest.skip("BM=128 at D=256: 2 stages of 192 KB do not fit (the tiling is not offered there)")
    gen = torch.Generator(device="cuda").manual_seed(s * 131 + d + hq)
    q, k, v = (torch.randn(sh, generator=gen, device="cuda").to(torch.bfloat16)
               for sh in ((b, hq, s, d), (b, hkv, s, d), (b, hkv, s, d)))
    ref = f64_ref(q, k, v, causal)
    config = dict(cfg, KERNEL="stream")
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


def test_stream_kernel_f16_does_not_write_past_its_output():
    """f16, S = 77: the output is the front of a bigger buffer whose tail keeps its sentinel (rows past S are
    computed on TMA's zero fill and not stored), and the result matches float64."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    b, hq, hkv, s, d = 3, 8, 2, 77, 128
    q, k, v = (torch.randn(sh, generator=gen, device="cuda").half() for sh in ((b, hq, s, d), (b, hkv, s, d), (b, hkv, s, d)))
    n = b * hq * s * d
    buf = torch.full((n + 64 * d,), 7.0, device="cuda", dtype=torch.float16)
    out = buf[:n].view(b, hq, s, d)
    S.attention_prefill(q, k, v, causal=True, out=out, config=dict(KERNEL="stream", PROGRAMS=5))
    assert (buf[n:] == 7.0).all()
    assert rel(out, f64_ref(q, k, v, True)) <= TOL["f16"]


def test_stream_kernel_long_sequence_vs_sdpa():
    """S = 4097 (65 blocks of 64, the last one of one row), causal, against SDPA's flash backend (float64 is too
    big here): 33 units of 66 steps a head."""
    gen = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(1, 4, 4097, 128, generator=gen, device="cuda").to(torch.bfloat16)
    k, v = (torch.randn(1, 2, 4097, 128, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(2))
    out = torch.full_like(q, float("nan"))
    S.attention_prefill(q, k, v, causal=True, out=out, config=dict(KERNEL="stream"))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                           is_causal=True)
    assert rel(out, ref) <= 2e-2
