"""Dtype parameters (`<T: dtype = bf16>`, issue 20 item 2): usable where a dtype is written, overridable by
-D / tilex.compile keywords, bound by the runtime from the arguments' dtypes; checked on the interpreter
against float64 NumPy."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilex
from tilex.diagnostics import CompileError, LaunchError
from tilex.pipeline import Options
from tilex.translate import translate

SCALE = """
kernel scale<T: dtype = bf16, BLOCK: int = 256>(x: T[N], w: T[N], y: out T[N], a: f32)
    grid (cdiv(N, BLOCK),)
{
    i = program_id(0) * BLOCK
    acc = zeros(f32[BLOCK])
    one = full(T[BLOCK], 1.0)
    acc += x[i : i + BLOCK].to(f32) * a + w[i : i + BLOCK].to(f32) * one.to(f32)
    y[i : i + BLOCK] = acc.to(T)
}
"""

NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
TOL = {"f16": 1e-3, "bf16": 8e-3, "f32": 1e-6}


def _ref(x, w, a):
    return x.astype(np.float64) * a + w.astype(np.float64)


@pytest.mark.parametrize("dt", ["f16", "bf16", "f32"])
def test_bound_from_the_arguments(dt):
    rng = np.random.default_rng()
    n = 1000
    x, w = (rng.standard_normal(n).astype(NP[dt]) for _ in range(2))
    y = np.zeros(n, NP[dt])
    mod = tilex.compile(SCALE)
    mod.interp("scale", x, w, y, a=0.75)
    ref = _ref(x, w, 0.75)
    assert y.dtype == NP[dt]
    err = np.max(np.abs(y.astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert err <= TOL[dt], err


def test_each_binding_is_its_own_translation():
    mod = tilex.compile(SCALE)
    k = mod.kernel("scale")
    f16 = k.module_for((np.zeros(4, np.float16),) * 3, {})
    f32 = k.module_for((np.zeros(4, np.float32),) * 3, {})
    assert f16.specs["scale"].params[0].dtype == "f16" and f32.specs["scale"].params[2].dtype == "f32"
    assert "tilex_store_chunk<8, tilex_f16" in f16.cuda and "tilex_store_chunk<8, tilex_f16" not in f32.cuda
    assert k.module_for((np.zeros(8, np.float16),) * 3, {}) is f16  # cached per binding
    assert mod.cuda == translate(SCALE, "<string>", Options()).cuda  # the nominal translation: the default, bf16


def test_mismatched_arguments_name_both():
    mod = tilex.compile(SCALE)
    x = np.zeros(16, np.float16)
    w = np.zeros(16, np.float32)
    with pytest.raises(LaunchError, match=r"dtype parameter T is bound to f16 by 'x' but 'w' is float32"):
        mod.interp("scale", x, w, np.zeros(16, np.float16), a=1.0)


def test_given_dtype_is_checked_like_any_dtype():
    mod = tilex.compile(SCALE, T="f16")
    assert mod.specs["scale"].params[1].dtype == "f16"
    with pytest.raises(LaunchError, match="expected dtype f16, got float32"):
        mod.interp("scale", *(np.zeros(16, np.float32),) * 3, a=1.0)


def test_define_on_the_command_line():
    from tilex.inputs import parse_defines

    assert parse_defines(["T=f16", "B=4"]) == {"T": "f16", "B": 4}
    t = translate(SCALE, "s.tile", Options(defines=parse_defines(["T=f32"])))
    assert t.specs["scale"].params[0].dtype == "f32"


@pytest.mark.parametrize("src, msg", [
    ("kernel k<T: dtype = f16>(x: T[N], y: out T[N]) grid (1,) { y[0] = T }", "'T' is a dtype parameter"),
    ("kernel k<T: dtype = f16>(x: T[N], y: out T[N]) grid (T,) { y[0] = x[0] }", "'T' is a dtype parameter"),
    ("kernel k<T: dtype = f16>(x: T[N], y: out T[N]) grid (1,) { y[0] = x[0].to(T[4]) }", r"\.to\(\) takes one dtype"),
    ("kernel k<T: dtype = auto>(x: T[N], y: out T[N]) grid (1,) { y[0] = x[0] }", "syntax|auto"),
    ("kernel k<B: int = 4>(x: B[N], y: out f32[N]) grid (1,) { y[0] = 1.0 }", "not a dtype"),
    ("kernel k<T: dtype = f16>(x: T[N], y: out f32[N]) grid (1,) { y[0] = x[0] }", "storing f16 into y: f32"),
])
def test_misuse_is_a_compile_error(src, msg):
    with pytest.raises(CompileError, match=msg):
        translate(src, "k.tile", Options())


def test_bad_define_value():
    with pytest.raises(CompileError, match="'T' is a dtype, got 'f17'"):
        translate(SCALE, "s.tile", Options(defines={"T": "f17"}))
    with pytest.raises(CompileError, match="dtype f64 is not supported"):
        translate(SCALE, "s.tile", Options(defines={"T": "f64"}))


def test_explain_shows_dtype_parameters():
    from tilex.explain import dump_ir
    from tilex.pipeline import compile_program

    text = dump_ir(compile_program(SCALE, "s.tile", Options(defines={"T": "f16"}), stop_after="resolve_names"))
    assert "kernel scale<T: dtype = bf16, BLOCK: int = 256>" in text and "defines: T = f16, BLOCK = 256" in text


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["f16", "bf16", "f32"])
def test_gpu_binds_the_arrays_dtypes(dt):
    import cupy as cp

    rng = np.random.default_rng()
    n = 100003
    x, w = (rng.standard_normal(n).astype(NP[dt]) for _ in range(2))
    mod = tilex.compile(SCALE)
    y = cp.full(n, np.nan, NP[dt])
    mod.scale(cp.asarray(x), cp.asarray(w), y, a=0.75)
    ref = _ref(x, w, 0.75)
    got = cp.asnumpy(y).astype(np.float64)
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) <= TOL[dt]
    host = np.zeros(n, NP[dt])
    mod.interp("scale", x, w, host, a=0.75)
    # GPU against the interpreter: within one rounding of the dtype (the GPU may contract x * a + w into an FMA)
    assert np.max(np.abs(got - host.astype(np.float64))) / np.max(np.abs(ref)) <= TOL[dt]
    with pytest.raises(LaunchError, match="dtype parameter T is bound"):
        mod.scale(cp.asarray(x), cp.asarray(w.astype(np.float32 if dt != "f32" else np.float16)), y, a=1.0)


TWO = SCALE + """
kernel copy<T: dtype = bf16, B: int = 128>(x: T[N], y: out T[N])
    grid (cdiv(N, B),)
{
    i = program_id(0) * B
    y[i : i + B] = x[i : i + B]
}
"""


def test_a_file_define_of_another_kernel_is_no_error_when_one_kernel_is_bound():
    """tilex.compile(FILE, BLOCK=...) sets BLOCK of `scale`; binding `copy` to f16 translates `copy` alone and takes
    only its own parameters (on the H200 a stdlib file's splitk_sum failed with '-D BM: no kernel ... has BM')."""
    mod = tilex.compile(TWO, BLOCK=512)
    x = np.random.default_rng().standard_normal(300).astype(np.float16)
    child = mod.kernel("copy").module_for((x, np.zeros_like(x)), {})
    assert child.specs["copy"].params[0].dtype == "f16"
    y = np.zeros_like(x)
    mod.interp("copy", x, y)
    np.testing.assert_array_equal(y, x)
