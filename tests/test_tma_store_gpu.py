"""GPU: the persistent GEMM whose epilogue stores each tile through shared memory by TMA (`linear_persistent_tma`,
passes/plan_tma_store.py) against torch at odd sizes.

Random bf16 inputs, f32 reference through torch on upcast inputs, relative Frobenius error <= 1e-2. y is a view
into a larger buffer, NaN inside (every element must be written) and a sentinel outside (nothing past the tensor
may be: TMA clips the boxes at the tensor's edge). Few programs (PROGRAMS=3) walk many tiles each, so the staging
buffer is reused tile after tile (the bulk-group waits); PROGRAMS=132 is one block per SM.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import tilex

pytestmark = pytest.mark.gpu
LINEAR = str(Path(__file__).resolve().parents[1] / "stdlib_kernels" / "linear.tile")
GUARD = 4096  # elements of sentinel on each side of y (8 KB: a multiple of 16 bytes, so y stays aligned)
SENTINEL = 12288.0  # exact in bf16


def _torch():
    return pytest.importorskip("torch")


def _kernel(name: str, defines: dict):
    """Kernel `name` of linear.tile translated alone with `defines` (a file-wide -D BM=256 would not build the
    file's other kernels)."""
    return tilex.compile(LINEAR).variant(name, defines, ())


def _rand(*shape, seed=0):
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16)


def _guarded(m: int, n: int):
    """(buffer, y): y an [m, n] view of the buffer's middle, NaN; the GUARD elements on each side a sentinel."""
    torch = _torch()
    buf = torch.full((m * n + 2 * GUARD,), SENTINEL, device="cuda", dtype=torch.bfloat16)
    y = buf[GUARD: GUARD + m * n].view(m, n)
    y.fill_(float("nan"))
    return buf, y


def _check(buf, y, ref) -> None:
    torch = _torch()
    assert torch.isfinite(y.float()).all(), "an element of y was not written"
    assert (buf[:GUARD].float() == SENTINEL).all() and (buf[GUARD + y.numel():].float() == SENTINEL).all(), \
        "something was written outside y"
    err = float((y.float() - ref).norm() / ref.norm().clamp_min(1e-30))
    assert err <= 1e-2, err


CONFIGS = [dict(), dict(PROGRAMS=3),  # 128x128 x 4 stages, all of the tile staged at once
           dict(BN=256, PROGRAMS=3), dict(BN=256, STAGES=3),  # 4 stages: 128 columns a round, two rounds; 3: one
           dict(BM=64, BN=128, STAGES=6, PROGRAMS=5),  # one consumer warpgroup
           # four consumer warpgroups (named barriers 2..5), 64 columns a round; hung on the H200 in session 18: the
           # consumers' setmaxnreg.inc asked more registers than the block held (tests/test_gemm_registers.py)
           dict(BM=256, BN=128, PROGRAMS=7),
           dict(BM=128, BN=64, STAGES=6, PROGRAMS=132)]


@pytest.mark.parametrize("m,k,n", [(1, 896, 2304), (7, 2048, 136), (100, 896, 9728), (511, 2048, 2304),
                                   (4097, 896, 8), (130, 72, 264), (257, 136, 2560)])
@pytest.mark.parametrize("defines", CONFIGS)
def test_linear_persistent_tma(m, k, n, defines):
    x, w = _rand(m, k, seed=m), _rand(n, k, seed=n + 1)
    buf, y = _guarded(m, n)
    _kernel("linear_persistent_tma", defines)(x, w, y)
    _check(buf, y, x.float() @ w.float().T)


@pytest.mark.parametrize("m,k,n", [(1, 896, 2304), (7, 2048, 136), (100, 896, 9728), (511, 2048, 5120),
                                   (4097, 896, 200), (130, 72, 264)])
@pytest.mark.parametrize("defines", [dict(), dict(PROGRAMS=3), dict(BM=64, STAGES=6, PROGRAMS=5)])
def test_linear_persistent_tma3(m, k, n, defines):
    """Tiles of three 64-column blocks (one m64n192 wgmma, three staged stores); N not a multiple of 192."""
    x, w = _rand(m, k, seed=m + 7), _rand(n, k, seed=n + 8)
    buf, y = _guarded(m, n)
    _kernel("linear_persistent_tma3", defines)(x, w, y)
    _check(buf, y, x.float() @ w.float().T)


@pytest.mark.parametrize("m,k,n", [(1, 896, 2304), (7, 2048, 136), (100, 896, 9728), (511, 2048, 5120),
                                   (4097, 896, 200), (130, 72, 264), (257, 136, 5128)])
@pytest.mark.parametrize("defines", [dict(), dict(PROGRAMS=3), dict(BM=64, STAGES=6, PROGRAMS=5)])
def test_linear_persistent_tma5(m, k, n, defines):
    """Tiles of five 32-column blocks (one m64n160 wgmma, register stores); N not a multiple of 160."""
    x, w = _rand(m, k, seed=m + 9), _rand(n, k, seed=n + 10)
    buf, y = _guarded(m, n)
    _kernel("linear_persistent_tma5", defines)(x, w, y)
    _check(buf, y, x.float() @ w.float().T)


@pytest.mark.parametrize("m,k,n", [(4096, 2048, 2304), (511, 13824, 512)])
def test_linear_persistent_tma_large(m, k, n):
    """Many tiles per block at a losing shape of issue 17, and a long K; agrees with the register-store kernel."""
    torch = _torch()
    x, w = _rand(m, k, seed=3), _rand(n, k, seed=4) / k ** 0.5
    buf, y = _guarded(m, n)
    _kernel("linear_persistent_tma", {})(x, w, y)
    _check(buf, y, x.float() @ w.float().T)
    y2 = torch.empty_like(y)
    _kernel("linear_persistent", dict(BN=128))(x, w, y2)
    assert torch.equal(y, y2), "the TMA store and the register store differ"
    buf3, y3 = _guarded(m, n)
    _kernel("linear_persistent_tma3", {})(x, w, y3)
    _check(buf3, y3, x.float() @ w.float().T)
    buf5, y5 = _guarded(m, n)
    _kernel("linear_persistent_tma5", {})(x, w, y5)
    _check(buf5, y5, x.float() @ w.float().T)
    y4 = torch.empty_like(y)
    _kernel("linear_persistent_tma", dict(BM=256, BN=128))(x, w, y4)
    assert torch.equal(y, y4), "four consumer warpgroups and two differ"
