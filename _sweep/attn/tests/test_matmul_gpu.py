"""GPU: the tensor-core main loops (wgmma/TMA on sm_90a, mma.sync/cp.async elsewhere) against torch.

Random bf16 inputs, f32 reference through torch on upcast inputs; relative Frobenius error
<= 1e-2. M, N, K include sizes that are not multiples of the tile (and M = 1); outputs are
NaN-poisoned before the launch, so unwritten elements fail.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tilex

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
LINEAR = str(ROOT / "stdlib_kernels" / "linear.tile")

# a @ b with b stored [K, N] (N contiguous): wgmma reads b transposed from shared memory
MATMUL_KN = """
kernel mm<BM: int = 128, BN: int = 128, BK: int = 64, STAGES: int = 3>(a: bf16[M, K], b: bf16[K, N], c: out bf16[M, N])
    where K % 8 == 0 and N % 8 == 0
    grid (cdiv(M, BM), cdiv(N, BN))
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    acc = zeros(f32[BM, BN])
    for k in pipeline(0, K, BK, stages = STAGES) {
        acc += a[m : m + BM, k : k + BK] @ b[k : k + BK, n : n + BN]
    }
    c[m : m + BM, n : n + BN] = (acc * 0.5).to(bf16)
}
"""


# an epilogue of ordinary tile code on the accumulator: scale, bias, gelu, residual add, cast
EPILOGUE = """
kernel mlp_out<BM: int = 128, BN: int = 128, BK: int = 64, STAGES: int = 4>(
    x: bf16[M, K], w: bf16[N, K], b: bf16[N], r: bf16[M, N], y: out bf16[M, N], alpha: f32)
    where K % 8 == 0
    grid (cdiv(M, BM), cdiv(N, BN))
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    acc = zeros(f32[BM, BN])
    for k in pipeline(0, K, BK, stages = STAGES) {
        acc += x[m : m + BM, k : k + BK] @ w[n : n + BN, k : k + BK].T
    }
    h = gelu(acc * alpha + b[n : n + BN][None, :].to(f32))
    y[m : m + BM, n : n + BN] = (h + r[m : m + BM, n : n + BN].to(f32)).to(bf16)
}
"""


def _torch():
    return pytest.importorskip("torch")


def _rel(out, ref) -> float:
    torch = _torch()
    out, ref = out.float(), ref.float()
    assert torch.isfinite(out).all(), "output has NaN/inf: some element was not written"
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def _rand(*shape, seed=0):
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16)


SHAPES = [(1, 256, 64), (1, 136, 200), (16, 520, 1024), (130, 264, 200), (257, 300, 136), (512, 512, 4096), (77, 1000, 520)]


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("kernel,defines", [("linear", {}), ("linear", dict(BM=64, BN=128, BK=128, STAGES=3)),
                                            ("linear", dict(BM=16, BN=64, BK=64, STAGES=6)), ("linear_any", {}),
                                            # persistent: one block per SM, and 3 blocks walking many tiles each
                                            # (the ring position and mbarrier phases carry across tiles)
                                            ("linear_persistent", {}), ("linear_persistent", dict(PROGRAMS=3)),
                                            ("linear_persistent", dict(BM=64, BN=128, STAGES=3, PROGRAMS=5))])
def test_linear(m, n, k, kernel, defines):
    torch = _torch()
    x, w = _rand(m, k, seed=m), _rand(n, k, seed=n + 1)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    getattr(tilex.compile(LINEAR, **defines), kernel)(x, w, y)
    assert _rel(y, x.float() @ w.float().T) <= 1e-2


@pytest.mark.parametrize("m,n,k", [(1, 256, 64), (1, 136, 200), (5, 1000, 520), (16, 520, 1024), (16, 70, 8)])
@pytest.mark.parametrize("defines", [{}, dict(BN=128, BK=64, STAGES=6), dict(BN=64, BK=128, STAGES=6)])
def test_linear_swap(m, n, k, defines):
    """The decode kernels with swapped operands: one pass, with a bias, and three K shares + splitk_sum."""
    torch = _torch()
    x, w, b = _rand(m, k, seed=m + 40), _rand(n, k, seed=n + 41), _rand(n, seed=42)
    mod = tilex.compile(LINEAR, **defines)
    ref = x.float() @ w.float().T
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    mod.linear_swap(x, w, y)
    assert _rel(y, ref) <= 1e-2
    mod.linear_swap_bias(x, w, b, y)
    assert _rel(y, ref + b.float()) <= 1e-2
    part = torch.full((3, m, n), float("nan"), device="cuda", dtype=torch.float32)
    mod.linear_swap_splitk(x, w, part)
    mod.splitk_sum(part, y)
    assert _rel(y, ref) <= 1e-2


@pytest.mark.parametrize("m,n,k", [(1, 8, 70), (37, 45, 70), (130, 200, 33), (64, 128, 1)])
def test_linear_any_unaligned_k(m, n, k):
    torch = _torch()
    x, w = _rand(m, k, seed=3), _rand(n, k, seed=4)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    tilex.compile(LINEAR).linear_any(x, w, y)
    assert _rel(y, x.float() @ w.float().T) <= 1e-2


@pytest.mark.parametrize("m,n,k", [(1, 256, 64), (200, 300, 520)])
def test_linear_bias(m, n, k):
    torch = _torch()
    x, w, b = _rand(m, k, seed=5), _rand(n, k, seed=6), _rand(n, seed=7)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    tilex.compile(LINEAR).linear_bias(x, w, b, y)
    assert _rel(y, x.float() @ w.float().T + b.float()) <= 1e-2


@pytest.mark.parametrize("m,n,k", [(1, 128, 64), (130, 200, 136), (256, 384, 512), (1000, 1200, 200)])
@pytest.mark.parametrize("kernel,defines", [("gated_mlp", {}), ("gated_mlp_persistent", {}),
                                            ("gated_mlp_persistent", dict(PROGRAMS=3))])
def test_gated_mlp(m, n, k, kernel, defines):
    torch = _torch()
    x, wg, wu = _rand(m, k, seed=8), _rand(n, k, seed=9), _rand(n, k, seed=10)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    getattr(tilex.compile(LINEAR, **defines), kernel)(x, wg, wu, y)
    g, u = x.float() @ wg.float().T, x.float() @ wu.float().T
    assert _rel(y, torch.nn.functional.silu(g) * u) <= 1e-2


@pytest.mark.parametrize("m,n,k", [(1, 64, 64), (130, 264, 200), (300, 136, 72)])
def test_matmul_b_k_by_n(m, n, k):
    torch = _torch()
    a, b = _rand(m, k, seed=11), _rand(k, n, seed=12)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    tilex.compile(MATMUL_KN).mm(a, b, c)
    assert _rel(c, (a.float() @ b.float()) * 0.5) <= 1e-2


@pytest.mark.parametrize("m,n,k", [(1, 1000, 70), (37, 45, 70), (129, 130, 64)])
def test_example_matmul(m, n, k):
    torch = _torch()
    a, b = _rand(m, k, seed=13), _rand(k, n, seed=14)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    tilex.compile(str(ROOT / "examples" / "matmul.tile")).matmul(a, b, c)
    assert _rel(c, a.float() @ b.float()) <= 1e-2


def test_tma_rejects_misaligned_base():
    torch = _torch()
    from tilex.diagnostics import LaunchError

    x = _rand(65 * 64 + 1, seed=15)[1:].view(65, 64)  # 2-byte offset: not 16-byte aligned
    w, y = _rand(64, 64, seed=16), torch.empty(65, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match="16-byte"):
        tilex.compile(LINEAR).linear(x, w, y)


@pytest.mark.parametrize("m,n,k", [(1, 520, 1024), (16, 1000, 4096), (64, 264, 2048), (3, 13824, 4096),
                                   (1, 1000, 256), (5, 27648, 512), (1, 70000, 136), (16, 33000, 264)])
def test_stdlib_linear_split_k(m, n, k):
    """The decode paths: the swapped-operand kernels (M <= 16: linear_swap, linear_swap_bias, both tile
    configurations), or the split-K kernels (S > 1) for 16 < M <= 64."""
    torch = _torch()
    from tilex.stdlib import linear
    from tilex.stdlib.linear import _use_split_kernels, _use_swap

    assert _use_split_kernels(m, n, k) or _use_swap(m, k, True)
    x, w, b = _rand(m, k, seed=17), _rand(n, k, seed=18), _rand(n, seed=19)
    assert _rel(linear(x, w), x.float() @ w.float().T) <= 1e-2
    assert _rel(linear(x, w, b), x.float() @ w.float().T + b.float()) <= 1e-2  # linear_swap_bias / splitk_sum_bias


@pytest.mark.parametrize("m,nq,nk,k", [(512, 5120, 1024, 5120), (300, 1024, 256, 1032), (17, 512, 128, 256),
                                       (100, 64, 32, 64)])
@pytest.mark.parametrize("bias", [False, True])
def test_stdlib_linear_qkv(m, nq, nk, k, bias):
    """One fused [q | k | v] GEMM storing three contiguous outputs (prefill's attention inputs)."""
    torch = _torch()
    from tilex.stdlib import linear_qkv

    x, w, b = _rand(m, k, seed=31), _rand(nq + 2 * nk, k, seed=32), _rand(nq + 2 * nk, seed=33)
    ref = x.float() @ w.float().T + (b.float() if bias else 0)
    outs = linear_qkv(x, w, nq, nk, b if bias else None)
    for got, (a, e) in zip(outs, ((0, nq), (nq, nq + nk), (nq + nk, nq + 2 * nk))):
        assert got.is_contiguous() and tuple(got.shape) == (m, e - a)
        assert _rel(got, ref[:, a:e]) <= 1e-2


@pytest.mark.parametrize("m,n,k", [(1, 96, 40), (300, 520, 1032), (5000, 136, 64)])
def test_stdlib_linear_and_gated(m, n, k):
    torch = _torch()
    from tilex.stdlib import gated_mlp, linear

    x, w, u, b = _rand(m, k, seed=19), _rand(n, k, seed=20), _rand(n, k, seed=21), _rand(n, seed=22)
    assert _rel(linear(x, w, b), x.float() @ w.float().T + b.float()) <= 1e-2
    g = x.float() @ w.float().T
    assert _rel(gated_mlp(x, w, u), torch.nn.functional.silu(g) * (x.float() @ u.float().T)) <= 1e-2


def test_linear_empty_k_gives_zeros():
    """K = 0 (empty operands): the wgmma loop makes no trips and the TMA maps are never encoded."""
    torch = _torch()
    from tilex.stdlib import linear

    x, w = torch.empty(4, 0, device="cuda", dtype=torch.bfloat16), torch.empty(64, 0, device="cuda", dtype=torch.bfloat16)
    y = linear(x, w)
    assert y.shape == (4, 64) and torch.equal(y.float(), torch.zeros(4, 64, device="cuda"))


@pytest.mark.parametrize("m,n,k", [(1, 128, 64), (130, 264, 200), (256, 384, 512)])
def test_fused_epilogue_scale_bias_gelu_residual(m, n, k):
    torch = _torch()
    x, w, b, r = _rand(m, k, seed=23), _rand(n, k, seed=24), _rand(n, seed=25), _rand(m, n, seed=26)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    tilex.compile(EPILOGUE).mlp_out(x, w, b, r, y, alpha=0.5)
    ref = torch.nn.functional.gelu((x.float() @ w.float().T) * 0.5 + b.float()) + r.float()
    assert _rel(y, ref) <= 1e-2
