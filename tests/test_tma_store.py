"""TMA epilogue stores of persistent wgmma tile loops (passes/plan_tma_store.py, codegen/matmul.py): which stores
qualify, the shared memory and TMA map they get, the generated CUDA (stmatrix into a swizzled staging buffer,
cp.async.bulk.tensor stores, bulk-group waits), nvcc builds, and the interpreter's numbers for the kernel."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilex
from tilex.passes.plan_tma_store import kernel_tma_stores, persistent_loops, tma_store

ROOT = Path(__file__).resolve().parents[1]
LINEAR = str(ROOT / "stdlib_kernels" / "linear.tile")


def _kernel(name: str, **defines):
    mod = tilex.compile(LINEAR, arch="sm_90a", **defines)
    return mod, mod.translation.program.kernel(name)


def _cuda(name: str, **defines) -> str:
    """The generated text of kernel `name` (its signature to the next kernel's), after the file's helpers."""
    src = tilex.compile(LINEAR, arch="sm_90a", **defines).cuda
    start = src.index(f" {name}(\n")
    end = src.find('extern "C"', start)
    return src[start: end if end > 0 else len(src)]


def _file(kernel: str | None = None, **defines) -> str:
    """The generated file (with `kernel`: of that kernel alone)."""
    if kernel is None:
        return tilex.compile(LINEAR, arch="sm_90a", **defines).cuda
    from tilex.pipeline import Options
    from tilex.translate import translate

    return translate(Path(LINEAR).read_text(), LINEAR, Options(defines=defines, arch="sm_90a", kernel=kernel)).cuda


def test_store_of_a_persistent_tile_with_aligned_rows_goes_by_tma():
    _, k = _kernel("linear_persistent_tma")
    (outer, inner, ts), = kernel_tma_stores(k, k.info.smem_limit)
    assert ts.tensors == ("y",) and len(ts.stores) == 1 and ts.cols == 128 and ts.staging == 128 * 128 * 2
    # the staging buffer is counted after the ring, and y has a [64, 64]-box map
    assert k.info.smem_bytes >= inner.plan.smem_bytes + ts.region
    assert [(m.tensor, m.box_rows) for m in k.info.tma_maps] == [("x", 128), ("w", 128), ("y", 64)]
    body, src = _cuda("linear_persistent_tma"), _file()
    assert "tilex_store_quad" not in body
    assert body.count("tilex_stmatrix_x4(") == 1 and body.count("tilex_tma_store_2d(&tx_map2") == 2
    assert "tilex_bulk_wait_read<0>()" in body and "tilex_bulk_wait<0>()" in body
    assert "stmatrix.sync.aligned.m8n8.x4.shared.b16" in src and "cp.async.bulk.tensor.2d.global.shared::cta" in src


def _variant_of_tma_kernel(old: str, new: str):
    """linear_persistent_tma's source with `old` replaced by `new`, translated: (kernel IR, CUDA)."""
    from tilex.pipeline import Options
    from tilex.translate import translate

    src = Path(LINEAR).read_text()
    text = src[src.index("kernel linear_persistent_tma<"): src.index("kernel linear_persistent_tma3<")]
    assert old in text
    t = translate(text.replace(old, new), "t.tile", Options(arch="sm_90a"))
    return t.program.kernel("linear_persistent_tma"), t.cuda


@pytest.mark.parametrize("old,new", [("where K % 8 == 0, N % 8 == 0", "where K % 8 == 0"),  # y's pitch may be odd
                                     ("TMA_STORE: bool = True", "TMA_STORE: bool = False")])  # not asked for
def test_unaligned_rows_or_no_opt_in_keep_the_register_store(old, new):
    k, cuda = _variant_of_tma_kernel(old, new)
    assert persistent_loops(k) and kernel_tma_stores(k, k.info.smem_limit) == []
    assert "tilex_store_quad<" in cuda and "tilex_tma_store_2d(&" not in cuda


def test_rows_not_known_aligned_keep_the_register_store():
    """linear_persistent says only K % 8 == 0 (and does not ask): its tiles leave by registers as before."""
    _, k = _kernel("linear_persistent", BN=128)
    assert persistent_loops(k) and kernel_tma_stores(k, k.info.smem_limit) == []
    assert [m.tensor for m in k.info.tma_maps] == ["x", "w"]
    body = _cuda("linear_persistent", BN=128)
    assert "tilex_store_quad" in body and "tilex_tma_store_2d" not in body
    _, g = _kernel("gated_mlp_persistent")
    assert kernel_tma_stores(g, g.info.smem_limit) == []


@pytest.mark.parametrize("defines,cols,rounds", [(dict(BN=256), 128, 2), (dict(BN=256, STAGES=3), 256, 1),
                                                 (dict(BM=256, BN=128), 64, 2), (dict(BM=64, STAGES=6), 128, 1)])
def test_staging_columns_fit_next_to_the_ring(defines, cols, rounds):
    """The buffer stages all BN columns when they fit in shared memory beside the ring, else the widest whole
    number of 64-column boxes dividing BN that does, in rounds."""
    _, k = _kernel("linear_persistent_tma", **defines)
    (_, inner, ts), = kernel_tma_stores(k, k.info.smem_limit)
    assert (ts.cols, inner.plan.bn // ts.cols) == (cols, rounds)
    assert inner.plan.smem_bytes + ts.region <= k.info.smem_limit
    assert k.info.smem_bytes <= k.info.smem_limit
    body = _cuda("linear_persistent_tma", **defines)
    assert body.count("tilex_bulk_wait_read<0>()") == rounds


def test_three_column_blocks_one_wgmma_three_staged_stores():
    """linear_persistent_tma3: three [128, 64] products sharing x run as one m64n192 wgmma, and each of the three
    stores has its own staging buffer; only the tile's first waits for the previous tile's stores to have read."""
    _, k = _kernel("linear_persistent_tma3")
    (_, inner, ts), = kernel_tma_stores(k, k.info.smem_limit)
    assert len(ts.stores) == 3 and ts.cols == 64 and ts.region == 3 * 128 * 64 * 2 + 1024
    assert k.info.smem_bytes >= inner.plan.smem_bytes + ts.region
    body = _cuda("linear_persistent_tma3")
    assert "tilex_wgmma_m64n192k16_bf16_k_x3(a0, a1, a2" in body and "tilex_store_quad" not in body
    assert body.count("tilex_tma_store_2d(&") == 3 and body.count("tilex_bulk_wait_read<0>()") == 1


def test_a_tensor_read_back_is_not_stored_by_tma():
    """A TMA store completes asynchronously, so a kernel that reads the stored tensor keeps the register store."""
    k, cuda = _variant_of_tma_kernel("y[m : m + BM, n : n + BN] = acc.to(T)",
                                     "y[m : m + BM, n : n + BN] = acc.to(T)\n        y[m, n] = y[m, n] + 1.0")
    assert kernel_tma_stores(k, k.info.smem_limit) == []
    assert "tilex_tma_store_2d(&" not in cuda


def test_no_room_for_any_staging_keeps_the_register_store():
    _, k = _kernel("linear_persistent_tma")
    outer, inner = persistent_loops(k)[0]
    room = inner.plan.smem_bytes + 128 * 64 * 2 + 1024
    assert tma_store(k, outer, inner, room).cols == 64  # one 64-column box a round just fits
    assert tma_store(k, outer, inner, room - 1) is None


@pytest.mark.parametrize("kernel", ["linear_persistent_tma", "linear_persistent_tma3", "linear_persistent_tma5"])
@pytest.mark.parametrize("m,k,n", [(1, 64, 8), (100, 72, 136), (130, 200, 264)])
def test_interpreter_agrees_with_float64(m, k, n, kernel):
    rng = np.random.default_rng(m + k + n)
    x = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    y = np.full((m, n), np.nan, dtype=ml_dtypes.bfloat16)
    tilex.compile(LINEAR, PROGRAMS=3).interp(kernel, x, w, y)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    err = np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert err < 1e-2  # bf16 output rounding (2^-8 relative), f32 accumulation


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("kernel,defines", [("linear_persistent_tma", dict()), ("linear_persistent_tma", dict(BN=256)),
                                            ("linear_persistent_tma", dict(BM=256, BN=128)),
                                            ("linear_persistent_tma", dict(BM=64, BN=128, STAGES=6)),
                                            ("linear_persistent_tma3", dict()), ("linear_persistent_tma5", dict()),
                                            ("linear_persistent_tma5", dict(BM=64, STAGES=6))])
def test_nvcc_builds_the_tma_store_kernels(tmp_path, kernel, defines):
    cu = tmp_path / "k.cu"
    cu.write_text(_file(kernel, **defines))
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    info = r.stderr.split(kernel)[-1]
    assert "0 bytes spill stores" in info, info


@pytest.mark.parametrize("opt_in,n,kernel", [(True, 2304, "linear_persistent_tma"), (True, 2300, "linear_persistent"),
                                              (False, 2304, "linear_persistent")])
def test_linear_runs_the_tma_store_kernel_where_rows_are_aligned(monkeypatch, opt_in, n, kernel):
    """On the GPU, where the model takes the persistent path, `linear` runs linear_persistent_tma with `_TMA_STORE`
    (the default since session 19's H200 run) and N % 8 == 0 (y's rows 16-byte aligned), else linear_persistent, with
    the same tiles (the launches recorded here; the wider-tile paths switched off to reach the persistent one)."""
    import importlib

    lin = importlib.import_module("tilex.stdlib.linear")
    assert lin._TMA_STORE is True and lin._TMA3 is True and lin._TMA5 is True
    monkeypatch.setattr(lin, "_TMA_STORE", opt_in)
    monkeypatch.setattr(lin, "_TMA3", False)
    monkeypatch.setattr(lin, "_TMA5", False)
    L = lin.L
    ran = []
    monkeypatch.setattr(L, "kind_of", lambda *a: "torch")
    monkeypatch.setattr(L, "sm_count", lambda x: 132)
    loaded = []
    real_load = L.load
    monkeypatch.setattr(L, "load", lambda *a, **d: loaded.append(d) or real_load(*a, **d))
    monkeypatch.setattr(L, "run", lambda mod, name, *args, **kw: ran.append((name, loaded[-1])))
    monkeypatch.setattr(lin, "_tuned", lambda kernel, dt, m, n, k, default, **s: dict(default))
    m, k = 4096, 2048
    path, tiles, _, _ = lin.path_choice("linear", "bf16", m, n, k)
    assert path == "persistent"
    x, w = np.zeros((m, k), ml_dtypes.bfloat16), np.zeros((n, k), ml_dtypes.bfloat16)
    lin.linear.__wrapped__(x, w) if hasattr(lin.linear, "__wrapped__") else lin.linear(x, w)
    (name, defines), = ran
    assert name == kernel and {d: defines[d] for d in tiles} == tiles and defines["PROGRAMS"] == 132


@pytest.mark.parametrize("m,k,n,kernel,tiles", [
    (4096, 2048, 2304, "linear_persistent_tma3", dict(BM=128, BC=64, BK=64, STAGES=4)),  # 1.01x cuBLAS (session 19)
    (511, 13824, 5120, "linear_persistent_tma5", dict(BM=128, BC=32, BK=64, STAGES=4)),  # 1.02x
    (4096, 2048, 2560, "linear_persistent_tma", dict(BM=128, BN=128, BK=64, STAGES=4)),  # 0.97x
    (4096, 2048, 2300, "linear_persistent", dict(BM=128, BN=128, BK=64, STAGES=4))])  # N % 8 != 0: register stores
def test_linear_defaults_take_the_measured_fastest_kernels(monkeypatch, m, k, n, kernel, tiles):
    """With the defaults, `linear` on the GPU launches the kernel the H200 run of session 19 measured fastest at these
    shapes (benchmarks/bench_tma_store.py), one launch, PROGRAMS = the SM count."""
    import importlib

    lin = importlib.import_module("tilex.stdlib.linear")
    L = lin.L
    ran, loaded = [], []
    monkeypatch.setattr(L, "kind_of", lambda *a: "torch")
    monkeypatch.setattr(L, "sm_count", lambda x: 132)
    real_load = L.load
    monkeypatch.setattr(L, "load", lambda *a, **d: loaded.append(d) or real_load(*a, **d))
    monkeypatch.setattr(L, "run", lambda mod, name, *args, **kw: ran.append((name, loaded[-1])))
    monkeypatch.setattr(lin, "_tuned", lambda kernel, dt, m, n, k, default, **s: dict(default))
    x, w = np.zeros((m, k), ml_dtypes.bfloat16), np.zeros((n, k), ml_dtypes.bfloat16)
    lin.linear.__wrapped__(x, w) if hasattr(lin.linear, "__wrapped__") else lin.linear(x, w)
    (name, defines), = ran
    assert name == kernel and {d: defines[d] for d in tiles} == tiles and defines["PROGRAMS"] == 132


def test_tma3_prediction_counts_tile_rounds(monkeypatch):
    """persistent3 is predicted from the persistent kernel's time per 128-column tile round: 384 tiles of 128x192
    (3 rounds of 1.5) beat 576 of 128x128 (5 rounds) at M=4096 N=2304, not 448 against 640 at N=2560 (4 x 1.5 > 5)."""
    import importlib

    lin = importlib.import_module("tilex.stdlib.linear")
    per = dict(BM=128, BN=128)
    assert lin._tma3_us(4096, 2304, per, 50.0) == pytest.approx(50.0 / 5 * 3 * 1.5)
    assert lin._tma3_us(4096, 2560, per, 50.0) > 50.0
    # from a 128x256 prediction: M=511 N=5120, 80 tiles in one round (2 columns of 128) against 108 (1.5)
    assert lin._tma3_us(511, 5120, dict(BM=128, BN=256), 140.0) == pytest.approx(140.0 / 2 * 1.5)
    monkeypatch.setattr(lin, "_TMA3", True)
    assert lin.path_choice("linear", "bf16", 4096, 2304, 2048)[0] == "persistent3"
    assert lin.path_choice("linear", "bf16", 4096, 2560, 2048)[0] == "persistent"


def test_tma5_prediction_counts_tile_rounds(monkeypatch):
    """128x160 tiles: M=511 N=5120 is 128 tiles in one round (1.25 columns of 128) against 80 of 128x256 in one round
    of 2 and 108 of 128x192 (1.5); at M=4096 N=2304 its 480 tiles take 4 rounds (5 units) against 128x192's 4.5."""
    import importlib

    lin = importlib.import_module("tilex.stdlib.linear")
    assert lin._tma3_us(511, 5120, dict(BM=128, BN=256), 140.0, 160) == pytest.approx(140.0 / 2 * 1.25)
    assert lin._tma3_us(4096, 2304, dict(BM=128, BN=128), 50.0, 160) == pytest.approx(50.0 / 5 * 4 * 1.25)
    monkeypatch.setattr(lin, "_TMA3", True)
    monkeypatch.setattr(lin, "_TMA5", True)
    path, tiles, _, times = lin.path_choice("linear", "bf16", 511, 5120, 13824)
    assert path == "persistent5" and tiles == dict(BM=128, BC=32, BK=64, STAGES=4)
    assert times["persistent5"] < times["persistent3"] < times["persistent"]
    assert lin.path_choice("linear", "bf16", 4096, 2304, 2048)[0] == "persistent3"


def test_five_column_blocks_one_wgmma_register_stores():
    """linear_persistent_tma5: five [128, 32] products as one m64n160 wgmma; 32-column stores are narrower than the
    [64, 64] TMA box, so they leave through registers."""
    _, k = _kernel("linear_persistent_tma5")
    assert kernel_tma_stores(k, k.info.smem_limit) == []
    body = _cuda("linear_persistent_tma5")
    assert "tilex_wgmma_m64n160k16_bf16_k_x5(a0, a1, a2, a3, a4" in body
    assert body.count("tilex_store_quad<") == 5 and "tilex_tma_store_2d(&" not in body


def test_staged_fragment_lands_where_the_tma_box_reads_it():
    """The staging addresses of templates/matmul_wgmma_parts.j2 (tma_store), emulated: every accumulator element a
    consumer warpgroup holds goes, through stmatrix, to the byte at which TMA's 128-byte swizzle reads element
    (row, column) of its [64, 64] box, and no two elements share a byte. Fragment: lane l of warp w holds, in slot
    4 j + 2 i + e, row 16 w + 8 i + l / 4, column 8 j + 2 (l % 4) + e. stmatrix .x4 (matrix q of the pair j, j + 1 is
    i = q % 2, j + q / 2): lane 8 q + r gives row r's address; that row's 8 elements come from lanes 4 r .. 4 r + 3."""
    src = Path(ROOT / "templates" / "matmul_wgmma_parts.j2").read_text()
    assert "tx_row = tx_stg + ((threadIdx.x / 32) % 4 * 16 + tx_ln / 8 % 2 * 8 + tx_ln % 8) * 128" in src
    assert "tx_row + tx_j / 8 * 8192 + (((unsigned)tx_j % 8 + tx_qh) ^ (tx_ln % 8)) * 16" in src
    for cols in (64, 128, 256):
        seen = {}
        for w in range(4):
            for jrel in range(0, cols // 8, 2):  # the round's column-block pairs
                for q in range(4):
                    for r in range(8):
                        lane = 8 * q + r  # this lane gives the row address of matrix q's row r
                        row_addr = ((w * 16 + lane // 8 % 2 * 8 + lane % 8) * 128 + jrel // 8 * 8192
                                    + (((jrel % 8) + lane // 16) ^ (lane % 8)) * 16)
                        for c in range(8):  # element c of that row: lane 4 r + c // 2, half c % 2, register q
                            src_lane = 4 * r + c // 2
                            i, j, e = q % 2, jrel + q // 2, c % 2
                            row = 16 * w + 8 * i + src_lane // 4  # the fragment's (row, column) of that slot
                            col = 8 * j + 2 * (src_lane % 4) + e
                            box, bc = divmod(col, 64)  # TMA SWIZZLE_128B: chunk (2 bc / 16) ^ (row % 8) of row
                            tma = box * 8192 + row * 128 + (((2 * bc) // 16) ^ (row % 8)) * 16 + (2 * bc) % 16
                            assert row_addr + 2 * c == tma, (cols, w, jrel, q, r, c)
                            assert tma not in seen
                            seen[tma] = (row, col)
        assert len(seen) == 64 * cols  # the warpgroup's 64 rows, every column of the round


def test_an_atomic_epilogue_is_not_stored_by_tma():
    """atomic_add into the output after the main loop keeps its atomic (a TMA store would overwrite: the reviewer's
    finding)."""
    k, cuda = _variant_of_tma_kernel("y[m : m + BM, n : n + BN] = acc.to(T)", "atomic_add(y[m : m + BM, n : n + BN], acc.to(T))")
    assert "tilex_tma_store_2d" not in cuda and "tilex_atomic_add" in cuda
