"""tilex.stdlib.matmul / bmm (stdlib_kernels/matmul.tile): row-major products, every kernel of the file at odd sizes
in the interpreter against NumPy float64, the transposed operand read in place, errors; on the GPU against torch."""
from __future__ import annotations

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

from tilex.stdlib import bmm, matmul  # noqa: E402

BF16 = ml_dtypes.bfloat16


def _rel(a, ref) -> float:
    return float(np.abs(np.asarray(a, np.float64) - ref).max() / np.abs(ref).max())


def _rand(rng, *shape, dtype=BF16):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("m,k,n", [(5, 24, 40), (37, 30, 19), (1, 16, 8), (70, 9, 130)])
@pytest.mark.parametrize("bias", [False, True])
def test_matmul_on_the_interpreter(m, k, n, bias):
    """matmul / matmul_bias where K and N are multiples of 8, matmul_any(_bias) elsewhere."""
    rng = np.random.default_rng(m * 100 + k + bias)
    a, b, c = _rand(rng, m, k), _rand(rng, k, n), _rand(rng, n)
    ref = a.astype(np.float64) @ b.astype(np.float64) + (c.astype(np.float64) if bias else 0)
    got = matmul(a, b, c if bias else None)
    assert got.shape == (m, n) and got.dtype == BF16
    assert _rel(got, ref) < 1e-2


def test_matmul_keeps_leading_dims_and_f32():
    rng = np.random.default_rng(3)
    a, b = _rand(rng, 2, 3, 16, dtype=np.float32), _rand(rng, 16, 24, dtype=np.float32)
    got = matmul(a, b)
    assert got.shape == (2, 3, 24) and _rel(got, a.astype(np.float64) @ b) < 1e-5


def _kernels_run(monkeypatch) -> list:
    """The kernel names tilex.stdlib's launches run from now on."""
    from tilex.stdlib import _launch as L

    ran, real = [], L.run
    monkeypatch.setattr(L, "run", lambda mod, name, *a, **kw: ran.append(name) or real(mod, name, *a, **kw))
    return ran


@pytest.mark.parametrize("bb,m,k,n,transposed,kernel", [
    (3, 5, 24, 40, False, "bmm"), (2, 37, 30, 19, False, "bmm_any"), (1, 9, 16, 8, False, "bmm"),
    (3, 5, 24, 40, True, "bmm_nt"), (2, 37, 32, 19, True, "bmm_nt"),   # N % 8 != 0: attention's key length
    (2, 37, 30, 19, True, "bmm_any"), (1, 1, 16, 8, True, "bmm_nt")])
def test_bmm_on_the_interpreter(bb, m, k, n, transposed, kernel, monkeypatch):
    """bmm, bmm_any, and bmm_nt for b the transpose of a contiguous [B, N, K] (K % 8 == 0), read in place."""
    rng = np.random.default_rng(bb + m + k + n + transposed)
    a = _rand(rng, bb, m, k)
    b = np.ascontiguousarray(_rand(rng, bb, n, k)).swapaxes(1, 2) if transposed else _rand(rng, bb, k, n)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    ran = _kernels_run(monkeypatch)
    got = bmm(a, b)
    assert got.shape == (bb, m, n) and _rel(got, ref) < 1e-2
    assert ran == [kernel]


def test_bmm_of_a_strided_view_that_is_neither_layout(monkeypatch):
    rng = np.random.default_rng(6)
    a, base = _rand(rng, 2, 5, 16), _rand(rng, 2, 16, 30)
    b = base[:, :, ::2]   # [2, 16, 15], every other column: copied, then bmm_any (N = 15)
    ran = _kernels_run(monkeypatch)
    assert _rel(bmm(a, b), a.astype(np.float64) @ b.astype(np.float64)) < 1e-2 and ran == ["bmm_any"]


def test_empty_and_zero_k():
    rng = np.random.default_rng(4)
    c = _rand(rng, 6)
    assert np.all(np.asarray(matmul(np.zeros((3, 0), BF16), np.zeros((0, 6), BF16), c), np.float32) ==
                  np.asarray(c, np.float32)[None])
    assert matmul(np.zeros((0, 8), BF16), _rand(rng, 8, 6)).shape == (0, 6)
    assert np.all(np.asarray(bmm(np.zeros((2, 3, 0), BF16), np.zeros((2, 0, 5), BF16)), np.float32) == 0)


def test_bad_arguments():
    rng = np.random.default_rng(5)
    with pytest.raises(ValueError, match=r"b: expected shape \[16, N\]"):
        matmul(_rand(rng, 3, 16), _rand(rng, 12, 4))
    with pytest.raises(TypeError, match="b: expected dtype bf16"):
        matmul(_rand(rng, 3, 16), _rand(rng, 16, 4, dtype=np.float32))
    with pytest.raises(ValueError, match="bias"):
        matmul(_rand(rng, 3, 16), _rand(rng, 16, 4), _rand(rng, 5))
    with pytest.raises(ValueError, match="same B and K"):
        bmm(_rand(rng, 2, 3, 16), _rand(rng, 3, 16, 4))


@pytest.mark.gpu
@pytest.mark.parametrize("m,k,n", [(1, 768, 2304), (37, 768, 3072), (512, 3072, 768), (300, 30, 19), (1000, 1024, 1000)])
@pytest.mark.parametrize("bias", [False, True])
def test_matmul_on_cuda_against_torch(m, k, n, bias, poison):
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda").manual_seed(m + k + n)
    a = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", generator=g, dtype=torch.bfloat16)
    c = torch.randn(n, device="cuda", generator=g, dtype=torch.bfloat16) if bias else None
    ref = a.double() @ b.double() + (c.double() if bias else 0)
    got, eager = matmul(a, b, c), (torch.addmm(c, a, b) if bias else a @ b)
    err = lambda t: float((t.double() - ref).abs().max() / ref.abs().max())  # noqa: E731
    assert err(got) <= 1.25 * err(eager) + 2e-3


@pytest.fixture
def poison(monkeypatch):
    """Outputs filled with NaN before each launch: an element a kernel fails to write shows."""
    from tilex.stdlib import _launch as L

    monkeypatch.setattr(L, "POISON", True)


@pytest.mark.gpu
@pytest.mark.parametrize("bb,m,k,n", [(12, 128, 64, 128), (3, 37, 24, 40), (2, 100, 30, 19), (32, 512, 128, 512),
                                      (16, 77, 64, 333), (4, 1, 64, 40), (60000, 3, 16, 8)])
@pytest.mark.parametrize("transposed", [False, True])
def test_bmm_on_cuda_against_torch(bb, m, k, n, transposed, poison):
    """Every bmm kernel at odd sizes (bmm_nt with N % 8 != 0: an attention's key length; 60000 batches: more than a
    grid's third axis holds)."""
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda").manual_seed(bb + m + k + n)
    a = torch.randn(bb, m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    b = (torch.randn(bb, n, k, device="cuda", generator=g, dtype=torch.bfloat16).transpose(1, 2) if transposed else
         torch.randn(bb, k, n, device="cuda", generator=g, dtype=torch.bfloat16))
    ref = a.double() @ b.double()
    got, eager = bmm(a, b), torch.bmm(a, b)
    err = lambda t: float((t.double() - ref).abs().max() / ref.abs().max())  # noqa: E731
    assert err(got) <= 1.25 * err(eager) + 2e-3


@pytest.mark.gpu
def test_bmm_nt_of_one_batch_with_an_odd_batch_stride(poison):
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda").manual_seed(9)
    a = torch.randn(1, 50, 64, device="cuda", generator=g, dtype=torch.bfloat16)
    w = torch.randn(1, 90, 64, device="cuda", generator=g, dtype=torch.bfloat16)
    b = torch.as_strided(w, (1, 64, 90), (12345, 1, 64))   # the transpose of w, batch stride meaningless
    ref = a.double() @ b.double()
    assert float((bmm(a, b).double() - ref).abs().max() / ref.abs().max()) < 1e-2


def test_backend_prewarm_resolves_the_product_kernels():
    """prewarm.library_jobs (Program.prepare on CUDA) for static matmul / bmm steps: the kernel matmul.py will
    launch, translated here (on CPU; the tiles the GPU model picks)."""
    torch = pytest.importorskip("torch")
    import tilex.backend  # noqa: F401  (registers "tilex")
    from tilex.backend import prewarm

    g = torch.Generator().manual_seed(7)
    m, c = torch.randn(64, 48, generator=g), torch.randn(48, generator=g)
    fn = lambda x, a, kk: (torch.addmm(c, x, m), torch.bmm(a, kk.transpose(1, 2)))  # noqa: E731
    progs = []
    cf = torch.compile(fn, backend="tilex", options={"programs": progs}, dynamic=False)
    x, a, kk = torch.randn(20, 64, generator=g), torch.randn(3, 5, 32, generator=g), torch.randn(3, 40, 32, generator=g)
    with torch.no_grad():
        cf(x, a, kk)
    jobs = prewarm.library_jobs(progs[0].steps, 132)
    assert sorted(label for label, _ in jobs) == ["bmm_nt 3x5x40", "matmul_bias 20x48"]
    for _, resolve in jobs:
        k = resolve()
        assert hasattr(k, "cubin_for")
