"""Fusion with symbolic values (issue 19): a host number the graph computes (a SymInt input such as HF
StaticCache's `kv_length`, a size, `sym_float`, a 0-d CPU tensor next to device tensors) is a scalar kernel
parameter read at each call, not a literal baked into the kernel (one compiled kernel serves every value);
row reductions (amax / sum / mean, SDPA's math-path `_safe_softmax`) accept a symbolic row length, checked
against MAX_ROW at each new layout (a longer row runs that call in eager, counted in Step.fallbacks).
Device graphs are traced on `meta` tensors (test_backend_device.lower_on_meta) and run on CPU tensors through
the interpreter; CPU graphs compile with dynamic=True."""
from __future__ import annotations

import subprocess

import pytest

torch = pytest.importorskip("torch")

import tilex.backend as B  # noqa: E402,F401  (registers "tilex")
from tilex.backend import fusion  # noqa: E402
from tilex.pipeline import Options  # noqa: E402
from tilex.translate import translate  # noqa: E402

from test_backend_device import _fake, lower_on_meta  # noqa: E402
from test_golden import check_golden  # noqa: E402
from test_nvcc import ARCHS  # noqa: E402

GOLDEN = __import__("pathlib").Path(__file__).parent / "golden" / "backend"


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _generated(p):
    return [s for s in p.steps if s.kind == "generated"]


def _counter_update(k, counter):
    """StaticCache.update's counter arithmetic: positions from the counter, then counter.add_(kv_length)."""
    n = k.shape[-2]
    pos = counter + n
    counter.add_(n)
    return k * n + pos, k / (n * 0.5) - counter


def _counter_program():
    """The device graph of _counter_update with a symbolic length (two lengths: Dynamo's automatic dynamic)."""
    progs = lower_on_meta(_counter_update, lambda fm: (_fake(fm, torch.zeros(4, 8)), _fake(fm, torch.tensor(0))),
                          lambda fm: (_fake(fm, torch.zeros(6, 8)), _fake(fm, torch.tensor(0))))
    p = progs[-1]
    assert any(not isinstance(pl.meta["val"], torch.Tensor) for pl in p.placeholders)  # kv_length: a SymInt input
    return p


def _args(p, n, k, counter):
    return [n if not isinstance(pl.meta["val"], torch.Tensor) else (counter if pl.meta["val"].dim() == 0 else k)
            for pl in p.placeholders]


def test_device_counter_plus_symint_is_a_kernel_with_a_scalar_parameter():
    """counter.add_(kv_length) on a device (session 19's last eager aten.add.Tensor on the H200): one generated
    kernel taking kv_length as an i64 parameter; k * n and k / (n * 0.5) take f32 parameters (the SymInt and the
    folded 0-d CPU tensor: no copy to the device). Run on CPU tensors at three lengths: eager's values, and the
    counter advanced by each length through the same kernel and launch plan (the value is read per call)."""
    p = _counter_program()
    assert p.fallbacks() == []
    gen = _generated(p)
    counter_add = [s for s in gen if s.kernel.shape == (1,) and s.kernel.scalars]
    assert counter_add, [s.kernel.source for s in gen]
    sym = next(pl for pl in p.placeholders if not isinstance(pl.meta["val"], torch.Tensor))
    assert all([(n, dt) for n, _, dt in s.kernel.scalars] == [(sym, "i64")] for s in counter_add)
    floats = [dt for s in gen for _, _, dt in s.kernel.scalars if s.kernel.shape != (1,)]
    assert floats.count("f32") == 2                      # k * n and k / (n * 0.5)
    assert all(s.copies == 0 for s in gen)
    g = torch.Generator().manual_seed(51)
    for n in (3, 5, 9, 5):
        k, counter = torch.randn(n, 8, generator=g), torch.tensor(7 + n)
        ek, ecounter = k.clone(), counter.clone()
        outs = p(*_args(p, n, k, counter))
        refs = _counter_update(ek, ecounter)
        for o, r in zip(outs, refs):
            torch.testing.assert_close(o, r, rtol=1e-6, atol=1e-6)
        assert counter.dtype == torch.int64 and int(counter) == int(ecounter) == 7 + 2 * n
    for s in counter_add:   # the counter's layout never changes: one plan, the lengths passed per call
        assert len(s.plans) == 1 and s.calls == 4


def test_cpu_tensor_times_symint_is_a_scalar_parameter():
    """x * x.shape[0] under dynamic=True on CPU tensors: the SymInt is an f32 parameter of the generated kernel
    (before: an operand the template refused), one program across lengths, no eager node."""
    def f(x):
        return torch.sigmoid(x) * x.shape[0] + x.shape[1]
    progs = []
    cf = torch.compile(f, backend="tilex", options={"programs": progs, "strict": True}, dynamic=True)
    g = torch.Generator().manual_seed(52)
    with torch.no_grad():
        for shape in ((5, 7), (8, 3), (11, 16)):
            x = torch.randn(*shape, generator=g)
            torch.testing.assert_close(cf(x), f(x), rtol=1e-6, atol=1e-6)
    (p,) = progs
    (step,) = _generated(p)
    assert [dt for _, _, dt in step.kernel.scalars] == ["f32", "f32"]
    assert "a0: f32" in step.kernel.source and "a1: f32" in step.kernel.source
    assert step.calls == 3


def test_symint_in_a_comparison_takes_the_int_tensor_dtype():
    """positions < n (an int32 tensor against a SymInt): the parameter is i32 like the tensor, the result bool."""
    def f(pos, x):
        return torch.where(pos.to(torch.int32) < x.shape[0] - 1, x, 0.0)
    progs = []
    cf = torch.compile(f, backend="tilex", options={"programs": progs, "strict": True}, dynamic=True)
    with torch.no_grad():
        for n in (6, 9):
            pos, x = torch.arange(n), torch.randn(n)
            torch.testing.assert_close(cf(pos, x), f(pos, x))
    (p,) = progs
    dts = [dt for s in _generated(p) for _, _, dt in s.kernel.scalars]
    assert dts == ["i32"], [s.kernel.source for s in _generated(p)]


def _safe_softmax_rows(x, m):
    return torch.ops.aten._safe_softmax(x + m, -1) * 2.0


def test_row_reductions_over_a_symbolic_row_length():
    """SDPA's math path on CUDA (f32 with grouped-query heads) under a symbolic sequence length: _safe_softmax
    (amax, exp, sum, where) over [2, 3, s, s] is one generated kernel (session 19: amax and sum stayed eager),
    launched with CB = next power of two >= s per length; a fully masked row gives 0, not NaN."""
    progs = []
    cf = torch.compile(_safe_softmax_rows, backend="tilex", options={"programs": progs, "strict": True},
                       dynamic=True)
    g = torch.Generator().manual_seed(53)
    for s in (37, 20, 70):
        x = torch.randn(2, 3, s, s, generator=g)
        m = torch.where(torch.rand(1, 1, s, s, generator=g) > 0.3, 0.0, float("-inf"))
        m[..., 0, :] = float("-inf")
        with torch.no_grad():
            out = cf(x, m)
        ref = _safe_softmax_rows(x, m)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
        assert not out.isnan().any() and torch.equal(out[:, :, 0], torch.zeros_like(out[:, :, 0]))
    (p,) = progs
    (step,) = _generated(p)
    assert step.kernel.has_reduction and not isinstance(step.kernel.shape[-1], int)
    assert len(step.plans) == 3 and step.fallbacks == 0


def test_symbolic_row_longer_than_a_tile_runs_that_call_in_eager():
    """A row reduction whose symbolic length exceeds MAX_ROW at run time: the whole row no longer fits one tile,
    so that layout's calls run the group's ops in eager (Step.fallbacks), values still eager's; shorter rows of
    the same program stay on the kernel."""
    def f(x):
        return x - x.amax(-1, keepdim=True) + x.mean(-1, keepdim=True)
    progs = []
    cf = torch.compile(f, backend="tilex", options={"programs": progs, "strict": True}, dynamic=True)
    g = torch.Generator().manual_seed(54)
    with torch.no_grad():
        for shape in ((3, 40), (2, fusion.MAX_ROW + 5), (4, 24)):
            x = torch.randn(*shape, generator=g)
            torch.testing.assert_close(cf(x), f(x), rtol=1e-5, atol=1e-5)
    (p,) = progs
    (step,) = _generated(p)
    assert step.calls == 3 and step.fallbacks == 1


def test_static_row_longer_than_a_tile_is_not_fused():
    x = torch.randn(2, fusion.MAX_ROW + 1)
    progs = []
    cf = torch.compile(lambda x: x.sum(-1, keepdim=True), backend="tilex", options={"programs": progs},
                       dynamic=False)
    with torch.no_grad():
        torch.testing.assert_close(cf(x), x.sum(-1, keepdim=True))
    assert [t for _, t in progs[0].fallbacks()] == ["aten.sum.dim_IntList"]


# --------------------------------------------- generated source: golden files, nvcc

def _counter_kernel():
    (s,) = [s for s in _generated(_counter_program()) if s.kernel.shape == (1,) and s.kernel.scalars][:1]
    return s.kernel


def _symbolic_softmax_kernel():
    from test_backend_device import lower_on_meta as lower

    def shapes(s):
        return lambda fm: (_fake(fm, torch.zeros(2, 3, s, s)), _fake(fm, torch.zeros(1, 1, s, s)))
    progs = lower(_safe_softmax_rows, shapes(8), shapes(12))
    (s,) = _generated(progs[-1])
    return s.kernel


GOLDEN_CASES = {"counter_add_symint": _counter_kernel, "safe_softmax_symbolic_rows": _symbolic_softmax_kernel}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_symint_golden_tile(name, update_golden):
    check_golden(GOLDEN / f"{name}.tile", GOLDEN_CASES[name]().source, update_golden)


@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_symint_kernel_builds_with_nvcc(name, tmp_path, nvcc):
    k = GOLDEN_CASES[name]()
    cfg = {"RB": 1, "CB": 8} if name == "counter_add_symint" else {"RB": 4, "CB": 128}
    t = translate(k.source, f"{name}.tile", Options(defines=cfg, arch="sm_90a"))
    (tmp_path / "k.cu").write_text(t.cuda)
    proc = subprocess.run([nvcc, *ARCHS["sm_90a"], "k.cu", "-o", "k.cubin"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


# ------------------------------------------------------------------------------ GPU

@pytest.mark.gpu
def test_scalar_parameters_and_symbolic_rows_on_cuda():
    """On CUDA under dynamic=True: the counter update (an int64 CUDA counter plus the SymInt length, the f32
    parameters) and _safe_softmax over symbolic rows lower with strict=True; eager's values at each length, the
    counter advanced once per call; a row longer than MAX_ROW runs eager (Step.fallbacks)."""
    g = torch.Generator(device="cuda").manual_seed(55)
    progs = []
    cf = torch.compile(_counter_update, backend="tilex", options={"programs": progs, "strict": True}, dynamic=True)
    counter, ecounter = torch.tensor(4, device="cuda"), torch.tensor(4, device="cuda")
    with torch.no_grad():
        for n in (3, 5, 9, 5):
            k = torch.randn(n, 8, device="cuda", generator=g)
            for o, r in zip(cf(k, counter), _counter_update(k.clone(), ecounter)):
                torch.testing.assert_close(o, r, rtol=1e-6, atol=1e-6)
            assert int(counter) == int(ecounter)
    assert len(progs) == 1 and any(s.kernel.scalars for s in _generated(progs[0]))
    progs = []
    cf = torch.compile(_safe_softmax_rows, backend="tilex", options={"programs": progs, "strict": True},
                       dynamic=True)
    with torch.no_grad():
        for s in (37, 20, 70, 1000):
            x = torch.randn(2, 3, s, s, device="cuda", generator=g)
            m = torch.where(torch.rand(1, 1, s, s, device="cuda", generator=g) > 0.3, 0.0, float("-inf"))
            m[..., 0, :] = float("-inf")
            out = cf(x, m)
            torch.testing.assert_close(out, _safe_softmax_rows(x, m), rtol=1e-5, atol=1e-6)
            assert not out.isnan().any()
    (p,) = progs
    (step,) = _generated(p)
    assert step.fallbacks == 0 and len(step.plans) == 4
    progs = []

    def f(x):
        return x - x.amax(-1, keepdim=True) + x.mean(-1, keepdim=True)
    cf = torch.compile(f, backend="tilex", options={"programs": progs, "strict": True}, dynamic=True)
    with torch.no_grad():
        for shape in ((3, 40), (2, fusion.MAX_ROW + 5), (4, 24)):
            x = torch.randn(*shape, device="cuda", generator=g)
            torch.testing.assert_close(cf(x), f(x), rtol=1e-5, atol=1e-5)
    (step,) = _generated(progs[0])
    assert step.calls == 3 and step.fallbacks == 1
