"""The guarded (unproven row pitch) mma main loop: shifted cp.async rings (templates/tilex_shift.cuh).

CPU tier: the shipped helpers' text (`tilex_row_shift`, `tilex_rows_unaligned`, `tilex_tile_to_smem_shifted`,
`tilex_tile_unshift`) is compiled for the host with g++ against a mock of cp.async that checks every read lies
inside the tensor and is 16-byte aligned; every thread of a block runs in turn (the copy, then the re-alignment,
as the ring does between its barriers) and the re-aligned tile must equal the tensor's tile with zeros outside it,
for odd pitches, unaligned bases, edge tiles and aligned ones. Plus: the generated CUDA of a guarded matmul
keeps the pipelined ring (no synchronous element loads in the main loop) and builds with nvcc for sm_90a,
and the plan reserves the re-aligned stage only where a pitch is unproven.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tilex.pipeline import Options
from tilex.translate import translate

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "templates" / "tilex_shift.cuh"
FUNCS = ("tilex_row_shift", "tilex_rows_unaligned", "tilex_tile_to_smem_shifted", "tilex_tile_unshift")


def _function_text(src: str, name: str) -> str:
    """The template declaration and body of device function `name` in `src` (braces matched)."""
    m = re.search(r"template <[^>]*>\s*__device__ __forceinline__ [^\n]*\b" + name + r"\(", src)
    assert m, f"{name} not found in {HEADER}"
    i = src.index("{", m.end())
    depth = 0
    for j in range(i, len(src)):
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        if depth == 0:
            return src[m.start(): j + 1]
    raise AssertionError(name)


HARNESS = r"""
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#define __device__
#define __forceinline__ inline
#define __restrict__
struct Dim { int x; } threadIdx;
struct uint4 { unsigned x, y, z, w; };
struct Elem { unsigned short bits; };
static unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
  return (unsigned)((((unsigned long long)hi << 32) | lo) >> (sh & 31));
}
static const char* g_lo; static const char* g_hi; static int g_bad = 0;
static void tilex_cp_async16_part(void* smem, const void* gmem, unsigned bytes) {
  const char* p = (const char*)gmem;
  if (((uintptr_t)p & 15) || bytes > 16 || (bytes && (p < g_lo || p + bytes > g_hi))) ++g_bad;
  unsigned char buf[16] = {0};
  if (bytes) memcpy(buf, p, bytes);
  memcpy(smem, buf, 16);
}
%FUNCS%
// argv: ROWS COLS fixed at compile time; runtime: pitch ld, nrows, ncols, r0, c0, base offset (elements)
int main(int argc, char** argv) {
  long long ld = atoll(argv[1]), nrows = atoll(argv[2]), ncols = atoll(argv[3]), r0 = atoll(argv[4]),
            c0 = atoll(argv[5]), off = atoll(argv[6]);
  const long long n_el = (nrows - 1) * ld + ncols;  // the tensor's span
  char* mem = (char*)aligned_alloc(64, (size_t)(n_el + off + 64) * 2 + 64);
  Elem* g = (Elem*)mem + off;
  for (long long i = 0; i < n_el; ++i) g[i].bits = (unsigned short)(1 + (i * 7919) % 65000);
  g_lo = (const char*)g; g_hi = (const char*)(g + n_el);
  static Elem raw[H_ROWS * H_LDS], dst[H_ROWS * H_LDS];
  memset(raw, 0xff, sizeof raw); memset(dst, 0xff, sizeof dst);
  for (int t = 0; t < H_THREADS; ++t) { threadIdx.x = t;
    tilex_tile_to_smem_shifted<H_ROWS, H_COLS, H_LDS, H_THREADS>(raw, g, r0, c0, nrows, ncols, ld); }
  for (int t = 0; t < H_THREADS; ++t) { threadIdx.x = t;
    tilex_tile_unshift<H_ROWS, H_COLS, H_LDS, H_LDS, H_THREADS>(dst, raw, g, r0, c0, ld); }
  int wrong = 0;
  for (int r = 0; r < H_ROWS; ++r) for (int c = 0; c < H_COLS; ++c) {
    long long gr = r0 + r, gc = c0 + c;
    unsigned short want = (gr >= 0 && gr < nrows && gc >= 0 && gc < ncols) ? g[gr * ld + gc].bits : 0;
    if (dst[r * H_LDS + c].bits != want) ++wrong;
  }
  printf("%d %d %d\n", wrong, g_bad, (int)tilex_rows_unaligned(g, r0, c0, ld));
  return 0;
}
"""

CASES = [  # ld, nrows, ncols, r0, c0, base offset in elements
    (1001, 70, 1001, 0, 0, 0), (1001, 70, 1001, 64, 992, 0), (1001, 70, 1001, 32, 960, 3),
    (999, 40, 999, 0, 0, 1), (999, 40, 999, 16, 64, 7), (4001, 33, 4001, 32, 3968, 5),
    (1024, 50, 1024, 0, 0, 0), (1024, 50, 1000, 48, 992, 0), (13, 9, 13, 0, 0, 1), (7, 3, 5, 0, 0, 3),
    (2051, 64, 2048, 32, 2016, 6),
]


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found")
    src = HEADER.read_text(encoding="utf-8")
    text = HARNESS.replace("%FUNCS%", "\n".join(_function_text(src, f) for f in FUNCS))
    d = tmp_path_factory.mktemp("shifted")
    exes = {}
    (d / "h.cpp").write_text(text, encoding="utf-8")
    for rows, cols, threads in ((64, 32, 128), (32, 128, 128), (16, 64, 96)):
        exe = d / f"h{rows}x{cols}"
        subprocess.run([gxx, "-O1", "-std=c++17", f"-DH_ROWS={rows}", f"-DH_COLS={cols}", f"-DH_LDS={cols + 8}",
                        f"-DH_THREADS={threads}", str(d / "h.cpp"), "-o", str(exe)], check=True, capture_output=True)
        exes[(rows, cols)] = exe
    return exes


@pytest.mark.parametrize("tile", [(64, 32), (32, 128), (16, 64)])
@pytest.mark.parametrize("case", CASES)
def test_shifted_copy_realigns_exactly_and_reads_only_the_tensor(harness, tile, case):
    out = subprocess.run([str(harness[tile]), *map(str, case)], check=True, capture_output=True, text=True).stdout
    wrong, bad, unaligned = map(int, out.split())
    assert wrong == 0, f"{wrong} elements of the re-aligned {tile} tile differ from the tensor's"
    assert bad == 0, f"{bad} cp.async reads outside the tensor or unaligned"
    ld, _, _, r0, c0, off = case
    assert bool(unaligned) == bool((off + r0 * ld + c0) % 8 or ld % 8)


def _cuda(defines, assume=()):
    src = (ROOT / "examples" / "matmul.tile").read_text(encoding="utf-8")
    return translate(src, "examples/matmul.tile", Options(arch="sm_90a", defines=defines, assume=assume))


def test_guarded_matmul_keeps_an_asynchronous_ring():
    t = _cuda(dict(BM=64, BN=128, BK=32, STAGES=3))
    cu = t.cuda
    assert "mma.sync" in cu or "tilex_mma16816" in cu
    assert "tilex_tile_to_smem_shifted<64, 32, 40, 128>(" in cu and "tilex_tile_to_smem_shifted<32, 128, 136, 128>(" in cu
    assert "tilex_tile_unshift<64, 32, 40, 40, 128>(tx_fix" in cu
    # the re-aligned stage is reserved: 3 ring stages + 1
    per_stage = (64 * 40 + 32 * 136) * 2
    assert t.specs["matmul"].smem_bytes >= 4 * per_stage


def test_proven_pitches_keep_the_direct_ring():
    src = """
kernel mm<BM: int = 64, BN: int = 128, BK: int = 32>(a: bf16[M, K], b: bf16[K, N], c: out bf16[M, N])
    where K % 8 == 0, N % 8 == 0
    grid (cdiv(M, BM), cdiv(N, BN))
{
    acc = zeros(f32[BM, BN])
    for k in pipeline(0, K, BK, stages = 3) {
        acc += a[program_id(0) * BM : program_id(0) * BM + BM, k : k + BK] @ b[k : k + BK, program_id(1) * BN : program_id(1) * BN + BN]
    }
    c[program_id(0) * BM : program_id(0) * BM + BM, program_id(1) * BN : program_id(1) * BN + BN] = acc.to(bf16)
}
"""
    t = translate(src, "mm.tile", Options(arch="sm_80"))
    assert "tilex_tile_to_smem<64, 32, 40, 128>" in t.cuda
    assert "shifted" not in t.cuda.split("extern \"C\"")[-1]
    assert t.specs["mm"].smem_bytes == 3 * (64 * 40 + 32 * 136) * 2


@pytest.mark.nvcc
def test_guarded_matmul_builds_for_sm90a(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found")
    for defines in (dict(BM=64, BN=128, BK=32, STAGES=3), dict(BM=128, BN=128, BK=64, STAGES=3)):
        (tmp_path / "k.cu").write_text(_cuda(defines).cuda, encoding="utf-8")
        p = subprocess.run([nvcc, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "k.cu", "-o", "k.cubin"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]


def test_interpreter_matches_numpy_at_odd_sizes():
    """matmul.tile as shipped (tiles chosen by tilex) at odd sizes in the interpreter vs NumPy float64."""
    import ml_dtypes

    import tilex

    mod = tilex.compile(str(ROOT / "examples" / "matmul.tile"), arch="sm_90a")
    rng = np.random.default_rng(17)
    for m, n, k in ((37, 29, 51), (1, 70, 33), (65, 3, 130)):
        a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
        c = np.zeros((m, n), ml_dtypes.bfloat16)
        mod.interp("matmul", a, b, c)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = np.abs(c.astype(np.float64) - ref).max() / np.abs(ref).max()
        assert err < 1e-2, (m, n, k, err)
