"""GEMM epilogues (issue 19, "a group that follows a GEMM becomes its epilogue"): a fusion group reading a linear's
product is folded into that GEMM (backend/epilogue.py), one generated kernel per way the product may run
(tilex.stdlib.linear_epilogue picks: tc, swap, sum, apply). CPU: lowering (what folds, what does not), values
against float64 and eager through the interpreter, each kernel text against NumPy, golden sources, nvcc builds,
the path model; GPU: odd sizes on every path against torch, in eager and under CUDA graphs."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tilex.backend as B  # noqa: E402,F401  (registers "tilex")
from tilex.backend import epilogue, kernels  # noqa: E402
from tilex.pipeline import Options  # noqa: E402
from tilex.stdlib import linear_epilogue as LE  # noqa: E402
from tilex.translate import translate  # noqa: E402

from test_golden import check_golden  # noqa: E402
from test_nvcc import ARCHS  # noqa: E402

GOLDEN = __import__("pathlib").Path(__file__).parent / "golden" / "backend"
F = torch.nn.functional


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class GeluMLP(torch.nn.Module):
    """fc1 (bias) -> gelu -> * 0.5 -> fc2 -> + residual: two products, each with an epilogue."""

    def __init__(self, d, h, approximate="none"):
        super().__init__()
        self.fc1, self.fc2, self.approximate = torch.nn.Linear(d, h), torch.nn.Linear(h, d, bias=False), approximate

    def forward(self, x, r):
        return r + self.fc2(F.gelu(self.fc1(x), approximate=self.approximate) * 0.5)


def _f64_mlp(m: GeluMLP, x, r):
    d = lambda t: t.detach().double()  # noqa: E731
    h = F.gelu(d(x) @ d(m.fc1.weight).T + d(m.fc1.bias), approximate=m.approximate) * 0.5
    return d(r) + h @ d(m.fc2.weight).T


def _compile(fn, **kw):
    progs = []
    return torch.compile(fn, backend="tilex", options={"programs": progs, "strict": True, **kw.pop("options", {})},
                         **kw), progs


def _fused(p):
    return [s for s in p.steps if s.kind == "library" and s.match.sources]


def _rel(a, ref):
    return float((a.double() - ref).abs().max() / ref.abs().max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_mlp_folds_both_epilogues(dtype, approximate):
    g = torch.manual_seed(71)
    m = GeluMLP(40, 72, approximate).to(dtype)
    x, r = torch.randn(2, 7, 40, generator=g).to(dtype), torch.randn(2, 7, 40, generator=g).to(dtype)
    cf, progs = _compile(m, dynamic=False)
    with torch.no_grad():
        got, eager = cf(x, r), m(x, r)
    ref = _f64_mlp(m, x, r)
    (p,) = progs
    assert len(_fused(p)) == 2 and not [s for s in p.steps if s.kind == "generated"]
    assert all(s.match.call.paths == {"tc": 1} for s in _fused(p))
    if dtype is torch.float32:
        assert _rel(got, ref) < 1e-5
    else:  # the product is rounded to bf16 before its epilogue, as eager stores it
        assert _rel(got, ref) <= 1.25 * _rel(eager, ref) + 1e-3


def test_report_shows_the_fused_kernels(tmp_path):
    m = GeluMLP(40, 72)
    cf, progs = _compile(m, dynamic=False, options={"report": str(tmp_path)})
    x = torch.randn(3, 40, generator=torch.manual_seed(70))
    with torch.no_grad():
        cf(x, x)
    (page,) = tmp_path.glob("graph_*.html")
    html = page.read_text()
    for s in _fused(progs[0]):
        for path, (name, _) in zip(epilogue.PATHS, s.match.sources):
            assert name in html
        assert s.match.kernel in html
    assert "tile_xwt" in html and html.count("not launched") == 2 * 3  # swap, sum, apply of both GEMMs on CPU


def _cases():
    def output_too(fc, x, r):  # the product is a graph output as well: stored, so not folded
        y = fc(x)
        return y, F.silu(y) + r

    def reduction(fc, x, r):  # a row reduction of the product in the group: whole rows, not a GEMM's tiles
        y = fc(x) * 2.0
        return y - y.amax(dim=-1, keepdim=True) + r

    def transposed(fc, x, r):  # read through a transpose: not a rows view of the product
        return fc(x).transpose(0, 1) * r.transpose(0, 1)
    return {"output_too": output_too, "reduction": reduction, "transposed": transposed}


@pytest.mark.parametrize("case", sorted(_cases()))
def test_groups_that_do_not_fold_still_compute_eagers_values(case):
    fn = _cases()[case]
    g = torch.manual_seed(72)
    fc = torch.nn.Linear(24, 24)
    x, r = torch.randn(5, 3, 24, generator=g), torch.randn(5, 3, 24, generator=g)
    cf, progs = _compile(lambda x, r: fn(fc, x, r), dynamic=False)
    with torch.no_grad():
        got, ref = cf(x, r), fn(fc, x, r)
    for a, b in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert not _fused(progs[0])


def test_symbolic_leading_dims_from_the_products_input():
    """dynamic=True, a 3-D input and no other rows input: the outputs' leading dims come from x before its flatten;
    one program over three lengths."""
    fc = torch.nn.Linear(32, 48)
    fn = lambda x: F.gelu(fc(x)) * 0.5  # noqa: E731
    cf, progs = _compile(fn, dynamic=True)
    g = torch.manual_seed(88)
    for t in (5, 9, 3):
        x = torch.randn(2, t, 32, generator=g)
        with torch.no_grad():
            got = cf(x)
        assert got.shape == (2, t, 48)
        torch.testing.assert_close(got, fn(x), rtol=1e-5, atol=1e-5)
    assert len(progs) == 1
    (s,) = _fused(progs[-1])
    assert s.match.call.epi.shape_of is not None


def test_an_addmm_bias_that_broadcasts_runs_in_eager():
    """addmm(bias [1], x, m): the library kernels take a bias of [N] (the review's case raised ValueError)."""
    g = torch.manual_seed(89)
    bias, mat = torch.randn(1, generator=g), torch.randn(16, 24, generator=g)
    fn = lambda x: F.relu(torch.addmm(bias, x, mat)) * 2.0  # noqa: E731
    progs = []
    cf = torch.compile(fn, backend="tilex", options={"programs": progs}, dynamic=False)
    x = torch.randn(5, 16, generator=g)
    with torch.no_grad():
        torch.testing.assert_close(cf(x), fn(x), rtol=1e-5, atol=1e-5)
    assert [t for _, t in progs[0].fallbacks()] == ["aten.addmm.default"] and not _fused(progs[0])


def test_k_not_a_multiple_of_8_is_not_folded():
    """(linear_any, and linear_any_bias for the bias: a Linear(36, 16) raised before session 26)"""
    fc = torch.nn.Linear(36, 16)
    cf, progs = _compile(lambda x: F.relu(fc(x)) * 3.0, dynamic=False)
    x = torch.randn(4, 36, generator=torch.manual_seed(73))
    with torch.no_grad():
        torch.testing.assert_close(cf(x), F.relu(fc(x)) * 3.0, rtol=1e-5, atol=1e-5)
    assert not _fused(progs[0])


def _many_inputs(fc, x, res, col, vec, s: float):
    """rows (res), a column (col [.., 1]), a vector over N (vec), a Python float (a constant, or under dynamic=True a
    0-d tensor read as a one-element vector; scalar parameters: test_a_symbolic_size_read_at_two_dtypes); two
    outputs read outside."""
    p = fc(x)
    a = F.gelu(p) * vec + res
    b = p * col - s * a
    return a, b.to(torch.bfloat16)


@pytest.mark.parametrize("dynamic", [False, True])
def test_epilogue_reads_rows_columns_vectors_and_scalars(dynamic):
    g = torch.manual_seed(74)
    fc = torch.nn.Linear(32, 48, bias=False)
    vec = torch.randn(48, generator=g)
    cf, progs = _compile(lambda *a: _many_inputs(fc, *a), dynamic=dynamic)
    for t in (5, 9):
        x, res, col = (torch.randn(3, t, 32, generator=g), torch.randn(3, t, 48, generator=g),
                       torch.randn(3, t, 1, generator=g))
        with torch.no_grad():
            got, ref = cf(x, res, col, vec, 0.75), _many_inputs(fc, x, res, col, vec, 0.75)
        torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-5)
        assert got[1].dtype is torch.bfloat16
        torch.testing.assert_close(got[1].float(), ref[1].float(), rtol=8e-3, atol=8e-3)
    p = progs[-1]
    (s,) = _fused(p)
    assert len(s.match.extra) == 1 and not [x for x in p.steps if x.kind == "generated"]
    if dynamic:
        assert len(progs) == 1  # one program over both lengths: leading dims read from `res` at each call


def test_a_graph_output_never_takes_a_planned_region():
    """The review's case: the fused GEMM's first output is a graph output (outside the memory plan), its second an
    intermediate of the same dtype and size; later values reuse the intermediate's bytes. The graph output must not
    have been put there (arena.providing hands no region to an allocation that could be either)."""
    g = torch.manual_seed(83)
    fc1, fc2, fc3 = torch.nn.Linear(32, 48), torch.nn.Linear(48, 48), torch.nn.Linear(48, 48)

    def fn(x):
        a = torch.relu(fc1(x))
        b = a * 2.0
        q = torch.softmax(fc2(b), -1)
        return a, torch.softmax(fc3(q), -1)
    cf, progs = _compile(fn, dynamic=False)
    x = torch.randn(8, 32, generator=g)
    with torch.no_grad():
        for _ in range(2):
            for a, b in zip(cf(x), fn(x)):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert _fused(progs[0])


def test_a_symbolic_size_read_at_two_dtypes():
    """The review's case: one SymInt read as i64 by an int member and as f32 by a float member: two parameters."""
    fc = torch.nn.Linear(32, 48)

    def fn(x, idx):
        s = x.shape[0]
        q = idx + s
        return fc(x) * s + q, q
    cf, progs = _compile(fn, dynamic=True)
    g = torch.manual_seed(84)
    for m in (5, 7, 9):
        x, idx = torch.randn(m, 32, generator=g), torch.randint(0, 10, (m, 48), generator=g)
        with torch.no_grad():
            got, ref = cf(x, idx), fn(x, idx)
        torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-4)
        assert torch.equal(got[1], ref[1])
    (s,) = _fused(progs[-1])
    assert sorted(dt for _, _, dt in s.match.call.epi.scalars) == ["f32", "i64"]


def test_an_empty_k_is_not_folded():
    fc = torch.nn.Linear(0, 8)
    cf, progs = _compile(lambda x: F.relu(fc(x)) * 2.0, dynamic=False)
    x = torch.randn(4, 0)
    with torch.no_grad():
        torch.testing.assert_close(cf(x), F.relu(fc(x)) * 2.0)
    assert not _fused(progs[0])


# ----------------------------------------------------------------- each kernel text against NumPy float64

def _epi(dtype=torch.float32, bias=True):
    """The Epilogue of gelu(x @ w.T + b) * vec + res, lowered on CPU."""
    g = torch.manual_seed(75)
    fc = torch.nn.Linear(32, 40, bias=bias).to(dtype)
    vec = torch.randn(40, generator=g).to(dtype)
    fn = lambda x, res: F.gelu(fc(x)) * vec + res  # noqa: E731
    cf, progs = _compile(fn, dynamic=False)
    x, res = torch.randn(6, 32, generator=g).to(dtype), torch.randn(6, 40, generator=g).to(dtype)
    with torch.no_grad():
        cf(x, res)
    (s,) = _fused(progs[0])
    return s.match.call.epi, fc, vec


DEFINES = {"tc": dict(BM=16, BN=32, BK=64, STAGES=2, GROUP=8), "swap": dict(BN=64, BM=16, BK=32, STAGES=2),
           "sum": dict(BM=4, BN=16), "apply": dict(BM=4, BN=16)}


@pytest.mark.parametrize("path", epilogue.PATHS)
def test_each_kernel_in_the_interpreter_matches_float64(path):
    import math

    erf = np.vectorize(math.erf)
    epi, fc, vec = _epi()
    rng = np.random.default_rng(76)
    m, k, n = 11, 32, 40
    x, res = rng.standard_normal((m, k), np.float32), rng.standard_normal((m, n), np.float32)
    w, b = fc.weight.detach().numpy(), fc.bias.detach().numpy()
    prod = x.astype(np.float64) @ w.T.astype(np.float64) + b
    ref = 0.5 * prod * (1 + erf(prod / np.sqrt(2))) * vec.numpy() + res
    y = np.zeros((m, n), np.float32)
    head = {"tc": [x, w, b], "swap": [x, w, b], "apply": [prod.astype(np.float32)],
            "sum": [np.stack([x[:, :16] @ w[:, :16].T, x[:, 16:] @ w[:, 16:].T]).astype(np.float32), b]}[path]
    name, source = epi.sources[path]
    kernels.module(source, tuple(sorted(DEFINES[path].items()))).interp(name, *head, vec.numpy(), res, y)
    assert np.abs(y - ref).max() / np.abs(ref).max() < 1e-5


def _epi_row_major(dtype=torch.float32):
    """The Epilogue of gelu(addmm(c, x, m)) * 2 + res for a plain [K, N] operand m (GPT-2's Conv1D)."""
    g = torch.manual_seed(85)
    mat, c = torch.randn(32, 40, generator=g).to(dtype), torch.randn(40, generator=g).to(dtype)
    fn = lambda x, res: F.gelu(torch.addmm(c, x, mat)) * 2.0 + res  # noqa: E731
    cf, progs = _compile(fn, dynamic=False)
    x, res = torch.randn(6, 32, generator=g).to(dtype), torch.randn(6, 40, generator=g).to(dtype)
    with torch.no_grad():
        got, ref = cf(x, res), fn(x, res)
    tol = 1e-5 if dtype is torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), ref.float(), rtol=tol, atol=tol)
    (s,) = _fused(progs[0])
    assert s.match.kernel.startswith("matmul + epilogue") and s.match.call.paths == {"tc": 1}
    return s.match.call.epi, mat, c


def test_row_major_product_kernel_in_the_interpreter_matches_float64():
    import math

    erf = np.vectorize(math.erf)
    epi, mat, c = _epi_row_major()
    assert epi.row_major and sorted(epi.sources) == ["tc"]
    rng = np.random.default_rng(86)
    x, res = rng.standard_normal((11, 32), np.float32), rng.standard_normal((11, 40), np.float32)
    prod = x.astype(np.float64) @ mat.numpy().astype(np.float64) + c.numpy()
    ref = 0.5 * prod * (1 + erf(prod / np.sqrt(2))) * 2.0 + res
    y = np.zeros((11, 40), np.float32)
    name, source = epi.sources["tc"]
    kernels.module(source, tuple(sorted(DEFINES["tc"].items()))).interp(name, x, mat.numpy(), c.numpy(), res, y)
    assert np.abs(y - ref).max() / np.abs(ref).max() < 1e-5


@pytest.mark.parametrize("path", epilogue.PATHS)
def test_epilogue_golden_tile(path, update_golden):
    epi, _, _ = _epi(torch.bfloat16)
    check_golden(GOLDEN / f"epilogue_gelu_{path}.tile", epi.sources[path][1], update_golden)


def test_row_major_epilogue_golden_tile(update_golden):
    epi, _, _ = _epi_row_major(torch.bfloat16)
    check_golden(GOLDEN / "epilogue_addmm_gelu_tc.tile", epi.sources["tc"][1], update_golden)


@pytest.mark.nvcc
@pytest.mark.parametrize("path", [*epilogue.PATHS, "row_major"])
def test_epilogue_kernel_builds_with_nvcc(path, tmp_path, nvcc):
    epi, _, _ = _epi_row_major(torch.bfloat16) if path == "row_major" else _epi(torch.bfloat16)
    path = "tc" if path == "row_major" else path
    defines = {"tc": dict(BM=128, BN=128, BK=64, STAGES=4, GROUP=8), "swap": dict(BN=64, BM=16, BK=128, STAGES=6),
               "sum": dict(BM=16, BN=256), "apply": dict(BM=16, BN=256)}[path]
    t = translate(epi.sources[path][1], "<epilogue>", Options(defines=defines, arch="sm_90a"))
    (tmp_path / "k.cu").write_text(t.cuda)
    proc = subprocess.run([nvcc, *ARCHS["sm_90a"], "k.cu", "-o", "k.cubin"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


# ----------------------------------------------------------------- the path model

class _X:
    """A stand-in GPU operand for linear_epilogue.choose (its SM count)."""


@pytest.fixture
def gpu_model(monkeypatch):
    monkeypatch.setattr(LE.L, "sm_count", lambda x: 132)
    monkeypatch.setattr(LE.L, "kind_of", lambda x: "torch")
    LE._PLANS.clear()
    yield monkeypatch
    LE._PLANS.clear()


def test_model_folds_into_one_pass_only_when_it_pays(gpu_model):
    lin = LE._lin
    tiles = dict(BM=128, BN=128, BK=64, STAGES=4)
    gpu_model.setattr(lin, "_model_config", lambda *a: dict(tiles))
    m, n, k = 4096, 4096, 4096
    saved = 2 * m * n * 2 / LE.COPY_BYTES_PER_US + LE.LAUNCH_US
    for t_tc, want in ((100.0 + saved - 1.0, "tc"), (100.0 + saved + 1.0, "apply")):
        gpu_model.setattr(lin, "path_choice", lambda *a, t=t_tc: ("persistent", tiles, 1, {"tc": t, "persistent": 100.0}))
        LE._PLANS.clear()
        path, params, gain = LE.choose(_X(), "bf16", m, n, k, False)
        assert path == want and (gain > 0) == (want == "tc")
        if want == "tc":
            assert params == dict(tiles, GROUP=8)
    gpu_model.setattr(lin, "path_choice", lambda *a: ("tc", dict(tiles, BM=64), 1, {"tc": 5.0}))
    LE._PLANS.clear()
    assert LE.choose(_X(), "bf16", 300, 1000, 1024, True)[:2] == ("tc", dict(tiles, BM=64, GROUP=8))
    gpu_model.setattr(lin, "path_choice", lambda *a: ("splitk", dict(tiles), 4, {"tc": 9.0, "splitk": 5.0}))
    LE._PLANS.clear()
    path, params, _ = LE.choose(_X(), "bf16", 100, 1000, 14336, False)
    assert path == "sum" and params["S"] == 4 and params["PBM"] == 128


def test_prewarm_resolves_the_kernel_each_fused_gemm_launches(gpu_model):
    """epilogue.prewarm_jobs (Program.prepare on CUDA): one job per distinct (kernel, configuration, shape), each
    resolving to a runtime kernel of the path the model picks for a GPU operand (translated here, on CPU)."""
    m = GeluMLP(40, 72)
    cf, progs = _compile(m, dynamic=False)
    x = torch.randn(300, 40, generator=torch.manual_seed(69))
    with torch.no_grad():
        cf(x, x)
    lin = LE._lin
    gpu_model.setattr(lin, "path_choice", lambda *a: ("tc", dict(BM=64, BN=64, BK=64, STAGES=3), 1, {"tc": 1.0}))
    jobs = epilogue.prewarm_jobs(progs[0].steps, _X())
    names = {s.match.sources[0][0] for s in _fused(progs[0])}
    assert len(jobs) == 2 and {label.split()[0] for label, _ in jobs} == names
    assert sorted(label.split()[1:] for label, _ in jobs) == [["(tc)", "300x40x72"], ["(tc)", "300x72x40"]]
    for _, resolve in jobs:
        k = resolve()
        assert hasattr(k, "cubin_for") and k.spec.name in names


def test_model_decode_paths(gpu_model):
    lin = LE._lin
    gpu_model.setattr(lin, "_swap_shares", lambda x2, dt, n, k: 1)
    assert LE.choose(_X(), "bf16", 1, 5000, 1024, False)[0] == "swap"
    gpu_model.setattr(lin, "_swap_shares", lambda x2, dt, n, k: 8)
    LE._PLANS.clear()
    path, params, _ = LE.choose(_X(), "bf16", 3, 512, 3584, False)
    assert path == "sum" and params == dict(BM=4, BN=256)
    LE._PLANS.clear()
    assert LE.choose(_X(), "bf16", 40, 512, 4096, True)[0] == "sum"  # linear_splitk's rows (16 < M <= 64)
    assert LE.choose(None, "bf16", 40, 512, 4096, True)[0] == "tc"   # the interpreter


# ----------------------------------------------------------------------------------------------- GPU

def _gpu_fn(fc, approximate):
    return lambda x, r: F.gelu(fc(x), approximate=approximate) * 1.5 + r


@pytest.mark.gpu
@pytest.mark.parametrize("m,k,n", [(1, 1024, 5000), (3, 3584, 512), (5, 1000, 3000), (40, 4096, 512),
                                   (37, 512, 1000), (300, 1024, 1000), (1000, 2048, 2304), (4096, 1024, 4096)])
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_fused_gemm_on_cuda_against_torch(m, k, n, cuda_graphs):
    g = torch.Generator(device="cuda").manual_seed(77)
    fc = torch.nn.Linear(k, n, device="cuda", dtype=torch.bfloat16)
    fn = _gpu_fn(fc, "tanh")
    opts = {"cuda_graphs": True} if cuda_graphs else {}
    cf, progs = _compile(fn, dynamic=False, options=opts)
    for _ in range(3):  # new data each call (graph replays included)
        x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
        r = torch.randn(m, n, device="cuda", generator=g, dtype=torch.bfloat16)
        with torch.no_grad():
            got, eager = cf(x, r).clone(), fn(x, r)
            ref = F.gelu(x.double() @ fc.weight.double().T + fc.bias.double(), approximate="tanh") * 1.5 + r.double()
        assert got.shape == eager.shape
        assert _rel(got, ref) <= 1.25 * _rel(eager, ref) + 2e-3, (_rel(got, ref), _rel(eager, ref))
    (s,) = _fused(progs[0])
    assert sum(s.match.call.paths.values()) >= 1


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["apply", "sum", "swap", "tc"])
def test_every_path_on_cuda(path, monkeypatch):
    """Each kernel forced (the model picks one per shape): values against torch float64 at odd sizes."""
    m, k, n = (7, 1000, 1000) if path in ("swap", "sum") else (333, 1000, 1000)
    real = LE.choose
    forced = {"apply": ("apply", dict(BM=16, BN=256), 0.0), "tc": ("tc", dict(BM=128, BN=128, BK=64, STAGES=4,
                                                                                GROUP=8), 0.0),
              "swap": ("swap", dict(BN=64, BM=16, BK=128, STAGES=6), 0.0),
              "sum": ("sum", dict(BM=8, BN=256), 0.0)}[path]
    monkeypatch.setattr(LE, "choose", lambda x2, *a: forced if x2 is not None else real(x2, *a))
    if path == "sum":  # linear's decode partials
        monkeypatch.setattr(LE._lin, "_swap_shares", lambda x2, dt, n, k: 4)
    g = torch.Generator(device="cuda").manual_seed(78)
    fc = torch.nn.Linear(k, n, device="cuda", dtype=torch.bfloat16)
    fn = _gpu_fn(fc, "none")
    cf, progs = _compile(fn, dynamic=False)
    x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    r = torch.randn(m, n, device="cuda", generator=g, dtype=torch.bfloat16)
    with torch.no_grad():
        got, eager = cf(x, r), fn(x, r)
    ref = F.gelu(x.double() @ fc.weight.double().T + fc.bias.double()) * 1.5 + r.double()
    assert _rel(got, ref) <= 1.25 * _rel(eager, ref) + 2e-3
    (s,) = _fused(progs[0])
    assert s.match.call.paths == {path: 1}


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 37, 300])
def test_bias_at_k_not_a_multiple_of_8_on_cuda(m):
    """linear_any_bias (no epilogue: K % 8 != 0) against torch."""
    g = torch.Generator(device="cuda").manual_seed(79)
    fc = torch.nn.Linear(36, 200, device="cuda", dtype=torch.bfloat16)
    fn = lambda x: F.relu(fc(x)) * 3.0  # noqa: E731
    cf, progs = _compile(fn, dynamic=False)
    x = torch.randn(m, 36, device="cuda", generator=g, dtype=torch.bfloat16)
    with torch.no_grad():
        got, eager = cf(x), fn(x)
    ref = F.relu(x.double() @ fc.weight.double().T + fc.bias.double()) * 3.0
    assert _rel(got, ref) <= 1.25 * _rel(eager, ref) + 2e-3
    assert not _fused(progs[0])


# ----------------------------------------------------------------- unmodified HF models with GELU MLPs

def _hf_gelu_model(name: str, dtype=torch.float32, device="cpu"):
    transformers = pytest.importorskip("transformers")
    small = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 max_position_embeddings=64)
    if name == "gpt_neox":
        cfg, cls = transformers.GPTNeoXConfig(**small, rotary_pct=0.25), transformers.GPTNeoXForCausalLM
    elif name == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
                                      eos_token_id=0)
        cls = transformers.GPT2LMHeadModel
    else:
        cfg, cls = transformers.PhiConfig(**small), transformers.PhiForCausalLM
    torch.manual_seed(80)
    return cls(cfg).eval().to(device=device, dtype=dtype)


@pytest.mark.parametrize("name", ["phi", "gpt2"])
def test_hf_gelu_model_folds_its_mlp_tails(name):
    """transformers' own Phi (fc1 + gelu_new, fc2 + the residual adds) and GPT-2 (Conv1D: addmm of a [K, N] weight,
    c_fc + gelu_new, c_proj + the residual add): strict (no eager node), the MLP GEMMs' tails epilogues, logits
    within 1e-4 of eager in f32."""
    m = _hf_gelu_model(name)
    ids = torch.randint(0, 128, (2, 11), generator=torch.manual_seed(81))
    cf, progs = _compile(m, dynamic=False)
    with torch.no_grad():
        got, ref = cf(ids, use_cache=False).logits, m(ids, use_cache=False).logits
    assert float((got - ref).abs().max() / ref.abs().max()) < 1e-4
    (p,) = progs
    assert len(_fused(p)) >= 2 * 2 and p.fallbacks() == []  # fc1's and fc2's tails in both layers


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["phi", "gpt_neox", "gpt2"])
def test_hf_gelu_models_on_cuda(name):
    """bf16 on the GPU: logits within 1.25x of eager bf16's error against f32, the MLP tails folded, and only tilex
    kernels in the compiled forward's profile (kernel_kinds; copies aside)."""
    from tilex.backend.kernel_kinds import foreign, profile_kernels

    m32 = _hf_gelu_model(name, device="cuda")
    m = _hf_gelu_model(name, torch.bfloat16, "cuda")
    m.load_state_dict({k: v.to(torch.bfloat16) for k, v in m32.state_dict().items()})
    ids = torch.randint(0, 128, (2, 37), device="cuda", generator=torch.Generator(device="cuda").manual_seed(82))
    cf, progs = _compile(m, dynamic=False)
    with torch.no_grad():
        got, eager, ref = (f(ids, use_cache=False).logits.float() for f in (cf, m, m32))
        kinds = profile_kernels(lambda: cf(ids, use_cache=False), 2)
    err = lambda a: float((a - ref).abs().max() / ref.abs().max())  # noqa: E731
    assert err(got) <= 1.25 * err(eager) + 1e-3, (err(got), err(eager))
    assert len(_fused(progs[0])) >= 4 and progs[0].fallbacks() == []
    assert foreign(kinds) == [], foreign(kinds)


@pytest.mark.gpu
@pytest.mark.parametrize("m,k,n", [(1, 768, 3072), (37, 768, 2304), (512, 3072, 768), (300, 1000, 1000)])
def test_row_major_fused_gemm_on_cuda(m, k, n):
    """addmm of a plain [K, N] operand (GPT-2's Conv1D) with its epilogue: matmul.tile's tile_xw main loop."""
    g = torch.Generator(device="cuda").manual_seed(87)
    mat = torch.randn(k, n, device="cuda", generator=g, dtype=torch.bfloat16) / k ** 0.5
    c = torch.randn(n, device="cuda", generator=g, dtype=torch.bfloat16)
    fn = lambda x, r: F.gelu(torch.addmm(c, x, mat), approximate="tanh") * 1.5 + r  # noqa: E731
    cf, progs = _compile(fn, dynamic=False)
    x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    r = torch.randn(m, n, device="cuda", generator=g, dtype=torch.bfloat16)
    with torch.no_grad():
        got, eager = cf(x, r), fn(x, r)
    ref = F.gelu(x.double() @ mat.double() + c.double(), approximate="tanh") * 1.5 + r.double()
    assert _rel(got, ref) <= 1.25 * _rel(eager, ref) + 2e-3
    (s,) = _fused(progs[0])
    assert s.match.call.epi.row_major and s.match.call.paths == {"tc": 1}
