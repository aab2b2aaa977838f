"""GPU: the GEMM paths of this branch against torch at odd sizes.

- examples/matmul.tile as shipped with odd row pitches and unaligned views (the guarded variant: a shifted
  cp.async ring re-aligned per trip, mma.sync), every tile configuration the space allows that builds, and the
  configuration tilex picks;
- `linear_any` (any K: shifted rings for x and w) and `linear_splitk_tiles` + `splitk_sum` (split-K at any M);
- `tilex.stdlib.linear` at the shapes whose path the configuration model chooses.
Random bf16 inputs, f32 reference through torch on upcast inputs, relative Frobenius error <= 1e-2; outputs are
NaN-poisoned first, so unwritten elements fail.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import tilex

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
MATMUL = str(ROOT / "examples" / "matmul.tile")
LINEAR = str(ROOT / "stdlib_kernels" / "linear.tile")


def _rel(y, ref) -> float:
    return float((y.float() - ref).norm() / ref.norm().clamp_min(1e-30))


@pytest.fixture(scope="module")
def torch():
    import torch

    return torch


@pytest.mark.parametrize("mnk", [(1000, 999, 1001), (37, 45, 33), (1, 70, 7), (130, 257, 129), (300, 301, 4001)])
def test_matmul_tile_odd_pitches_as_shipped(torch, mnk):
    m, n, k = mnk
    torch.manual_seed(1)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    mod = tilex.compile(MATMUL)
    mod.matmul(a, b, c)
    torch.cuda.synchronize()
    assert _rel(c, a.float() @ b.float()) < 1e-2


@pytest.mark.parametrize("cfg", [dict(BM=64, BN=128, BK=32, STAGES=3), dict(BM=128, BN=128, BK=64, STAGES=3),
                                 dict(BM=64, BN=64, BK=128, STAGES=4), dict(BM=16, BN=64, BK=64, STAGES=2),
                                 dict(BM=128, BN=256, BK=32, STAGES=2)])
@pytest.mark.parametrize("offsets", [(0, 0), (1, 3), (5, 0)])
def test_matmul_guarded_configs_and_unaligned_views(torch, cfg, offsets):
    """Each configuration with pitches 1001 / 999 and views starting 2..10 bytes off a 16-byte boundary."""
    m, n, k = 203, 999, 1001
    torch.manual_seed(2)
    oa, ob = offsets
    a = torch.randn(m * k + oa, device="cuda", dtype=torch.bfloat16)[oa:].view(m, k)
    b = torch.randn(k * n + ob, device="cuda", dtype=torch.bfloat16)[ob:].view(k, n)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    mod = tilex.compile(MATMUL)
    kern = mod.variant("matmul", cfg, ())
    kern(a, b, c)
    torch.cuda.synchronize()
    assert _rel(c, a.float() @ b.float()) < 1e-2


def test_matmul_aligned_data_through_the_guarded_variant(torch):
    """The guarded variant given aligned rows takes its direct ring (the shifted flag is false) and agrees."""
    m, n, k = 256, 512, 1024
    torch.manual_seed(3)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    tilex.compile(MATMUL).variant("matmul", dict(BM=64, BN=128, BK=64, STAGES=3), ())(a, b, c)
    torch.cuda.synchronize()
    assert _rel(c, a.float() @ b.float()) < 1e-2


@pytest.mark.parametrize("mnk", [(37, 45, 33), (129, 300, 1001), (1, 64, 7), (64, 130, 2999)])
def test_linear_any_odd_k(torch, mnk):
    m, n, k = mnk
    torch.manual_seed(4)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    tilex.compile(LINEAR).linear_any(x, w, y)
    torch.cuda.synchronize()
    assert _rel(y, x.float() @ w.float().T) < 1e-2


@pytest.mark.parametrize("mnks", [(100, 3584, 14336, 4), (511, 5120, 1024, 3), (37, 300, 72, 5), (1, 64, 256, 2)])
@pytest.mark.parametrize("cfg", [dict(BM=128, BN=128, BK=64, STAGES=4), dict(BM=64, BN=256, BK=64, STAGES=4)])
def test_linear_splitk_tiles(torch, mnks, cfg):
    m, n, k, s = mnks
    torch.manual_seed(5)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    part = torch.full((s, m, n), float("nan"), device="cuda", dtype=torch.float32)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    mod = tilex.compile(LINEAR, **cfg)
    mod.linear_splitk_tiles(x, w, part)
    mod.splitk_sum(part, y)
    torch.cuda.synchronize()
    assert _rel(y, x.float() @ w.float().T) < 1e-2


@pytest.mark.parametrize("mkn", [(100, 896, 9728), (100, 14336, 3584), (511, 13824, 5120), (4096, 2048, 2304),
                                 (256, 5120, 5120), (3, 4096, 1000), (64, 5120, 5120), (777, 1536, 999),
                                 # the defaults of session 19 at odd sizes: 128x192 tiles (persistent3), 128x160
                                 # (persistent5), TMA-stored 128x128 (persistent, N % 8 == 0)
                                 (4001, 1032, 4600), (509, 4104, 5128), (3001, 1032, 2296), (333, 2056, 4808)])
def test_stdlib_linear_model_paths(torch, mkn):
    import tilex.stdlib as S

    m, k, n = mkn
    torch.manual_seed(6)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    ref = x.float() @ w.float().T
    assert _rel(S.linear(x, w), ref) < 1e-2
    assert _rel(S.linear(x, w, b), ref + b.float()) < 1e-2
