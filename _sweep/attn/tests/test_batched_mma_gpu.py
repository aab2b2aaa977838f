"""GPU: batched products (examples/bmm.tile and variants) against torch.bmm / torch.matmul.

Random bf16/f16 inputs, reference through torch in f32 on upcast inputs; relative Frobenius error <= 1e-2
for 2-byte outputs (one rounding of an f32 accumulation), 1e-4 for f32 outputs. M, N, K are not multiples of
the tiles, batch counts 1 to 17; outputs are NaN-poisoned before the launch, so unwritten elements fail. On
sm_90a the `where` kernels run TMA + wgmma with 3-D/4-D tensor maps; the kernels without `where` (and
K or N not multiples of 8) run the cp.async + mma.sync ring.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tilex

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
BMM = ROOT / "examples" / "bmm.tile"
HEADS = ROOT / "examples" / "head_scores.tile"
PERSISTENT = ROOT / "examples" / "bmm_persistent.tile"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_batched_mma import KERNELS, SEL  # noqa: E402  (the CPU tests' kernels)


def _torch():
    return pytest.importorskip("torch")


def _rel(out, ref) -> float:
    torch = _torch()
    out, ref = out.float(), ref.float()
    assert torch.isfinite(out).all(), "output has NaN/inf: some element was not written"
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def _rand(*shape, seed=0, dtype=None):
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(dtype or torch.bfloat16)


def _nan(*shape, dtype):
    torch = _torch()
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


SHAPES = [(1, 1, 8, 8), (3, 70, 136, 200), (8, 129, 264, 520), (17, 37, 72, 64), (2, 300, 1000, 136), (5, 256, 256, 1024)]
NO_WHERE = BMM.read_text().replace("    where K % 8 == 0, N % 8 == 0\n", "", 1)


@pytest.mark.parametrize("bc,m,n,k", SHAPES)
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("defines", [{}, dict(BM=64, BN=128, STAGES=3), dict(BM=128, BN=256, BK=64, STAGES=3)])
def test_bmm_vs_torch(bc, m, n, k, dtype, defines):
    torch = _torch()
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    src = BMM.read_text().replace("bf16", dtype)
    a, b = _rand(bc, m, k, seed=m + k, dtype=tdt), _rand(bc, k, n, seed=n + 1, dtype=tdt)
    c = _nan(bc, m, n, dtype=tdt)
    tilex.compile(src, **defines).bmm(a, b, c)
    assert _rel(c, torch.bmm(a.float(), b.float())) <= 1e-2


@pytest.mark.parametrize("bc,m,n,k", SHAPES)
@pytest.mark.parametrize("defines", [{}, dict(PROGRAMS=3), dict(BM=64, BN=128, STAGES=3, PROGRAMS=5)])
def test_bmm_persistent_vs_torch(bc, m, n, k, defines):
    """Blocks walking many tiles of several batches (the ring position and mbarrier phases carry across tiles
    and batches)."""
    torch = _torch()
    a, b = _rand(bc, m, k, seed=m + 2), _rand(bc, k, n, seed=n + 3)
    c = _nan(bc, m, n, dtype=torch.bfloat16)
    tilex.compile(str(PERSISTENT), **defines).bmm_persistent(a, b, c)
    assert _rel(c, torch.bmm(a.float(), b.float())) <= 1e-2


@pytest.mark.parametrize("bc,m,n,k", [(3, 70, 45, 70), (1, 1, 8, 33), (4, 130, 200, 200), (2, 64, 128, 1)])
def test_bmm_mma_ring_any_sizes(bc, m, n, k):
    """Without `where` (K, N need not be multiples of 8): the cp.async + mma.sync ring, unaligned rows."""
    torch = _torch()
    a, b = _rand(bc, m, k, seed=3), _rand(bc, k, n, seed=4)
    c = _nan(bc, m, n, dtype=torch.bfloat16)
    tilex.compile(NO_WHERE).bmm(a, b, c)
    assert _rel(c, torch.bmm(a.float(), b.float())) <= 1e-2


@pytest.mark.parametrize("z,h,m,s,d", [(2, 3, 33, 150, 72), (1, 8, 128, 256, 128), (3, 2, 200, 77, 64)])
def test_head_scores_vs_torch(z, h, m, s, d):
    torch = _torch()
    q, k = _rand(z, h, m, d, seed=5), _rand(z, h, s, d, seed=6)
    out = _nan(z, h, m, s, dtype=torch.float32)
    tilex.compile(str(HEADS)).head_scores(q, k, out, 0.125)
    assert _rel(out, q.float() @ k.float().transpose(-1, -2) * 0.125) <= 1e-4


@pytest.mark.parametrize("name", ["bmm_kn", "bmm_nk", "shared_w", "next_batch", "experts"])
@pytest.mark.parametrize("bc,m,n,k", [(3, 70, 136, 200), (1, 129, 64, 64)])
def test_variants_vs_torch(name, bc, m, n, k):
    torch = _torch()
    a = _rand(bc, m, k, seed=7)
    c = _nan(bc, m, n, dtype=torch.float32)
    mod = tilex.compile(KERNELS)
    if name == "bmm_kn":
        b = _rand(bc, k, n, seed=8)
        mod.bmm_kn(a, b, c)
        ref = torch.bmm(a.float(), b.float())
    elif name == "bmm_nk":
        w = _rand(bc, n, k, seed=9)
        mod.bmm_nk(a, w, c)
        ref = torch.bmm(a.float(), w.float().transpose(1, 2))
    elif name == "shared_w":
        w = _rand(n, k, seed=10)
        mod.shared_w(a, w, c)
        ref = a.float() @ w.float().T
    elif name == "experts":  # batch indices loaded from a tensor; -1 and 4 are outside it (zeros)
        a, b = _rand(4, m, k, seed=12), _rand(4, k, n, seed=13)
        c = _nan(len(SEL), m, n, dtype=torch.float32)
        mod.experts(a, b, torch.tensor(SEL, device="cuda", dtype=torch.int32), c)
        prod = torch.bmm(a.float(), b.float())
        ref = torch.stack([prod[e] if 0 <= e < 4 else torch.zeros(m, n, device="cuda") for e in SEL])
        assert float(c[1].abs().max()) == 0.0 and float(c[3].abs().max()) == 0.0
    else:  # a[z + 1]: the last batch reads a batch index past the tensor, i.e. zeros
        b = _rand(bc, k, n, seed=11)
        mod.next_batch(a, b, c)
        ref = torch.cat([torch.bmm(a.float()[1:], b.float()[:-1]), torch.zeros(1, m, n, device="cuda")])
        assert float(c[-1].abs().max()) == 0.0
    assert _rel(c, ref) <= 1e-4


def test_bmm_matches_the_interpreter():
    """The GPU and the interpreter agree (same rounding of the f32 accumulator to bf16, up to summation order)."""
    torch = _torch()
    import numpy as np

    a, b = _rand(3, 70, 200, seed=12), _rand(3, 200, 136, seed=13)
    c = _nan(3, 70, 136, dtype=torch.bfloat16)
    mod = tilex.compile(str(BMM))
    mod.bmm(a, b, c)
    from tilex.types import DType, numpy_dtype

    bf = numpy_dtype(DType.BF16)
    ha = a.cpu().view(torch.int16).numpy().view(bf)
    hb = b.cpu().view(torch.int16).numpy().view(bf)
    hc = np.full((3, 70, 136), np.nan, bf)
    mod.interp("bmm", a=ha, b=hb, c=hc)
    gpu = c.float().cpu().numpy().astype(np.float64)
    ref = hc.astype(np.float64)
    assert np.abs(gpu - ref).max() <= 1e-2 * np.abs(ref).max()


@pytest.mark.parametrize("name", ["next_batch", "experts"])
def test_out_of_range_batch_on_the_mma_ring(name):
    """The same out-of-range batch indices without `where` (sm_90a falls back to the cp.async + mma.sync ring):
    the batch's matrix is empty, its tiles read zeros."""
    torch = _torch()
    head, rest = KERNELS.split(f"kernel {name}<", 1)
    sig, body = rest.split("    where K % 8 == 0, N % 8 == 0\n", 1)
    mod = tilex.compile(head + f"kernel {name}<" + sig + body)
    m, n, k = 70, 136, 200
    c = _nan(len(SEL) if name == "experts" else 3, m, n, dtype=torch.float32)
    if name == "next_batch":
        a, b = _rand(3, m, k, seed=14), _rand(3, k, n, seed=15)
        mod.next_batch(a, b, c)
        ref = torch.cat([torch.bmm(a.float()[1:], b.float()[:-1]), torch.zeros(1, m, n, device="cuda")])
    else:
        a, b = _rand(4, m, k, seed=16), _rand(4, k, n, seed=17)
        mod.experts(a, b, torch.tensor(SEL, device="cuda", dtype=torch.int32), c)
        prod = torch.bmm(a.float(), b.float())
        ref = torch.stack([prod[e] if 0 <= e < 4 else torch.zeros(m, n, device="cuda") for e in SEL])
    assert _rel(c, ref) <= 1e-4
