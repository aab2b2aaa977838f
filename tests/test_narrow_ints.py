"""Narrow integers (i8, u8, i16, u16), shifts, `^` and `~` (issue 20 item 4): the interpreter against NumPy and
float64 references, nvcc builds of the feature programs, and (marked gpu) the GPU against the interpreter.

Semantics under test (docs/language.md, "Narrow integers and bit operations"): narrow ints are storage
dtypes, arithmetic on them is done in i32 (C's integer promotion); `.to()` from an int wraps (two's
complement), from a float truncates toward zero and saturates (NaN gives 0); `<<` / `>>` (arithmetic for
signed) by an amount outside [0, width) give 0 / the sign."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tilex
from tilex.diagnostics import CompileError
from tilex.pipeline import Options
from tilex.translate import translate
from tilex.types import DType

ROOT = Path(__file__).resolve().parents[1]
NARROW = {"i8": np.int8, "u8": np.uint8, "i16": np.int16, "u16": np.uint16}

CASTS = """
kernel casts<B: int = 256>(a: i32[N], f: f32[N], i8w: out i8[N], u8w: out u8[N], i16w: out i16[N],
                           u16w: out u16[N], i8s: out i8[N], u8s: out u8[N], i16s: out i16[N], u16s: out u16[N],
                           back: out i32[N])
    grid (cdiv(N, B),)
{
    o = program_id(0) * B
    t = a[o : o + B]
    g = f[o : o + B]
    i8w[o : o + B] = t.to(i8)
    u8w[o : o + B] = t.to(u8)
    i16w[o : o + B] = t.to(i16)
    u16w[o : o + B] = t.to(u16)
    i8s[o : o + B] = g.to(i8)
    u8s[o : o + B] = g.to(u8)
    i16s[o : o + B] = g.to(i16)
    u16s[o : o + B] = g.to(u16)
    back[o : o + B] = t.to(u8).to(i8) + t.to(i16)      # narrow to narrow wraps; the sum is i32
}
"""

BITS = """
kernel bits<B: int = 256>(a: i32[N], s: i32[N], b: u8[N], c: i8[N], l: i64[N],
                          shl: out i32[N], shr: out i32[N], x: out i32[N], lsh: out i64[N], nb: out u8[N])
    grid (cdiv(N, B),)
{
    o = program_id(0) * B
    t = a[o : o + B]
    k = s[o : o + B]
    shl[o : o + B] = t << k
    shr[o : o + B] = t >> k
    u = b[o : o + B]
    v = c[o : o + B]
    x[o : o + B] = (u ^ v) + ~u + (u & 15) * 3 - (v >> 2) + (u | 1) + (1 << 4)
    lsh[o : o + B] = (l[o : o + B] << k) ^ (l[o : o + B] >> 3)
    nb[o : o + B] = (u + u).to(u8)                      # u8 + u8 is i32: 510 then wraps to 254 only in .to
}
"""


def _shift(a, s, bits, left):
    """The defined semantics, one element at a time with Python ints."""
    out = []
    for x, k in zip(a.tolist(), s.tolist()):
        if 0 <= k < bits:
            r = x << k if left else x >> k
        else:
            r = 0 if left else (-1 if x < 0 else 0)
        r &= (1 << bits) - 1
        out.append(r - (1 << bits) if r >> (bits - 1) else r)
    return np.array(out, dtype=np.int64)


def _casts_inputs(rng, n):
    a = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    a[:6] = [0, -1, 127, 128, 255, 65535][:n]
    f = (rng.standard_normal(n) * 40000).astype(np.float32)
    f[:8] = [np.nan, np.inf, -np.inf, 127.9, -128.9, 255.5, -0.5, 1e10][:n]
    outs = {f"{d}{k}": np.zeros(n, NARROW[d]) for d in NARROW for k in "ws"}
    outs["back"] = np.zeros(n, np.int32)
    return dict(a=a, f=f), outs


def _float_to(dt, f):
    info = np.iinfo(dt)
    t = np.trunc(np.nan_to_num(f.astype(np.float64), nan=0.0, posinf=info.max, neginf=info.min))
    return np.clip(t, info.min, info.max).astype(dt)


@pytest.mark.parametrize("n", [1, 300, 1024])
def test_casts_wrap_from_ints_and_saturate_from_floats(n):
    rng = np.random.default_rng()
    ins, outs = _casts_inputs(rng, n)
    tilex.compile(CASTS).interp("casts", **ins, **outs)
    for d, npdt in NARROW.items():
        assert np.array_equal(outs[f"{d}w"], ins["a"].astype(npdt)), d  # NumPy's astype wraps
        assert np.array_equal(outs[f"{d}s"], _float_to(npdt, ins["f"])), d
    want = ins["a"].astype(np.uint8).astype(np.int8).astype(np.int64) + ins["a"].astype(np.int16)
    assert np.array_equal(outs["back"], want)


@pytest.mark.parametrize("n", [1, 257, 1000])
def test_shifts_xor_invert(n):
    rng = np.random.default_rng()
    a = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    s = rng.integers(-40, 72, n).astype(np.int32)
    b = rng.integers(0, 256, n).astype(np.uint8)
    c = rng.integers(-128, 128, n).astype(np.int8)
    l = rng.integers(-2**63, 2**63, n, dtype=np.int64)
    outs = dict(shl=np.zeros(n, np.int32), shr=np.zeros(n, np.int32), x=np.zeros(n, np.int32),
                lsh=np.zeros(n, np.int64), nb=np.zeros(n, np.uint8))
    tilex.compile(BITS).interp("bits", a=a, s=s, b=b, c=c, l=l, **outs)
    assert np.array_equal(outs["shl"], _shift(a, s, 32, True))
    assert np.array_equal(outs["shr"], _shift(a, s, 32, False))
    u, v = b.astype(np.int64), c.astype(np.int64)
    assert np.array_equal(outs["x"], (u ^ v) + ~u + (u & 15) * 3 - (v >> 2) + (u | 1) + 16)
    lsh = _shift(l, s, 64, True) ^ (l >> 3)
    assert np.array_equal(outs["lsh"], lsh)
    assert np.array_equal(outs["nb"], (2 * u).astype(np.uint8))


def test_dtypes_of_narrow_arithmetic():
    from tilex.explain import dump_ir
    from tilex.pipeline import compile_program

    text = dump_ir(compile_program(BITS, "b.tile", Options(), stop_after="infer_dtypes"))
    assert "(u ^ v) + ~u" in text
    src = """kernel k(b: u8[N], c: i8[N], y: out u8[N], z: out i16[N]) grid (1,) {
        t = b[0 : 16]
        y[0 : 16] = where(t > 3, t, max(t, b[16 : 32]))      # selections keep u8
        z[0 : 16] = where(t > 3, t, c[0 : 16])                # u8 with i8: i16
    }"""
    translate(src, "k.tile", Options())
    for bad, msg in [("y[0 : 16] = t + t", "storing i32 into y: u8"),
                     ("y[0 : 16] = t << 1.0", "'<<' needs integer operands, got u8 and f32"),
                     ("y[0 : 16] = ~(t > 1)", "'~' needs an integer, got bool; use 'not'"),
                     ("y[0 : 16] = (t.to(f32) >> 1).to(u8)", "'>>' needs integer operands")]:
        with pytest.raises(CompileError, match=msg):
            translate(f"kernel k(b: u8[N], y: out u8[N]) grid (1,) {{ t = b[0 : 16]\n {bad} }}", "k.tile", Options())


def _gemv_inputs(rng, n, k):
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    q = rng.integers(-8, 8, (n, k)).astype(np.int8)
    k2 = k // 2
    packed = ((q[:, :k2] & 15) | ((q[:, k2:] & 15) << 4)).astype(np.uint8)
    scale = (rng.random(n) / 64).astype(np.float32)
    x = rng.standard_normal(k).astype(np.float16)
    return w, q, packed, scale, x


@pytest.mark.parametrize("n,k", [(1, 2), (77, 300), (256, 4096)])
def test_int8_and_int4_gemv_against_float64(n, k):
    rng = np.random.default_rng()
    w, q, packed, scale, x = _gemv_inputs(rng, n, k)
    for kernel, weights, wq in (("gemv_int8", w, w), ("gemv_int4", packed, q)):
        y = np.full(n, np.nan, np.float16)
        tilex.compile(str(ROOT / "examples" / f"{kernel}.tile")).interp(kernel, weights, scale, x, y)
        ref = (wq.astype(np.float64) * scale[:, None]) @ x.astype(np.float64)
        err = np.max(np.abs(y.astype(np.float64) - ref)) / np.max(np.abs(ref))
        assert err <= 2e-3, (kernel, err)  # f16 output: 2^-11 relative rounding, f32 accumulation


def test_scalar_narrow_parameters_are_range_checked():
    from tilex.diagnostics import LaunchError

    src = "kernel k(x: u8[N], y: out u8[N], add: u8) grid (1,) { y[0 : 8] = (x[0 : 8] + add).to(u8) }"
    mod = tilex.compile(src)
    x, y = np.arange(8, dtype=np.uint8) * 40, np.zeros(8, np.uint8)
    mod.interp("k", x, y, add=200)
    assert np.array_equal(y, (x.astype(np.int64) + 200).astype(np.uint8))
    with pytest.raises(LaunchError, match="256 does not fit in u8"):
        mod.interp("k", x, y, add=256)


# ---------------------------------------------------------------- nvcc
FEATURES = {"casts": CASTS, "bits": BITS, **{k: (ROOT / "examples" / f"{k}.tile").read_text() for k in ("gemv_int8", "gemv_int4")}}


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name", sorted(FEATURES))
def test_feature_programs_build(name, arch, tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(translate(FEATURES[name], f"{name}.tile", Options(arch=arch)).cuda)
    flags = ["-gencode=arch=compute_90a,code=sm_90a"] if arch == "sm_90a" else ["-arch=sm_80"]
    r = subprocess.run(["nvcc", "-cubin", *flags, str(cu), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


# ---------------------------------------------------------------- GPU == interpreter
def _gpu_vs_interp(src, kernel, ins, outs):
    import cupy as cp

    mod = tilex.compile(src)
    d_out = {k: cp.asarray(v) for k, v in outs.items()}
    getattr(mod, kernel)(**{k: cp.asarray(v) for k, v in ins.items()}, **d_out)
    mod.interp(kernel, **ins, **outs)
    return {k: cp.asnumpy(v) for k, v in d_out.items()}


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 300, 100003])
def test_gpu_casts_and_bits_equal_the_interpreter(n):
    rng = np.random.default_rng(n)
    ins, outs = _casts_inputs(rng, n)
    gpu = _gpu_vs_interp(CASTS, "casts", ins, outs)
    for k in outs:
        assert np.array_equal(gpu[k], outs[k]), k
    ins = dict(a=rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32), s=rng.integers(-40, 72, n).astype(np.int32),
               b=rng.integers(0, 256, n).astype(np.uint8), c=rng.integers(-128, 128, n).astype(np.int8),
               l=rng.integers(-2**63, 2**63, n, dtype=np.int64))
    outs = dict(shl=np.zeros(n, np.int32), shr=np.zeros(n, np.int32), x=np.zeros(n, np.int32),
                lsh=np.zeros(n, np.int64), nb=np.zeros(n, np.uint8))
    gpu = _gpu_vs_interp(BITS, "bits", ins, outs)
    for k in outs:
        assert np.array_equal(gpu[k], outs[k]), k


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(1, 2), (77, 300), (4096, 4096)])
def test_gpu_gemv_int8_int4(n, k):
    rng = np.random.default_rng(n + k)
    w, q, packed, scale, x = _gemv_inputs(rng, n, k)
    for kernel, weights, wq in (("gemv_int8", w, w), ("gemv_int4", packed, q)):
        outs = dict(y=np.full(n, np.nan, np.float16))
        gpu = _gpu_vs_interp(str(ROOT / "examples" / f"{kernel}.tile"), kernel, dict(w=weights, scale=scale, x=x), outs)
        ref = (wq.astype(np.float64) * scale[:, None]) @ x.astype(np.float64)
        assert np.max(np.abs(gpu["y"].astype(np.float64) - ref)) / np.max(np.abs(ref)) <= 2e-3, kernel
        assert np.max(np.abs(gpu["y"].astype(np.float64) - outs["y"])) / np.max(np.abs(ref)) <= 1e-3, kernel
