"""GPU: examples/matmul.tile as shipped (tiles left to tilex, no `where`) against torch at odd and large sizes,
with and without the launch facts (a misaligned operand takes the guarded variant), NaN-poisoned outputs.
Relative Frobenius error <= 1e-2 against an f32 torch product of the same bf16 inputs."""
from __future__ import annotations

from pathlib import Path

import pytest

import tilex

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
MATMUL = str(ROOT / "examples" / "matmul.tile")


@pytest.fixture(scope="module")
def torch():
    t = pytest.importorskip("torch")
    if not t.cuda.is_available():
        pytest.skip("no CUDA device")
    return t


@pytest.fixture(scope="module")
def mod():
    return tilex.compile(MATMUL)


def _check(torch, mod, a, b, want_tma=None):
    c = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=torch.bfloat16)
    v = mod.matmul.variant_for(a, b, c)
    if want_tma is not None:
        assert bool(v.spec.tma) == want_tma, dict(v.spec.defines)
    mod.matmul(a, b, c)
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    err = float((c.float() - ref).norm() / ref.norm().clamp_min(1e-6))
    assert err <= 1e-2, (tuple(a.shape), tuple(b.shape), dict(v.spec.defines), err)
    return v


@pytest.mark.parametrize("M, N, K", [(1, 4096, 4096), (7, 999, 1001), (16, 5120, 5120), (64, 4096, 4096),
                                     (333, 257, 129), (1000, 999, 1001), (256, 5120, 5120), (2048, 2048, 2048)])
def test_matmul_as_shipped(torch, mod, M, N, K):
    g = torch.Generator(device="cuda").manual_seed(M * 7919 + N * 31 + K)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16, generator=g)
    # with the facts and enough rows the model picks a wgmma tile; skinny products may take mma.sync tiles
    _check(torch, mod, a, b, want_tma=(K % 8 == 0 and N % 8 == 0 and M >= 256) or None)


@pytest.mark.parametrize("M, N, K", [(8192, 8192, 8192), (4096, 13824, 5120)])
def test_matmul_as_shipped_takes_the_fast_path(torch, mod, M, N, K):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    v = _check(torch, mod, a, b, want_tma=True)
    assert dict(v.spec.defines) == {"BM": 128, "BN": 256, "BK": 64, "STAGES": 4}


def test_misaligned_operand_takes_the_guarded_variant(torch, mod):
    M, N, K = 512, 512, 512
    base = torch.randn(M * K + 1, device="cuda", dtype=torch.bfloat16)
    a = base[1:].view(M, K)  # 2 bytes off a 16-byte boundary: contiguous, but TMA cannot read it
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    v = _check(torch, mod, a, b)
    assert all("K" not in c.text for c in v.spec.constraints)
    aligned = _check(torch, mod, a.clone(), b)
    assert aligned is not v
