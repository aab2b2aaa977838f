"""The generated CUDA compiles with nvcc (no GPU needed): every example and stdlib kernel,
for sm_80, and the host launcher together with its kernel in one TU for sm_90a (that build is also the sm_90a check).

All compiles are started at once on a thread pool when the module's first test asks for
them; each test then waits for its own result, so the slow part runs in parallel.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tilex.diagnostics import CompileError
from tilex.pipeline import Options
from tilex.translate import translate

pytestmark = pytest.mark.nvcc

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "examples").glob("*.tile")) + sorted((ROOT / "stdlib_kernels").glob("*.tile"))
ARCHS = {
    "sm_90a": ["-cubin", "-gencode=arch=compute_90a,code=sm_90a"],
    "sm_80": ["-cubin", "-arch=sm_80"],
}
HOST_FLAGS = ["-c", "-gencode=arch=compute_90a,code=sm_90a"]

# small programs exercising what the examples do not: compiled for sm_90a (and sm_80 unless fp8)
FEATURES = {
    "control_flow": """
kernel f<B: int = 128>(x: f32[N], y: out f32[N], s: f32, k: i32 = 3, on: bool = True)
    grid (cdiv(N, B), 2)
{
    i = program_id(0)
    j = program_id(1) * num_programs(0)
    if i == 0 and on {
        y[0 : B] = x[0 : B]
    } elif i == 1 or not on {
        y[0 : B] += x[0 : B] * 2.0
    } else {
        y[i * B : i * B + B] = x[i * B : i * B + B, other = 1.0] * s
    }
    a = 0.0
    for c in range(0, N, k) {
        a += x[c]
    }
    y[i // 2 + j % 3] = a / k
}
""",
    "elementwise_math": """
kernel f(x: f32[N], h: f16[N], b: bf16[N], y: out f32[N], z: out bf16[N])
    grid (cdiv(N, 64),)
{
    o = program_id(0) * 64
    t = x[o : o + 64]
    y[o : o + 64] = floor(t) + ceil(t) + abs(t) + gelu(t) + gelu_tanh(t) + erf(t) + sin(t) + cos(t) + log2(t)
        + exp2(t) + tanh(t) + sigmoid(t) + sqrt(t) + log(t) + t ** 2 + t % 2.0 + min(t, 0.0) + max(t, 1.0)
    m = t > 0.0
    z[o : o + 64] = where(m & (t < 1.0), h[o : o + 64] + b[o : o + 64], -t).to(bf16)
}
""",
    "reductions": """
kernel f(x: f32[M, N], y: out f32[M], i: out i32[M], q: out i64[N])
    grid (cdiv(M, 32),)
{
    r = program_id(0) * 32
    t = x[r : r + 32, 0 : 64]
    y[r : r + 32] = sum(t, axis = 1) + mean(t, axis = 1) + max(t, axis = 1)
    i[r : r + 32] = argmax(t, axis = 1) + argmin(t, axis = 1)
    u = t * 2.0
    q[0 : 64] = sum(u, axis = 0).to(i64) + arange(0, 64).to(i64)
    m = -inf
    m max= max(t)
    y[0] = m + min(t) + sum(full(f32[16], 1.0))
}
""",
    "int_argreduce": """
kernel f<B: int = 1024>(x: i64[N], w: f32[N], y: out i32[3])
    grid (1,)
{
    y[0] = argmax(x[0 : B])
    y[1] = argmin(x[0 : B])
    y[2] = argmax(w[0 : B])
}
""",
    "broadcast_and_views": """
kernel f(x: f32[N], w: f32[K, N], y: out f32[N, K], z: out f32[K])
    grid (1,)
{
    t = x[0 : 32]
    u = t[:, None] * t[None, :]
    z[0 : 32] = sum(u, axis = 0) + sum(u.T, axis = 1)
    y[0 : 32, 0 : 16] = w.T[0 : 32, 0 : 16] + t[:, None]
}
""",
    "narrow_scalar_params": """
kernel f<BLOCK: int = 64>(x: bf16[N], y: out f32[G], fill: bf16, scale: f16)
    grid (cdiv(N, BLOCK),)
{
    t = x[program_id(0) * BLOCK : program_id(0) * BLOCK + BLOCK, other = fill].to(f32)
    y[program_id(0)] = sum(t) * scale.to(f32)
}
""",
    "matmul_f16_pipeline": """
kernel f<WARPS: int = 8>(a: f16[M, K], b: f16[K, N], c: out f32[M, N])
    grid (cdiv(M, 64), cdiv(N, 64))
{
    m = program_id(0) * 64
    n = program_id(1) * 64
    acc = zeros(f32[64, 64])
    for k in pipeline(0, K, 32, stages = 3) {
        acc += a[m : m + 64, k : k + 32] @ b[k : k + 32, n : n + 64]
    }
    c[m : m + 64, n : n + 64] = acc
}
""",
    "fn_helpers": """
from "helpers.tile" import group_tile, rotate_lo, rotate_hi
fn stats<B: int>(t) {
    s = sum(t, axis = 1)
    return s, max(t, axis = 1) - s / B
}
fn put(dst, m, n, v) {
    dst[m : m + 64, n : n + 64] = v
}
kernel f(x: f32[M, N], y: out f32[M, N], r: out f32[M])
    grid (cdiv(M, 64) * cdiv(N, 64),)
{
    tiles_m = cdiv(M, 64)
    width = 4 * cdiv(N, 64)
    m, n = group_tile(program_id(0), tiles_m, width, GROUP=4, BM=64, BN=64)
    t = x[m : m + 64, n : n + 64]
    c = cos(t)
    s = sin(t)
    put(y, m, n, rotate_lo(t, t * 2.0, c, s) + rotate_hi(t, -t, c, s))
    total, spread = stats(t, B=64)
    r[m : m + 64] = total + spread
}
""",
}
FP8 = """
kernel f(a: f8e4m3[N], c: out f32[N], d: out f8e4m3[N])
    grid (1,)
{
    t = a[0 : 16].to(f32)
    c[0 : 16] = t
    d[0 : 16] = (t * 2.0).to(f8e4m3)
}
"""


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.stem}"


def _nvcc(nvcc: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """nvcc with `args`; a spawn that fails with EFAULT (seen once in a full CPU run of session 18: "[Errno 14] Bad
    address: '/usr/local/bin/nvcc'", the machine's fork/exec, not nvcc's verdict) is tried again once."""
    try:
        return subprocess.run([nvcc, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    except OSError as e:
        if e.errno != 14:
            raise
        return subprocess.run([nvcc, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


class Builds:
    """Translates every source once (per arch) and compiles everything on a thread pool."""

    def __init__(self, nvcc: str, workdir: Path):
        self.nvcc = nvcc
        self.dir = workdir
        self.pool = ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2)))
        self.jobs: dict[tuple[str, str], Future] = {}
        for path in SOURCES:
            # the host-launcher TU compiles the same kernels for sm_90a (HOST_FLAGS), so that build is the sm_90a one
            # too: one nvcc run instead of two of the same device code (the CPU tier's longest module)
            self.jobs[(_id(path), "host")] = self.jobs[(_id(path), "sm_90a")] = self.pool.submit(self._host, path)
            for arch in ARCHS:
                if arch != "sm_90a":
                    self.jobs[(_id(path), arch)] = self.pool.submit(self._kernel, path, arch)
        for name, src in FEATURES.items():
            for arch in ARCHS:
                self.jobs[(name, arch)] = self.pool.submit(self._snippet, name, src, arch)
        self.jobs[("fp8", "sm_90a")] = self.pool.submit(self._snippet, "fp8", FP8, "sm_90a")

    def _snippet(self, name: str, src: str, arch: str):
        d = self.dir / f"feature-{name}-{arch}"
        d.mkdir(parents=True, exist_ok=True)
        t = translate(src, f"{name}.tile", Options(arch=arch), host=True)
        (d / "k.cu").write_text(t.cuda, encoding="utf-8")
        return _nvcc(self.nvcc, [*ARCHS[arch], "k.cu", "-o", "k.cubin"], d), d

    def _write(self, path: Path, tag: str, arch: str, host: bool = False):
        t = translate(path.read_text(encoding="utf-8"), str(path), Options(arch=arch), host=host)
        d = self.dir / f"{path.parent.name}-{path.stem}-{tag}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "k.cu").write_text(t.cuda, encoding="utf-8")
        return d, t

    def _kernel(self, path: Path, arch: str):
        d, _ = self._write(path, arch, arch)
        return _nvcc(self.nvcc, [*ARCHS[arch], "k.cu", "-o", "k.cubin"], d), d

    def _host(self, path: Path):
        d, t = self._write(path, "host", "sm_90a", host=True)
        (d / "k_host.cu").write_text(t.host, encoding="utf-8")
        (d / "tu.cu").write_text('#include "k.cu"\n#include "k_host.cu"\n', encoding="utf-8")
        return _nvcc(self.nvcc, [*HOST_FLAGS, "tu.cu", "-o", "tu.o"], d), d

    def result(self, key):
        return self.jobs[key].result()


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found on PATH")
    b = Builds(nvcc, tmp_path_factory.mktemp("nvcc"))
    yield b
    b.pool.shutdown(wait=True, cancel_futures=True)


def _assert_ok(proc: subprocess.CompletedProcess, out: Path, what: str):
    assert proc.returncode == 0, f"nvcc failed on {what} (rc={proc.returncode}):\n{proc.stderr[-4000:]}"
    assert out.exists() and out.stat().st_size > 0


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("path", SOURCES, ids=_id)
def test_kernel_compiles(builds, path, arch):
    if path.stem == "attention_prefill_short" and arch != "sm_90a":
        # without wgmma its scores run on mma.sync, whose row sums do not have the layout P @ V's result reads
        # them in: refused at compile time (tests/test_view_layout.py) instead of reading past their registers
        with pytest.raises(CompileError, match=r"not supported yet: 'l\[:, None\]' is read in a register layout"):
            builds.result((_id(path), arch))
        return
    if path.stem == "attention_prefill_whole" and arch != "sm_90a":
        # a whole sequence a tile: without TMA/wgmma its q is staged besides the padded K/V ring, past sm_80's
        # shared memory at the default 128x128 tiles (the library runs it on sm_90a only)
        with pytest.raises(CompileError, match=r"needs 139264 bytes of shared memory; the target allows"):
            builds.result((_id(path), arch))
        return
    proc, d = builds.result((_id(path), arch))
    _assert_ok(proc, d / ("tu.o" if arch == "sm_90a" else "k.cubin"), f"{_id(path)} for {arch}")


@pytest.mark.parametrize("path", SOURCES, ids=_id)
def test_host_launcher_compiles_with_kernel(builds, path):
    proc, d = builds.result((_id(path), "host"))
    _assert_ok(proc, d / "tu.o", f"{_id(path)} host launcher")


@pytest.mark.parametrize("key", [(n, a) for n in FEATURES for a in ARCHS] + [("fp8", "sm_90a")],
                         ids=lambda k: f"{k[0]}-{k[1]}")
def test_feature_program_compiles(builds, key):
    proc, d = builds.result(key)
    _assert_ok(proc, d / "k.cubin", f"{key[0]} for {key[1]}")


def test_stdlib_kernels_are_collected():
    names = [p.name for p in SOURCES if p.parent.name == "stdlib_kernels"]
    assert names == sorted(p.name for p in (ROOT / "stdlib_kernels").glob("*.tile"))


# ---------------------------------------------------------------- programs the checks accept but nvcc rejects
BUGS = [
    pytest.param(
        "kernel f(x: f32[N], y: out f32[N])\n    grid (1,)\n{\n"
        "    t = zeros(f32[4, 8]) + 1.0\n    u = t.T\n    y[0 : 8] = sum(u, axis = 1)\n}\n",
        "sm_90a", id="reduce-transposed-tile"),
    pytest.param(
        "kernel f(a: f8e4m3[N], c: out f32[N])\n    grid (1,)\n{\n    c[0 : 16] = a[0 : 16].to(f32)\n}\n",
        "sm_80", id="fp8-on-sm_80"),  # a CompileError: f8e4m3 needs sm_89 or later
    pytest.param(  # a CompileError: 'norm' is a CUDA math function, and kernels are extern "C" symbols
        "kernel norm(x: f32[N], y: out f32[N])\n    grid (1,)\n{\n    y[0 : 16] = x[0 : 16]\n}\n",
        "sm_90a", id="kernel-named-norm"),
]


@pytest.mark.parametrize("src, arch", BUGS)
def test_checked_programs_compile(src, arch, tmp_path, nvcc):
    """A program the passes accept must either compile with nvcc or be a CompileError."""
    from tilex.diagnostics import CompileError

    try:
        t = translate(src, "p.tile", Options(arch=arch), host=True)
    except CompileError:
        return
    (tmp_path / "k.cu").write_text(t.cuda)
    flags = ARCHS.get(arch, ["-cubin", f"-arch={arch}"])
    proc = _nvcc(nvcc, [*flags, "k.cu", "-o", "k.cubin"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]


# ---------------------------------------------------------------- warp shuffles are never divergent
INT_REDUCTIONS = """
kernel f<WARPS: int = 4>(x: i32[N], y: out i32[3], z: out i64[1])
    grid (1,)
{
    t = x[0 : 512, other = 0]
    y[0] = min(t)
    y[1] = max(t)
    z[0] = argmax(t).to(i64)
    y[2] = sum(abs(t) + arange(7, 519) // -1) + cdiv(x[1], 3)
}
"""
BOOL_REDUCTIONS = """
kernel f<WARPS: int = 4>(x: f32[N], y: out bool[2], z: out i32[1])
    grid (1,)
{
    t = x[0 : 512, other = 0.0] > 0.0
    y[0] = max(t)
    y[1] = min(t)
    z[0] = argmax(t)
}
"""


def test_integer_reductions_shuffle_without_branches(tmp_path, nvcc):
    """Every lane must issue each `shfl.sync` (full mask): an int min/max written as
    `a < shfl(a) ? a : shfl(a)` put the second shuffle in one branch and hung the
    multi-warp argmax on the H200. In the PTX, no branch may sit inside a run of shuffles."""
    t = translate(INT_REDUCTIONS, "r.tile", Options(arch="sm_90a"))
    (tmp_path / "k.cu").write_text(t.cuda)
    proc = _nvcc(nvcc, ["-ptx", "-arch=sm_90a", "k.cu", "-o", "k.ptx"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (tmp_path / "k.ptx").read_text().splitlines()
    assert sum("shfl.sync" in line for line in lines) >= 20  # four reductions of five butterfly steps (argmax: value and index)
    assert_no_branch_among_shuffles(lines)


def assert_no_branch_among_shuffles(lines: list[str]) -> None:
    """PTX `lines`: no branch inside a run of shfl.sync (shuffles at most 12 lines apart)."""
    shfl = [i for i, line in enumerate(lines) if "shfl.sync" in line]
    runs, start = [], shfl[0]
    for a, b in zip(shfl, shfl[1:]):
        if b - a > 12:
            runs.append((start, a))
            start = b
    runs.append((start, shfl[-1]))
    for lo, hi in runs:
        inside = [lines[i].strip() for i in range(lo, hi + 1) if "bra" in lines[i]]
        assert not inside, f"branch among warp shuffles (lines {lo}-{hi}): {inside}"


def test_bool_reductions_compile(tmp_path, nvcc):
    """max/min/argmax of a bool tile (shuffled as int, combined as bool)."""
    t = translate(BOOL_REDUCTIONS, "b.tile", Options(arch="sm_90a"))
    (tmp_path / "k.cu").write_text(t.cuda)
    proc = _nvcc(nvcc, ["-cubin", "-arch=sm_90a", "k.cu", "-o", "k.cubin"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
