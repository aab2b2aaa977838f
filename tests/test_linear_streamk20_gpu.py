"""GPU: the one-launch split-K kernels of session 20 against torch at odd sizes: `linear_streamk` (whole rounds of
tiles, then the tail's K steps shared over the programs) and `linear_splitk_last` (S shares of each tile's K).

Random bf16 inputs, f32 reference through torch on upcast inputs, relative Frobenius error <= 1e-2. y is a view
into a larger buffer, NaN inside (every element must be written) and a sentinel outside (nothing past the tensor
may be). Each case launches three times on the same counters, poisoning y each time: the counters must be back at
zero after every launch (a stale count would skip or repeat a tile's sum) and the result bit-identical (the sums
run in a fixed order whichever program finishes last).
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu
GUARD = 4096
SENTINEL = 12288.0  # exact in bf16


def _torch():
    return pytest.importorskip("torch")


def _kernel(name: str, defines: dict, bias: bool):
    """As the library loads it (benchmarks/bench_gemm20.py builds these variants: BIAS given only when True)."""
    from tilex.stdlib import _launch as L

    d = dict(defines, BIAS=True) if bias else dict(defines)
    return L.load("linear", kernel=name, T="bf16", **d).kernel(name)


def _rand(*shape, seed=0):
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16)


def _guarded(m: int, n: int):
    torch = _torch()
    buf = torch.full((m * n + 2 * GUARD,), SENTINEL, device="cuda", dtype=torch.bfloat16)
    y = buf[GUARD: GUARD + m * n].view(m, n)
    return buf, y


def _run3(launch, buf, y, ref, count):
    torch = _torch()
    first = None
    for _ in range(3):
        y.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        assert torch.isfinite(y.float()).all(), "an element of y was not written"
        assert (buf[:GUARD].float() == SENTINEL).all() and (buf[GUARD + y.numel():].float() == SENTINEL).all(), \
            "something was written outside y"
        assert not count.any(), "a tile counter was left non-zero"
        err = float((y.float() - ref).norm() / ref.norm().clamp_min(1e-30))
        assert err <= 1e-2, err
        if first is None:
            first = y.clone()
        else:
            assert torch.equal(first, y), "launches of the same inputs differ"


# (tiles, bias): the benchmark's variants, and the bias and PROGRAMS=5 with the first (one build each, cold cache)
STREAM = [(dict(), False), (dict(), True), (dict(PROGRAMS=5), False), (dict(BN=256), False), (dict(BN=64), False),
          (dict(STAGES=6), False)]
LAST = [(dict(), False), (dict(), True), (dict(BN=256), False), (dict(BN=64), False), (dict(BN=64, STAGES=6), False),
        (dict(STAGES=3), False)]


@pytest.mark.parametrize("m,k,n", [(1, 896, 2304), (7, 2048, 136), (100, 896, 9728), (100, 14336, 3584),
                                   (257, 136, 2560), (130, 72, 264), (511, 2048, 5120), (33, 8, 8)])
@pytest.mark.parametrize("defines,bias", STREAM)
def test_linear_streamk(m, k, n, defines, bias):
    torch = _torch()
    d = dict(BM=128, BN=128, BK=64, STAGES=4, PROGRAMS=132)
    d.update(defines)
    x, w, b = _rand(m, k, seed=m), _rand(n, k, seed=n + 1) / k ** 0.5, _rand(n, seed=n + 2)
    buf, y = _guarded(m, n)
    tiles = -(-m // d["BM"]) * -(-n // d["BN"])
    part = torch.full((2 * d["PROGRAMS"], d["BM"], d["BN"]), float("nan"), device="cuda")
    count = torch.zeros(tiles, device="cuda", dtype=torch.int32)
    kern = _kernel("linear_streamk", d, bias)
    ref = x.float() @ w.float().T + (b.float() if bias else 0)
    _run3(lambda: kern(x, w, b, part, count, y), buf, y, ref, count)


@pytest.mark.parametrize("m,k,n,s", [(1, 896, 2304, 2), (7, 2048, 136, 5), (100, 14336, 3584, 4),
                                     (257, 136, 2560, 3), (130, 72, 264, 9), (100, 896, 9728, 2)])
@pytest.mark.parametrize("defines,bias", LAST)
def test_linear_splitk_last(m, k, n, s, defines, bias):
    """(130, 72, 264, 9): shares past K's two steps have no steps (their partials are zeros)."""
    torch = _torch()
    d = dict(BM=128, BN=128, BK=64, STAGES=4)
    d.update(defines)
    x, w, b = _rand(m, k, seed=m + 3), _rand(n, k, seed=n + 4) / k ** 0.5, _rand(n, seed=n + 5)
    buf, y = _guarded(m, n)
    tiles = -(-m // d["BM"]) * -(-n // d["BN"])
    part = torch.full((s, m, n), float("nan"), device="cuda")
    count = torch.zeros(tiles, device="cuda", dtype=torch.int32)
    kern = _kernel("linear_splitk_last", d, bias)
    ref = x.float() @ w.float().T + (b.float() if bias else 0)
    _run3(lambda: kern(x, w, b, part, count, y), buf, y, ref, count)


SUBPROCESS = r"""
import sys, torch
from tilex.stdlib import _launch as L
m, k, n = 4096, 2048, 2560
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(m, k, generator=g, device="cuda").to(torch.bfloat16)
w = (torch.randn(n, k, generator=g, device="cuda") / k ** 0.5).to(torch.bfloat16)
d = dict(BM=128, BN=128, BK=64, STAGES=4, PROGRAMS=132)
kern = L.load("linear", kernel="linear_streamk", T="bf16", **d).kernel("linear_streamk")
part = torch.empty(264, 128, 128, device="cuda")
count = torch.zeros(32 * 20, device="cuda", dtype=torch.int32)
y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
kern(x, w, w.reshape(-1)[:n], part, count, y)
torch.cuda.synchronize()
ref = x.float() @ w.float().T
err = float((y.float() - ref).norm() / ref.norm())
print("err", err, "counters zero", bool((count == 0).all()))
sys.exit(0 if err <= 1e-2 and bool((count == 0).all()) else 1)
"""


def test_linear_streamk_tile_rows_a_multiple_of_group():
    """M=4096 K=2048 N=2560: 32 rows of tiles (a multiple of GROUP) and a tail of 112 tiles, so the last program's
    empty second segment would name the tile one past the last, whose group_tile row count is 0 (an illegal
    instruction on the H200 in session 20 before the clamp). In a subprocess: a fault must not take this process's
    CUDA context (and the tests after it) down with it."""
    import subprocess
    import sys

    _torch()
    r = subprocess.run([sys.executable, "-c", SUBPROCESS], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
