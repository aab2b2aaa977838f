"""Batched products (`a[z, m : m + BM, k : k + BK] @ b[z, k : k + BK, n : n + BN]`) keep the tensor-core main
loop (issue 17 item 4). CPU only: the plan (strategy, ring, batch indices), the TMA maps the host encodes, the
generated loads, `tilex explain`'s text, the interpreter against NumPy float64 at odd sizes, and nvcc builds
for sm_90a and sm_80 (marked nvcc; skipped without nvcc)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tilex
import tilex.diagnostics
from tilex import ast as A
from tilex.exprs import unparse
from tilex.pipeline import Options, compile_program
from tilex.runtime.tma import geometry
from tilex.translate import translate
from tilex.types import DType, numpy_dtype

ROOT = Path(__file__).resolve().parents[1]
BMM = ROOT / "examples" / "bmm.tile"
HEADS = ROOT / "examples" / "head_scores.tile"
PERSISTENT = ROOT / "examples" / "bmm_persistent.tile"
BF16 = numpy_dtype(DType.BF16)

# a batched product written four ways: rank 3 [B, K, N] b, rank 3 K-major b, shared rank-2 weights, rank 4
KERNELS = """
kernel bmm_kn<BM: int = 128, BN: int = 128, BK: int = 64, STAGES: int = 3>(a: bf16[B, M, K], b: bf16[B, K, N], c: out f32[B, M, N])
    where K % 8 == 0, N % 8 == 0
    grid (cdiv(M, BM), cdiv(N, BN), B)
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    z = program_id(2)
    acc = zeros(f32[BM, BN])
    for k in pipeline(0, K, BK, stages = STAGES) {
        acc += a[z, m : m + BM, k : k + BK] @ b[z, k : k + BK, n : n + BN]
    }
    c[z, m : m + BM, n : n + BN] = acc
}

kernel bmm_nk<BM: int = 128, BN: int = 128, BK: int = 64, STAGES: int = 3>(a: bf16[B, M, K], w: bf16[B, N, K], c: out f32[B, M, N])
    where K % 8 == 0
    grid (cdiv(M, BM), cdiv(N, BN), B)
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    z = program_id(2)
    acc = zeros(f32[BM, BN])
    for k in pipeline(0, K, BK, stages = STAGES) {
        acc += a[z, m : m + BM, k : k + BK] @ w[z, n : n + BN, k : k + BK].T
    }
    c[z, m : m + BM, n : n + BN] = acc
}

kernel shared_w<BM: int = 128, BN: int = 128, BK: int = 64, STAGES: int = 3>(a: bf16[B, M, K], w: bf16[N, K], c: out f32[B, M, N])
    where K % 8 == 0
    grid (cdiv(M, BM), cdiv(N, BN), B)
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    z = program_id(2)
    acc = zeros(f32[BM, BN])
    for k in pipeline(0, K, BK, stages = STAGES) {
        acc += a[z, m : m + BM, k : k + BK] @ w[n : n + BN, k : k + BK].T
    }
    c[z, m : m + BM, n : n + BN] = acc
}

kernel next_batch<BM: int = 64, BN: int = 64, BK: int = 64, STAGES: int = 2>(a: bf16[B, M, K], b: bf16[B, K, N], c: out f32[B, M, N])
    where K % 8 == 0, N % 8 == 0
    grid (cdiv(M, BM), cdiv(N, BN), B)
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    z = program_id(2)
    acc = zeros(f32[BM, BN])
    for k in pipeline(0, K, BK, stages = STAGES) {
        acc += a[z + 1, m : m + BM, k : k + BK] @ b[z, k : k + BK, n : n + BN]
    }
    c[z, m : m + BM, n : n + BN] = acc
}

kernel experts<BM: int = 128, BN: int = 128, BK: int = 64, STAGES: int = 3>(a: bf16[E, M, K], b: bf16[E, K, N], sel: i32[B], c: out f32[B, M, N])
    where K % 8 == 0, N % 8 == 0
    grid (cdiv(M, BM), cdiv(N, BN), B)
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    z = program_id(2)
    e = sel[z]
    acc = zeros(f32[BM, BN])
    for k in pipeline(0, K, BK, stages = STAGES) {
        acc += a[e, m : m + BM, k : k + BK] @ b[e, k : k + BK, n : n + BN]
    }
    c[z, m : m + BM, n : n + BN] = acc
}
"""
SEL = [2, -1, 0, 4]  # experts' batch indices for `experts` (E = 4): -1 and 4 are outside the tensor and read zeros


def kernel(source: str, name: str, arch: str = "sm_90a", **defines) -> A.Kernel:
    prog = compile_program(source, "t.tile", Options(defines=defines, arch=arch, kernel=name), check=True)
    return prog.kernels[0]


def main_loop(k) -> A.For:
    """The first loop of a kernel (or of a block)."""
    return next(s for s in (k.body.stmts if isinstance(k, A.Kernel) else k.stmts) if isinstance(s, A.For))


# ---- the plan
@pytest.mark.parametrize("name,b_tensor,b_kmajor,b_batch", [
    ("bmm_kn", "b", False, ["z"]), ("bmm_nk", "w", True, ["z"]), ("shared_w", "w", True, [])])
@pytest.mark.parametrize("arch,strategy", [("sm_90a", "wgmma"), ("sm_80", "mma"), ("sm_90", "mma")])
def test_batched_products_are_main_loops(name, b_tensor, b_kmajor, b_batch, arch, strategy):
    p = main_loop(kernel(KERNELS, name, arch)).plan
    assert p is not None and p.strategy == strategy and (p.bm, p.bn, p.bk, p.stages) == (128, 128, 64, 3)
    a, b = p.products[0].a, p.products[0].b
    assert (a.tensor, a.kmajor, unparse(a.rows), unparse(a.k), [unparse(i) for i in a.batch]) == ("a", True, "m", "k", ["z"])
    assert (b.tensor, b.kmajor, [unparse(i) for i in b.batch]) == (b_tensor, b_kmajor, b_batch)
    if strategy == "wgmma":
        assert (p.consumers, p.producers) == (256, 128) and not p.why
    else:
        assert p.why.startswith("wgmma needs sm_90a")


def test_rank4_batch_indices_in_order():
    p = main_loop(kernel(HEADS.read_text(), "head_scores")).plan
    assert p.strategy == "wgmma"
    for op in (p.products[0].a, p.products[0].b):
        assert [unparse(i) for i in op.batch] == ["zb", "h"]
    assert p.products[0].b.kmajor  # k[zb, h, n : n + BN, d : d + BK].T: K-major


@pytest.mark.parametrize("arch,strategy,persistent", [("sm_90a", "wgmma", True), ("sm_80", "mma", False)])
def test_persistent_batched_loop(arch, strategy, persistent):
    k = kernel(PERSISTENT.read_text(), "bmm_persistent", arch)
    tile_loop = next(s for s in k.body.stmts if isinstance(s, A.For))
    p = main_loop(tile_loop.body).plan
    assert p.strategy == strategy and p.persistent is persistent
    assert [unparse(i) for i in p.products[0].a.batch] == ["z"]


def test_batched_needs_the_pitch_for_tma():
    src = KERNELS.replace("    where K % 8 == 0, N % 8 == 0\n", "", 1)
    p = main_loop(kernel(src, "bmm_kn")).plan
    assert p.strategy == "mma" and "where K % 8 == 0" in p.why


def test_tma_maps_of_batched_operands():
    """A batched operand gets an N-D map of the whole tensor, box [64, rows, 1...] innermost first; a rank-2
    operand keeps its 2-D map (no box)."""
    from tilex.passes.plan_tma import kernel_tma_maps

    maps = {(m.tensor, m.box_rows): m.box for m in kernel_tma_maps(kernel(KERNELS, "bmm_kn"))}
    assert maps == {("a", 128): (64, 128, 1), ("b", 64): (64, 64, 1)}
    maps = {(m.tensor, m.box_rows): m.box for m in kernel_tma_maps(kernel(KERNELS, "shared_w"))}
    assert maps == {("a", 128): (64, 128, 1), ("w", 128): ()}
    maps = {(m.tensor, m.box_rows): m.box for m in kernel_tma_maps(kernel(HEADS.read_text(), "head_scores"))}
    assert maps == {("q", 128): (64, 128, 1, 1), ("k", 128): (64, 128, 1, 1)}
    # what the host encodes for a [3, 70, 200] bf16 tensor: dims and byte strides innermost first
    assert geometry((3, 70, 200), 2, (64, 128, 1)) == ((200, 70, 3), (400, 400 * 70), (64, 128, 1))


def test_launch_encodes_the_nd_maps(monkeypatch):
    """kernel_arguments encodes each batched operand's map from the bound dims (outermost first) and box; the
    C++ host launcher does the same."""
    from tilex.runtime import BoundArgs, tma
    from tilex.runtime import launch as launch_mod

    t = translate(BMM.read_text(), str(BMM), Options(arch="sm_90a", kernel="bmm"), host=True)
    spec = t.specs["bmm"]
    calls = []
    monkeypatch.setattr(tma, "encode_nd", lambda *a: calls.append(a) or np.void(bytes(128)))
    monkeypatch.setattr(tma, "encode", lambda *a: pytest.fail("a batched operand was given a 2-D map"))
    monkeypatch.setattr(launch_mod, "_pointer", lambda x, kind=None: np.uint64(x))
    bound = BoundArgs({"B": 3, "M": 70, "K": 200, "N": 136}, {"a": 0x10000, "b": 0x20000, "c": 0x30000}, {}, (1, 2, 3))
    args = launch_mod.kernel_arguments(spec, bound)
    assert calls == [(0x10000, "bf16", (3, 70, 200), (64, 128, 1)), (0x20000, "bf16", (3, 200, 136), (64, 64, 1))]
    assert len(args) == 3 + 4 + 2
    with pytest.raises(tilex.diagnostics.LaunchError, match="argument 'b'.*16-byte aligned"):
        launch_mod.kernel_arguments(spec, BoundArgs(bound.symbols, {**bound.arrays, "b": 0x20008}, {}, (1, 2, 3)))
    assert "const long long dims[3] = {(long long)B, (long long)M, (long long)K};" in t.host
    assert "const cuuint32_t box[3] = {64, 128, 1};  // innermost first" in t.host
    assert "const cuuint32_t box[3] = {64, 64, 1};  // innermost first" in t.host


def test_wgmma_loads_batched_boxes():
    cuda = translate(KERNELS, "t.tile", Options(arch="sm_90a", kernel="bmm_kn")).cuda
    # a: one 3-D box per 64 columns of K at (k, m, z); b ([K, N]): one per 64 columns of N at (n, k, z)
    assert "tilex_tma_box(tx_st + 0, &tx_map0, k, (B > 0 && M > 0 && K > 0) ? (int)(m) : -256, (int)(z), &tx_full[tx_q]);" in cuda
    assert "tilex_tma_box(tx_st + 16384, &tx_map1, n, (B > 0 && K > 0 && N > 0) ? (int)(k) : -256, (int)(z), &tx_full[tx_q]);" in cuda
    assert "tilex_tma_box(tx_st + 24576, &tx_map1, (n) + 64, (B > 0 && K > 0 && N > 0) ? (int)(k) : -256, (int)(z), &tx_full[tx_q]);" in cuda
    assert "tilex_tma_load_2d(tx_st" not in cuda and "wgmma.mma_async" in cuda
    four = translate(HEADS.read_text(), "head_scores.tile", Options(arch="sm_90a")).cuda
    assert "(int)(h), (int)(zb), &tx_full[tx_q]);" in four  # batch coordinates innermost first: h, then zb


def test_mma_ring_reads_the_batch_matrix():
    cuda = translate(KERNELS, "t.tile", Options(arch="sm_80", kernel="bmm_kn")).cuda
    assert "const bool tx_zok1 = (unsigned long long)(long long)(z) < (unsigned long long)B;" in cuda
    assert "const tilex_bf16* const tx_zp2 = a + (tx_zok1 ? (long long)(z) * tx_a_s0 : 0LL);" in cuda
    assert "tilex_tile_to_smem<128, 64, 72, 256>(tx_ra + tx_stage * 9216, tx_zp2, m, k, (tx_zok1 ? (long long)M : 0LL), K, K);" in cuda
    assert "staged sequentially" not in cuda and "mma16816" in cuda


# ---- loops that stay generic say why
@pytest.mark.parametrize("body,why", [
    ("acc += a[k // BK, m : m + BM, k : k + BK] @ b[z, k : k + BK, n : n + BN]",
     "the batch index 'k // 64' of 'a[k // 64, m : m + 128, k : k + 64]' moves with the loop variable 'k'"),
    ("acc += a[z, m : m + BM, k : k + BK, other = 1.0] @ b[z, k : k + BK, n : n + BN]", "has other="),
    ("acc += a[z, m : m + BM, k : k + BK] @ b[z, k : k + BK, n : n + BN]\n        acc += a[z, m : m + BM, k : k + BK] @ b[z, k : k + BK, n : n + BN]",
     "two products accumulate into one accumulator"),
])
def test_fallback_says_the_true_reason(body, why):
    src = KERNELS.replace("        acc += a[z, m : m + BM, k : k + BK] @ b[z, k : k + BK, n : n + BN]\n", f"        {body}\n", 1)
    loop = main_loop(kernel(src, "bmm_kn"))
    assert loop.plan is None and loop.mma is not None and loop.mma.strategy == "mma"
    assert loop.mma.why.startswith("not a tensor-core main loop: ") and why in loop.mma.why
    assert "is not a tile the loop loads" not in loop.mma.why


def test_fallback_from_the_plan_says_why():
    """A main loop the plan refuses (here: a batched a read M-major) keeps the generic '@' and says why."""
    src = KERNELS.replace("a: bf16[B, M, K], w: bf16[B, N, K]", "a: bf16[B, K, M], w: bf16[B, N, K]", 1).replace(
        "a[z, m : m + BM, k : k + BK] @ w[z, n : n + BN, k : k + BK].T", "a[z, k : k + BK, m : m + BM].T @ w[z, n : n + BN, k : k + BK].T", 1)
    loop = main_loop(kernel(src, "bmm_nk"))
    assert loop.plan is None and loop.mma.strategy == "mma"
    assert loop.mma.why.startswith("not a tensor-core main loop: 'a[z, k : k + 64, m : m + 128]' is read M-major")


def test_explain_text(tmp_path):
    from typer.testing import CliRunner

    from tilex.cli import app as main

    res = CliRunner().invoke(main, ["explain", str(BMM)])
    assert res.exit_code == 0, res.output
    assert "matmul loop: line 13: wgmma 128x128x64, 4 stages, 8 warps + 4 producer warps" in res.output
    assert "batched:     line 13: a[z, ...], b[z, ...] (N-D TMA maps, box 1 on the batch axes)" in res.output
    res = CliRunner().invoke(main, ["explain", str(HEADS)])
    assert "batched:     line 13: q[zb, h, ...], k[zb, h, ...] (N-D TMA maps, box 1 on the batch axes)" in res.output
    res = CliRunner().invoke(main, ["explain", str(BMM), "--arch", "sm_80"])
    assert "matmul loop: line 13: mma 128x128x64, 4 stages, 8 warps (wgmma needs sm_90a (target sm_80))" in res.output
    assert "(cp.async from the batch's matrix)" in res.output
    # a loop that is not a main loop: the true reason, not the wgmma operand rule
    src = KERNELS.replace("a[z, m : m + BM, k : k + BK] @", "a[k // BK, m : m + BM, k : k + BK] @", 1)
    f = tmp_path / "moving.tile"
    f.write_text(src)
    res = CliRunner().invoke(main, ["explain", str(f), "-k", "bmm_kn"])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if "products:" in x)
    assert "mma.sync m16n8k16 (not a tensor-core main loop: the batch index 'k // 64'" in line
    res = CliRunner().invoke(main, ["explain", str(BMM), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0]["matmul_loops"][0]["batch"] == {"a": ["z"], "b": ["z"]}
    res = CliRunner().invoke(main, ["explain", str(HEADS), "--json"])
    assert json.loads(res.stdout)[0]["matmul_loops"][0]["batch"] == {"q": ["zb", "h"], "k": ["zb", "h"]}


# ---- the interpreter against NumPy float64 (odd sizes: M, N, K not multiples of the tiles; batch 3)
def _bf16(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32).astype(BF16)


def _rel(out, ref) -> float:
    out = np.asarray(out, dtype=np.float64)
    assert np.isfinite(out).all(), "an element was not written"
    return float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))


@pytest.mark.parametrize("b_count,m,n,k", [(3, 70, 136, 200), (1, 1, 8, 8), (2, 129, 72, 64)])
@pytest.mark.parametrize("name,defines", [("bmm", {}), ("bmm_persistent", dict(PROGRAMS=3))])
def test_example_bmm_interpreter(b_count, m, n, k, name, defines):
    rng = np.random.default_rng(b_count * 1000 + m)
    a, b = _bf16(rng, b_count, m, k), _bf16(rng, b_count, k, n)
    c = np.full((b_count, m, n), np.nan, BF16)
    tilex.compile(str(BMM if name == "bmm" else PERSISTENT), **defines).interp(name, a=a, b=b, c=c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert _rel(c, ref) <= 1e-2  # bf16 output: one rounding of an f32 accumulation


def test_example_head_scores_interpreter():
    rng = np.random.default_rng(7)
    z, h, m, s, d = 2, 3, 33, 150, 72
    q, kk = _bf16(rng, z, h, m, d), _bf16(rng, z, h, s, d)
    out = np.full((z, h, m, s), np.nan, np.float32)
    tilex.compile(str(HEADS)).interp("head_scores", q=q, k=kk, s=out, scale=0.125)
    ref = q.astype(np.float64) @ np.swapaxes(kk.astype(np.float64), -1, -2) * 0.125
    assert _rel(out, ref) <= 1e-5  # f32 output of exact bf16 products, f32 sums over 72


@pytest.mark.parametrize("name", ["bmm_kn", "bmm_nk", "shared_w", "next_batch", "experts"])
def test_kernels_interpreter(name):
    rng = np.random.default_rng(11)
    bc, m, n, k = 3, 70, 136, 200
    a = _bf16(rng, bc, m, k)
    af = a.astype(np.float64)
    if name == "bmm_kn":
        b = _bf16(rng, bc, k, n)
        args, ref = dict(b=b), af @ b.astype(np.float64)
    elif name == "bmm_nk":
        w = _bf16(rng, bc, n, k)
        args, ref = dict(w=w), af @ np.swapaxes(w.astype(np.float64), -1, -2)
    elif name == "shared_w":
        w = _bf16(rng, n, k)
        args, ref = dict(w=w), af @ w.astype(np.float64).T
    elif name == "next_batch":  # a[z + 1]: the last batch's index is outside the tensor and reads zeros
        b = _bf16(rng, bc, k, n)
        args = dict(b=b)
        ref = np.concatenate([af[1:] @ b.astype(np.float64)[:-1], np.zeros((1, m, n))])
    else:  # a batch index loaded from a tensor (an expert per program), some outside the tensor
        a = _bf16(rng, 4, m, k)
        b = _bf16(rng, 4, k, n)
        bc = len(SEL)
        prod = a.astype(np.float64) @ b.astype(np.float64)
        ref = np.stack([prod[e] if 0 <= e < 4 else np.zeros((m, n)) for e in SEL])
        args = dict(a=a, b=b, sel=np.array(SEL, np.int32))
    args.setdefault("a", a)
    c = np.full((bc, m, n), np.nan, np.float32)
    tilex.compile(KERNELS).interp(name, c=c, **args)
    assert _rel(c, ref) <= 1e-5


# ---- nvcc builds (cubin) and the instructions they contain (PTX)
def _nvcc(tmp_path: Path, source: str, file: str, arch: str, kernel_name: str | None, what: str) -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found on PATH")
    t = translate(source, file, Options(arch=arch, kernel=kernel_name))
    (tmp_path / "k.cu").write_text(t.cuda)
    gencode = ["-gencode=arch=compute_90a,code=sm_90a"] if arch == "sm_90a" else [f"-arch={arch}"]
    out = f"k.{what}"
    proc = subprocess.run([nvcc, f"-{what}", *gencode, "k.cu", "-o", out], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (tmp_path / out).read_text() if what == "ptx" else ""


@pytest.mark.nvcc
@pytest.mark.parametrize("path", [BMM, HEADS, PERSISTENT], ids=lambda p: p.stem)
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_examples_build(tmp_path, path, arch):
    _nvcc(tmp_path, path.read_text(), str(path), arch, None, "cubin")


@pytest.mark.nvcc
@pytest.mark.parametrize("path,tma", [(BMM, "3d"), (HEADS, "4d"), (PERSISTENT, "3d")], ids=lambda x: getattr(x, "stem", x))
def test_sm90a_ptx_uses_nd_tma_and_wgmma(tmp_path, path, tma):
    ptx = _nvcc(tmp_path, path.read_text(), str(path), "sm_90a", None, "ptx")
    for insn in (f"cp.async.bulk.tensor.{tma}", "wgmma.mma_async", "mbarrier.try_wait", "setmaxnreg"):
        assert insn in ptx, f"{insn} missing from the sm_90a PTX of {path.name}"
    assert "mma.sync" not in ptx and "cp.async.bulk.tensor.2d" not in ptx


@pytest.mark.nvcc
@pytest.mark.parametrize("name", ["bmm_kn", "shared_w", "next_batch", "experts"])
def test_sm80_ptx_uses_the_mma_ring(tmp_path, name):
    ptx = _nvcc(tmp_path, KERNELS, "t.tile", "sm_80", name, "ptx")
    for insn in ("mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned", "cp.async.cg.shared.global"):
        assert insn in ptx, f"{insn} missing from the sm_80 PTX of {name}"
    assert "wgmma" not in ptx
