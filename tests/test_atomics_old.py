"""Atomics that return the old values (`old = atomic_add(t[...], v)`; issue 20): the interpreter against a NumPy
serial model and checks that hold for any valid order (a ticket counter's olds are a permutation of 0..n-1), the
compile-time errors of misuse, the generated CUDA, and nvcc builds. The GPU runs are tests/test_atomics_old_gpu.py."""
from __future__ import annotations

import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

import tilex
from tilex.diagnostics import CompileError
from tilex.interp_atomic import atomic_fetch
from tilex.pipeline import Options
from tilex.translate import translate
from tilex.types import DType

from atomic_old_programs import (CAS_MAX, LAST_DONE, OPS_OLD, SLOT_CLAIM, TICKET, check_cas_max, check_claim,
                                 check_ops_olds, check_ticket)

RNG = np.random.default_rng()


def compiled(src):
    return tilex.compile(src, cache_dir=False)


# ---- the interpreter's serial order against a NumPy model, element by element
def serial_model(start, flat_idx, op, v, compare=None):
    """Each update in element order on a copy of `start`; (final, olds)."""
    cur, olds = start.copy(), []
    for k, j in enumerate(flat_idx):
        olds.append(cur[j])
        if op == "add":
            cur[j] = cur[j] + v[k]
        elif op == "max":
            cur[j] = max(cur[j], v[k])
        elif op == "min":
            cur[j] = min(cur[j], v[k])
        elif op == "xchg":
            cur[j] = v[k]
        elif op == "cas" and cur[j] == compare[k]:
            cur[j] = v[k]
    return cur, np.array(olds, dtype=start.dtype)


@pytest.mark.parametrize("op", ["add", "max", "min", "xchg", "cas"])
@pytest.mark.parametrize("dt", [DType.I32, DType.I64, DType.F32])
def test_atomic_fetch_is_one_serial_order(op, dt):
    np_dt = {DType.I32: np.int32, DType.I64: np.int64, DType.F32: np.float32}[dt]
    n, k = 2000, 7
    idx = RNG.integers(0, k, n)
    v = (RNG.integers(-50, 50, n) if dt.is_int else RNG.standard_normal(n)).astype(np_dt)
    start = (RNG.integers(-50, 50, k) if dt.is_int else RNG.standard_normal(k)).astype(np_dt)
    compare = None
    if op == "cas":  # expect the start value for half the lanes, so some succeed and chains form
        compare = np.where(RNG.random(n) < 0.5, start[idx], v).astype(np_dt)
    view = start.copy()
    olds = atomic_fetch(view, (idx,), op, v, compare, dt)
    want_final, want_olds = serial_model(start, idx, op, v, compare)
    if dt.is_int or op != "add":
        np.testing.assert_array_equal(olds, want_olds)
        np.testing.assert_array_equal(view, want_final)
    else:
        np.testing.assert_allclose(olds, want_olds, rtol=1e-5, atol=1e-5)


def test_atomic_fetch_int_add_wraps():
    view = np.array([2**31 - 2], np.int32)
    olds = atomic_fetch(view, (np.zeros(4, np.int64),), "add", np.ones(4, np.int32), None, DType.I32)
    assert olds.tolist() == [2**31 - 2, 2**31 - 1, -2**31, -2**31 + 1] and view[0] == -2**31 + 2


# ---- the programs on the interpreter
@pytest.mark.parametrize("n", [1, 255, 1003, 20_000])
def test_ticket_counter_olds_are_a_permutation(n):
    c, s, b, bs = np.zeros(1, np.int32), np.zeros(n, np.int32), np.zeros(1, np.int64), np.zeros(n, np.int64)
    compiled(TICKET).interp("ticket", c, s, b, bs)
    check_ticket(c, s, b, bs, n)
    np.testing.assert_array_equal(s, np.arange(n))  # the interpreter's order: programs, then elements, in order


def test_cas_loop_max_of_f32_bits():
    n = 5003
    xb = RNG.standard_normal(n).astype(np.float32).view(np.int32)
    best = np.array([-np.inf], np.float32).view(np.int32).copy()
    left = np.zeros(-(-n // 128), np.int32)
    compiled(CAS_MAX).interp("cas_max", xb, best, left)
    check_cas_max(xb, best, left)


def test_last_program_done_sums_split_k():
    m, n, k = 67, 45, 250
    a, b = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
    ws, count = np.zeros((4, m, n), np.float32), np.zeros(8, np.int32)
    c = np.full((m, n), np.nan, np.float32)
    compiled(LAST_DONE).interp("splitk_last", a, b, ws, count, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    assert not count.any()  # the last of each tile reset its count


def test_lock_free_slot_claim():
    n = 5003
    keys = RNG.integers(0, 3000, n).astype(np.int32)
    table, where_ = np.full(8192, -1, np.int32), np.zeros(n, np.int32)
    left = np.zeros(-(-n // 128), np.int32)
    compiled(SLOT_CLAIM).interp("claim", keys, table, where_, left)
    check_claim(keys, table, where_, left)


def ops_inputs(r, n=1001, k=5, c=32):
    ids = r.integers(-1, k + 1, n).astype(np.int32)
    x = r.standard_normal((n, c)).astype(np.float32)
    start = dict(ya=r.standard_normal((k, c)).astype(np.float32), yb=np.zeros((k, c), ml_dtypes.bfloat16),
                 yh=np.zeros((k, c), np.float16), mx=r.standard_normal(k).astype(np.float32),
                 mi=np.full(k, 10**6, np.int32), xi=r.integers(-100, -50, k).astype(np.int32))
    outs = dict(oa=np.zeros((n, c), np.float32), ob=np.zeros((n, c), ml_dtypes.bfloat16),
                oh=np.zeros((n, c), np.float16), omx=np.zeros(n, np.float32), omi=np.zeros(n, np.int32),
                oxi=np.zeros(n, np.int32), first=np.full(1, -1, np.int32), ofirst=np.zeros(-(-n // 64), np.int32))
    return ids, x, start, outs


def test_every_op_and_dtype_returns_its_olds():
    ids, x, start, outs = ops_inputs(RNG)
    end = {k: v.copy() for k, v in {**start, **outs}.items()}
    compiled(OPS_OLD).interp("ops_old", ids=ids, x=x, **end)
    check_ops_olds(ids, x, start, end, serial=True)


# ---- misuse
ERRORS = {
    "in an expression": ("kernel k(c: out i32[N])\n    grid (1,)\n{\n    x = atomic_add(c[0], 1) + 1\n    c[1] = x\n}",
                         "atomic_add() is a statement: its old values can only be assigned"),
    "augmented": ("kernel k(c: out i32[N])\n    grid (1,)\n{\n    x = 0\n    x += atomic_add(c[0], 1)\n    c[1] = x\n}",
                  "atomic_add() is a statement"),
    "masked lanes": ("kernel k<B: int = 64>(c: out i32[N])\n    grid (1,)\n{\n    a = arange(0, B)\n"
                     "    old = atomic_add(c[a, mask = a < 5], 1)\n    c[a] = old\n}",
                     "'old' would hold old values of elements that atomic_add() skips (mask="),
    "index tile": ("kernel k<B: int = 64>(ids: i32[N], c: out i32[N])\n    grid (1,)\n{\n"
                   "    old = atomic_add(c[ids[0 : B]], 1)\n}",
                   "skips (an index tile"),
    "register tile": ("kernel k<B: int = 64>(c: out i32[N])\n    grid (1,)\n{\n    acc = zeros(i32[B])\n"
                      "    old = atomic_add(acc, 1)\n}", "'acc' is a local"),
    "dtype of the variable": ("kernel k(c: out i32[N], f: out f32[N])\n    grid (1,)\n{\n    old = f[0]\n"
                              "    old = atomic_add(c[0], 1)\n}", "'old' holds f32 (from line 4) but is assigned the old"),
    "shape of the variable": ("kernel k<B: int = 64>(c: out i32[N])\n    grid (1,)\n{\n    old = c[0 : B]\n"
                              "    old = atomic_add(c[0], 1)\n}", "'old' has shape [64] (from line 4)"),
    "other= dtype": ("kernel k<B: int = 64>(c: out i32[N], f: f32[N])\n    grid (1,)\n{\n"
                     "    old = atomic_add(c[0 : B, other = f[0]], 1)\n}", "other= of 'c' (i32) is f32"),
    "other= on a store": ("kernel k<B: int = 64>(c: out i32[N])\n    grid (1,)\n{\n    c[0 : B, other = 1] = 2\n}",
                          "other= applies to reads of a tensor (and to the old values"),
    "fence value": ("kernel k(c: out i32[N])\n    grid (1,)\n{\n    x = fence()\n}", "fence() is a statement"),
    "fence args": ("kernel k(c: out i32[N])\n    grid (1,)\n{\n    fence(1)\n}", "fence() takes no arguments"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_misuse_is_a_compile_error(case):
    src, message = ERRORS[case]
    with pytest.raises(CompileError) as e:
        tilex.compile(src, cache_dir=False)
    assert message in str(e.value), str(e.value)


def test_old_of_a_fn_helper_is_renamed_apart():
    src = """
fn take(c, n) {
    old = atomic_add(c[0], n)
    return old
}

kernel k(c: out i32[N], y: out i32[N])
    grid (4,)
{
    old = 100
    a = take(c, 1)
    b = take(c, 2)
    y[program_id(0) * 2 + 1] = a + old
    y[program_id(0) * 2 + 2] = b
}
"""
    c, y = np.zeros(16, np.int32), np.zeros(16, np.int32)
    compiled(src).interp("k", c, y)
    assert c[0] == 12 and y[1:9:2].tolist() == [100, 103, 106, 109] and y[2:10:2].tolist() == [1, 4, 7, 10]


# ---- generated CUDA
def test_cuda_hands_olds_to_replicas_and_scalars_through_shared_memory():
    cu = translate(TICKET, "ticket.tile", Options(arch="sm_90a")).cuda  # 32 threads, 8 lanes each: no replicas
    assert "tilex_atomic_fetch_add(&counter[" in cu and "the old values of" not in cu
    cu = translate(CAS_MAX, "cas.tile", Options(arch="sm_90a")).cuda  # key(mine) > key(cur) has replicas
    assert "tilex_atomic_fetch_cas(&best[" in cu and "the old values of old to every thread" in cu
    cu = translate(LAST_DONE, "last.tile", Options(arch="sm_90a")).cuda
    body = cu[cu.index("done = atomic_add"):]
    assert body.index("__syncthreads();") < body.index("tilex_atomic_fetch_add(&count[") < \
        body.index("int done = reinterpret_cast<const int*>(tilex_smem)[0];")
    assert cu.count("__threadfence();") == 2
    fence = body.index("__threadfence();")  # the acquire side: a barrier after the fence, before any thread reads
    assert "__syncthreads();" in body[fence:fence + 80]


def test_cuda_packed_pairs_return_both_olds():
    cu = translate(OPS_OLD, "ops.tile", Options(arch="sm_90a")).cuda
    assert "tilex_atomic_fetch_add_pair(yb + (" in cu and "tilex_atomic_fetch_add_pair(yh + (" in cu
    assert "atom.relaxed.gpu.global.add.noftz.bf16x2" in cu


def test_statement_atomics_are_unchanged():
    """An atomic without a result still uses red (no returned value) and needs no fetch helpers."""
    from test_atomics import HIST

    cu = translate(HIST, "hist.tile", Options(arch="sm_90a")).cuda
    assert "tilex_atomic_fetch" not in cu and "tilex_atomic_add(&counts[" in cu


FEATURES = {"ticket": TICKET, "cas_max": CAS_MAX, "last_done": LAST_DONE, "claim": SLOT_CLAIM, "ops_old": OPS_OLD}


@pytest.mark.nvcc
@pytest.mark.parametrize("arch, flags", [("sm_90a", ["-gencode=arch=compute_90a,code=sm_90a"]),
                                         ("sm_80", ["-arch=sm_80"])])
@pytest.mark.parametrize("name", sorted(FEATURES))
def test_programs_build_with_nvcc(name, arch, flags, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found on PATH")
    cu = tmp_path / f"{name}.cu"
    cu.write_text(translate(FEATURES[name], f"{name}.tile", Options(arch=arch)).cuda)
    r = subprocess.run([nvcc, "-cubin", *flags, "-o", str(tmp_path / "k.cubin"), str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


def test_other_on_an_augmented_store_fills_its_read():
    """`x[..., other = v] += e` compiles as before this session (other= fills the read half; the store skips the
    elements outside the tensor), and the interpreter agrees with NumPy at a size that is no multiple of the tile."""
    src = """kernel k<B: int = 64>(x: out f32[N], y: f32[N]) grid (cdiv(N, B),) {
    i = program_id(0) * B
    x[i : i + B, other = 0.0] += y[i : i + B, other = 0.0]
}
"""
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal(1001).astype(np.float32), rng.standard_normal(1001).astype(np.float32)
    want = x.astype(np.float64) + y
    tilex.compile(src, cache_dir=False).interp("k", x=x, y=y)
    np.testing.assert_allclose(x, want, rtol=1e-6)
    assert "__global__" in translate(src, "aug.tile", Options(arch="sm_90a")).cuda
