"""`fn` helpers and imports (issue 20, items 1, 7, 8): inlining on the interpreter against float64 NumPy,
hygiene, generated CUDA equal to the hand-inlined kernel, errors with the call site, imports, deep programs."""
from __future__ import annotations

import re
import sys

import ml_dtypes
import numpy as np
import pytest

import tilex
from tilex.diagnostics import CompileError
from tilex.exprs import unparse_stmt
from tilex.imports import import_digest
from tilex.pipeline import Options, compile_program
from tilex.translate import translate

RNG = np.random.default_rng()


def _body(src: str, file: str = "t.tile", kernel: int = 0) -> list[str]:
    p = compile_program(src, file, stop_after="inline_functions")
    return [unparse_stmt(s) for s in p.kernels[kernel].body.stmts]


def _error(src: str, file: str = "t.tile") -> CompileError:
    with pytest.raises(CompileError) as ei:
        translate(src, file)
    return ei.value


def _code(cuda: str) -> str:
    """CUDA without the header's source digest and the `// file:line` comments."""
    return "\n".join(re.sub(r"^(\s*// )\S+\.tile:\d+", r"\1", ln) for ln in cuda.splitlines()[1:])


# ---------------------------------------------------------------- results against float64 NumPy
POLY = """
fn horner<C0: float = 1.0, C1: float = 0.5>(x, c2) {   # c2 x^2 + C1 x + C0
    t = c2 * x + C1
    return t * x + C0
}
fn stats(t) {
    s = sum(t)
    return s, max(t) - min(t)
}
fn smooth(x, eps) {
    return horner(x, eps, C1=2.0) / (1.0 + abs(x))   # helpers call helpers
}
kernel k<BLOCK: int = 256>(x: f32[N], y: out f32[N], z: out f32[2], eps: f32 = 0.25)
    grid (cdiv(N, BLOCK),)
{
    i = program_id(0) * BLOCK
    t = x[i : i + BLOCK]
    y[i : i + BLOCK] = smooth(t, eps) + horner(t, 0.0, C0=-1.0)
    if program_id(0) == 0 {
        s, r = stats(t)
        z[0] = s
        z[1] = r
    }
}
"""


@pytest.mark.parametrize("n", [1, 255, 1000])
def test_helpers_over_tiles_and_scalars_match_numpy(n):
    x = RNG.standard_normal(n).astype(np.float32)
    y, z = np.empty(n, np.float32), np.empty(2, np.float32)
    tilex.compile(POLY).interp("k", x, y, z, eps=0.25)
    d = x.astype(np.float64)
    want = (0.25 * d * d + 2.0 * d + 1.0) / (1.0 + np.abs(d)) + (0.5 * d - 1.0)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    head = np.zeros(256)  # the tile x[0 : 256]: outside the tensor a load reads 0 (`other`)
    head[: min(n, 256)] = d[:256]
    np.testing.assert_allclose(z, [head.sum(), head.max() - head.min()], rtol=1e-5, atol=1e-4)


GENERIC = """
fn scale_add(a, b, s) {
    return (a.to(f32) * s + b.to(f32))
}
kernel k(x: bf16[M, N], h: f16[N], v: f32[N], y: out f32[M, N], w: out f32[N])
    grid (1,)
{
    y[0 : 4, 0 : 64] = scale_add(x[0 : 4, 0 : 64], h[0 : 64][None, :], 3.0)
    w[0 : 64] = scale_add(v[0 : 64], h[0 : 64], -0.5)
}
"""


def test_one_helper_serves_several_dtypes_and_shapes():
    x = RNG.standard_normal((4, 64)).astype(ml_dtypes.bfloat16)
    h = RNG.standard_normal(64).astype(np.float16)
    v = RNG.standard_normal(64).astype(np.float32)
    y, w = np.empty((4, 64), np.float32), np.empty(64, np.float32)
    tilex.compile(GENERIC).interp("k", x, h, v, y, w)
    xd, hd, vd = (a.astype(np.float64) for a in (x, h, v))
    np.testing.assert_allclose(y, xd * 3.0 + hd[None, :], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w, vd * -0.5 + hd, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- hygiene
HYGIENE = """
fn bump(t) {
    s = t + 1.0          # the caller has an `s` too: renamed
    t = s * 2.0          # assigns its parameter: a copy, the caller's t is untouched
    return t
}
kernel k(x: f32[N], y: out f32[N], z: out f32[N])
    grid (1,)
{
    s = x[0 : 64] * 10.0
    t = x[0 : 64]
    u = bump(t)
    y[0 : 64] = u + s
    z[0 : 64] = t
}
"""


def test_helper_locals_never_clobber_the_callers():
    body = _body(HYGIENE)
    assert body[2:5] == ["t_1 = t", "s_1 = t_1 + 1.0", "t_1 = s_1 * 2.0"], body
    x = RNG.standard_normal(64).astype(np.float32)
    y, z = np.empty(64, np.float32), np.empty(64, np.float32)
    tilex.compile(HYGIENE).interp("k", x, y, z)
    d = x.astype(np.float64)
    np.testing.assert_allclose(y, (d + 1.0) * 2.0 + 10.0 * d, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z, d, rtol=0, atol=0)


def test_names_are_kept_without_a_clash_and_each_call_gets_its_own():
    src = """
fn sq(v) {
    p = v * v
    return p + 1.0
}
kernel k(x: f32[N], y: out f32[N])
    grid (1,)
{
    a = x[0 : 64]
    y[0 : 64] = sq(a) + sq(a * 2.0)
}
"""
    assert _body(src) == ["a = x[0 : 64]", "p = a * a", "v = a * 2.0", "p_1 = v * v",
                          "y[0 : 64] = p + 1.0 + (p_1 + 1.0)"]


def test_an_argument_used_once_is_substituted_and_one_used_twice_is_evaluated_once():
    src = """
fn once(v) {
    return exp(v)
}
fn twice(v) {
    return v * v
}
kernel k(x: f32[N], y: out f32[N])
    grid (1,)
{
    y[0 : 64] = once(x[0 : 64] + 1.0) + twice(x[0 : 64] - 1.0) + twice(program_id(0))
}
"""
    assert _body(src) == ["v = x[0 : 64] - 1.0",
                          "y[0 : 64] = exp(x[0 : 64] + 1.0) + v * v + program_id(0) * program_id(0)"]


SWIZZLE_FN = """
fn swizzle<GROUP: int>(pid, tiles_m, width) {
    first = pid // width * GROUP
    rows = min(tiles_m - first, GROUP)
    return first + pid % width % rows, pid % width // rows
}
kernel k<BM: int = 64, BN: int = 64, GROUP: int = 4>(x: f32[M, N], y: out f32[M, N])
    grid (cdiv(M, BM) * cdiv(N, BN),)
{
    tiles_m = cdiv(M, BM)
    width = GROUP * cdiv(N, BN)
    tm, tn = swizzle(program_id(0), tiles_m, width, GROUP=GROUP)
    y[tm * BM : tm * BM + BM, tn * BN : tn * BN + BN] = x[tm * BM : tm * BM + BM, tn * BN : tn * BN + BN] * 2.0
}
"""
SWIZZLE_INLINE = """
kernel k<BM: int = 64, BN: int = 64, GROUP: int = 4>(x: f32[M, N], y: out f32[M, N])
    grid (cdiv(M, BM) * cdiv(N, BN),)
{
    tiles_m = cdiv(M, BM)
    width = GROUP * cdiv(N, BN)
    first = program_id(0) // width * GROUP
    rows = min(tiles_m - first, GROUP)
    tm = first + program_id(0) % width % rows
    tn = program_id(0) % width // rows
    y[tm * BM : tm * BM + BM, tn * BN : tn * BN + BN] = x[tm * BM : tm * BM + BM, tn * BN : tn * BN + BN] * 2.0
}
"""


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_a_helper_generates_the_cuda_of_the_hand_inlined_kernel(arch):
    got = translate(SWIZZLE_FN, "s.tile", Options(arch=arch)).cuda
    want = translate(SWIZZLE_INLINE, "s.tile", Options(arch=arch)).cuda
    assert _code(got) == _code(want)


def test_the_swizzled_tiles_cover_the_output_once():
    x = RNG.standard_normal((300, 200)).astype(np.float32)
    y = np.full_like(x, np.nan)
    tilex.compile(SWIZZLE_FN).interp("k", x, y)
    np.testing.assert_array_equal(y, x * 2.0)


def test_a_fn_that_only_stores_is_a_statement():
    src = """
fn put(dst, lo, v) {
    dst[lo : lo + 64] = v
}
kernel k(x: f32[N], y: out f32[N])
    grid (2,)
{
    i = program_id(0) * 64
    put(y, i, x[i : i + 64] * 3.0)
}
"""
    x = RNG.standard_normal(128).astype(np.float32)
    y = np.empty_like(x)
    tilex.compile(src).interp("k", x, y)
    np.testing.assert_allclose(y, x.astype(np.float64) * 3.0, rtol=1e-6)


# ---------------------------------------------------------------- errors
KERNEL = "kernel k(x: f32[N], y: out f32[N])\n    grid (1,)\n{{\n    {body}\n}}\n"


@pytest.mark.parametrize("fns, body, line, message", [
    ("fn f(a) {\n    return f(a)\n}\n", "y[0 : 64] = f(x[0 : 64])", 2, "fn 'f' calls itself (f -> f)"),
    ("fn f(a) {\n    return a\n}\n", "y[0 : 64] = f(x[0 : 64], 1.0)", 7, "fn 'f' takes 1 argument (a), got 2"),
    ("fn f(a) {\n    return a, a\n}\n", "y[0 : 64] = f(x[0 : 64])", 7, "fn 'f' returns 2 values, 1 expected here"),
    ("fn f(a) {\n    return a\n}\n", "p, q = f(x[0 : 64])", 7, "fn 'f' returns 1 value, 2 expected here"),
    ("fn f(a) {\n    return a\n}\n", "y[0 : 64] = f(x[0 : 64], b=1.0)", 7, "fn 'f' has no parameter 'b'"),
    ("fn f<C: int>(a) {\n    return a * C\n}\n", "y[0 : 64] = f(x[0 : 64])", 7,
     "fn 'f' needs its compile-time parameter 'C': pass C=VALUE"),
    ("fn f<C: int>(a) {\n    return a * C\n}\n", "y[0 : 64] = f(x[0 : 64], C=N)", 7,
     "compile-time parameter 'C' of fn 'f' is given 'N', which is not known at compile time"),
    ("fn exp(a) {\n    return a\n}\n", "y[0 : 64] = x[0 : 64]", 1, "fn 'exp' has the name of a builtin function"),
    ("fn f(a) {\n    return a\n    b = a\n}\n", "y[0 : 64] = f(x[0 : 64])", 2,
     "`return` must be the last statement of a fn's body"),
    ("fn f(a, a) {\n    return a\n}\n", "y[0 : 64] = f(x[0 : 64], x[0 : 64])", 1, "fn 'f' has two parameters named 'a'"),
    ("fn f(a) {\n    return a\n}\nfn f(a) {\n    return a\n}\n", "y[0 : 64] = f(x[0 : 64])", 4,
     "fn 'f' is defined twice"),
    ("fn f(a: f32) {\n    return a\n}\n", "y[0 : 64] = f(x[0 : 64])", 1, "fn parameter 'a' has a type: fn parameters take none"),
    ("", "return x", 4, "`return` outside a fn"),
    ("", "p, q = exp(x[0 : 64])", 4, "only the results of a fn call can be unpacked: `a, b = f(...)`"),
    ("", "exp(x[0 : 64])", 4, "a call of builtin 'exp' as a statement does nothing"),
])
def test_misuse_is_a_compile_error(fns, body, line, message):
    src = fns + KERNEL.format(body=body)
    e = _error(src)
    assert e.message == message and e.span.line == line, e.render()
    assert e.render().startswith(f"t.tile:{line}:")


def test_a_fn_call_in_the_grid_is_an_error():
    src = "fn g(n) {\n    return n\n}\nkernel k(x: f32[N], y: out f32[N])\n    grid (g(N),)\n{\n    y[0] = 1.0\n}\n"
    e = _error(src)
    assert e.message == "the launch grid cannot call fn 'g' (fns are inlined into kernel bodies)" and e.span.line == 5


def test_an_error_in_a_nested_helper_names_every_call_site():
    src = """fn inner(t) {
    return t // 2.0
}
fn outer(t) {
    return inner(t * 2.0)
}
kernel k(x: f32[N], y: out f32[N])
    grid (1,)
{
    y[0 : 64] = outer(x[0 : 64])
}
"""
    text = _error(src).render()
    lines = text.splitlines()
    assert lines[0] == "t.tile:2:12: error: '//' is integer division; got f32 and f32 (use / for floats)"
    assert lines[1] == "   2 |     return t // 2.0"
    assert "  note: in fn 'inner', inlined at t.tile:5:12" in lines
    assert "  note: in fn 'outer', inlined at t.tile:10:17" in lines


# ---------------------------------------------------------------- imports
def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_imports_relative_to_the_importing_file(tmp_path):
    _write(tmp_path / "lib" / "common.tile", 'import "math.tile"\nfn twice(v) {\n    return v * 2.0\n}\n'
           "fn quad(v) {\n    return sq(v) * sq(v)\n}\n")
    _write(tmp_path / "lib" / "math.tile", "fn sq(v) {\n    return v * v\n}\n")
    main = _write(tmp_path / "main.tile", 'from "lib/common.tile" import twice, quad\n' + KERNEL.format(
        body="y[0 : 64] = twice(x[0 : 64]) + quad(x[0 : 64])"))
    x = RNG.standard_normal(64).astype(np.float32)
    y = np.empty_like(x)
    tilex.compile(str(main)).interp("k", x, y)
    d = x.astype(np.float64)
    np.testing.assert_allclose(y, 2.0 * d + d ** 4, rtol=1e-5, atol=1e-6)
    # sq is visible to common.tile's fns, not to the file that imports common.tile
    _write(main, 'import "lib/common.tile"\n' + KERNEL.format(body="y[0 : 64] = sq(x[0 : 64])"))
    e = _error(main.read_text(), str(main))
    assert e.message == "unknown function 'sq'"


def test_import_errors(tmp_path):
    a = _write(tmp_path / "a.tile", 'import "b.tile"\nfn fa(v) {\n    return v\n}\n')
    _write(tmp_path / "b.tile", 'import "a.tile"\nfn fb(v) {\n    return v\n}\n')
    main = _write(tmp_path / "m.tile", 'import "a.tile"\n' + KERNEL.format(body="y[0 : 64] = fa(x[0 : 64])"))
    e = _error(main.read_text(), str(main))
    assert e.message == "import cycle: a.tile -> b.tile -> a.tile" and e.span.file.endswith("b.tile"), e.render()
    _write(a, "fn fa(v) {\n    return v\n}\n")
    _write(main, 'from "a.tile" import fb\n' + KERNEL.format(body="y[0 : 64] = fa(x[0 : 64])"))
    e = _error(main.read_text(), str(main))
    assert e.message == "\"a.tile\" has no fn 'fb'" and e.notes == ("it defines: fa",)
    _write(main, 'import "nope/a.tile"\n' + KERNEL.format(body="y[0 : 64] = x[0 : 64]"))
    e = _error(main.read_text(), str(main))
    assert e.message == 'cannot import "nope/a.tile": no such file' and e.span.line == 1


def test_an_error_in_an_imported_fn_shows_that_files_line(tmp_path):
    _write(tmp_path / "h.tile", "# helpers\nfn bad(t) {\n    return t // 3.0\n}\n")
    main = _write(tmp_path / "m.tile", 'import "h.tile"\n' + KERNEL.format(body="y[0 : 64] = bad(x[0 : 64])"))
    lines = _error(main.read_text(), str(main)).render().splitlines()
    assert lines[0].startswith(f"{tmp_path / 'h.tile'}:3:12: error: '//' is integer division")
    assert lines[1] == "   3 |     return t // 3.0"
    assert f"  note: in fn 'bad', inlined at {main}:5:17" in lines


def test_the_library_helpers_are_importable_from_anywhere(tmp_path):
    main = _write(tmp_path / "m.tile", 'from "helpers.tile" import rotate_lo, rotate_hi\n' + KERNEL.format(
        body="a = x[0 : 64]; b = x[64 : 128]; c = cos(a); s = sin(b)\n"
             "    y[0 : 64] = rotate_lo(a, b, c, s); y[64 : 128] = rotate_hi(a, b, c, s)"))
    x = RNG.standard_normal(128).astype(np.float32)
    y = np.empty_like(x)
    tilex.compile(str(main)).interp("k", x, y)
    a, b = x[:64].astype(np.float64), x[64:].astype(np.float64)
    c, s = np.cos(a), np.sin(b)
    np.testing.assert_allclose(y, np.concatenate([a * c - b * s, b * c + a * s]), rtol=1e-5, atol=1e-5)


def test_an_imported_files_text_is_part_of_the_translation_cache_key(tmp_path, monkeypatch):
    from tilex import translation_cache as tc

    monkeypatch.setenv("TILEX_CACHE_DIR", str(tmp_path / "cache"))
    h = _write(tmp_path / "h.tile", "fn f(v) {\n    return v * 2.0\n}\n")
    main = _write(tmp_path / "m.tile", 'import "h.tile"\n' + KERNEL.format(body="y[0 : 64] = f(x[0 : 64])"))
    src = main.read_text()
    d1 = import_digest(src, str(main))
    first, built = tc.translate(src, str(main), Options())
    assert built and d1
    again, built = tc.translate(src, str(main), Options())
    assert not built and again.cuda == first.cuda
    _write(h, "fn f(v) {\n    return v * 3.0\n}\n")
    assert import_digest(src, str(main)) != d1
    changed, built = tc.translate(src, str(main), Options())
    assert built and "3.0f" in changed.cuda and "3.0f" not in first.cuda
    assert import_digest(KERNEL.format(body="y[0] = 1.0"), "k.tile") == ""


# ---------------------------------------------------------------- item 7: long and deep programs
def _fn_chain(n: int) -> str:
    """fn h0 .. h{n-1}, each calling the previous one."""
    fns = "fn h0(v) {\n    return v + 1.0\n}\n" + "".join(
        f"fn h{i}(v) {{\n    w = h{i - 1}(v)\n    return w + 1.0\n}}\n" for i in range(1, n))
    return fns + KERNEL.format(body=f"y[0 : 256] = h{n - 1}(x[0 : 256])")


def _fn_long_expr(n: int) -> str:
    return "fn f(v) {\n    return " + " + ".join(["v"] * n) + "\n}\n" + KERNEL.format(body="y[0 : 256] = f(x[0 : 256])")


def _fn_nested_ifs(n: int) -> str:
    return "fn f(v, n) {\n    r = v\n" + "if n > 1 {\n" * n + "r = v * 2.0\n" + "}\n" * n + "    return r\n}\n" + \
        KERNEL.format(body="y[0 : 256] = f(x[0 : 256], N)")


def _many_calls(n: int) -> str:
    body = "a = x[0 : 256]\n" + "".join("    a = g(a)\n" for _ in range(n)) + "    y[0 : 256] = a"
    return "fn g(v) {\n    t = v + 1.0\n    return t\n}\n" + KERNEL.format(body=body)


@pytest.mark.parametrize("make, n, want", [
    (_fn_chain, 300, lambda x, n: x + n),
    (_fn_long_expr, 5000, lambda x, n: n * x),
    (_fn_nested_ifs, 1000, lambda x, n: 2 * x),
    (_many_calls, 2000, lambda x, n: x + n),
])
def test_long_and_deep_programs_with_fns_compile_and_interpret(make, n, want):
    src = make(n)
    limit = sys.getrecursionlimit()
    t = translate(src, "deep.tile")
    x = RNG.standard_normal(256).astype(np.float32)
    y = np.empty(256, np.float32)
    tilex.compile(src).interp("k", x, y)
    np.testing.assert_allclose(y, want(x.astype(np.float64), n), rtol=1e-4 * max(1, n / 100), atol=1e-2)
    assert t.cuda and sys.getrecursionlimit() == limit


COALESCE = """
fn total(v) {
    acc = zeros(f32[64])
    for i in range(0, 4) {
        acc += v
    }
    return acc
}
kernel k(x: f32[N], y: out f32[N], z: out f32[N])
    grid (1,)
{
    a = x[0 : 64]
    s = total(a)
    a = total(a)
    y[0 : 64] = s
    z[0 : 64] = a
}
"""


def test_a_result_is_computed_under_its_targets_name_unless_the_call_reads_it():
    heads = [line.splitlines()[0] for line in _body(COALESCE)]
    assert heads == ["a = x[0 : 64]", "s = zeros(f32[64])", "for i in range(0, 4, 1)",
                     "acc = zeros(f32[64])", "for i_1 in range(0, 4, 1)", "a = acc",
                     "y[0 : 64] = s", "z[0 : 64] = a"], heads
    x = RNG.standard_normal(64).astype(np.float32)
    y, z = np.empty_like(x), np.empty_like(x)
    tilex.compile(COALESCE).interp("k", x, y, z)
    np.testing.assert_allclose(y, 4.0 * x.astype(np.float64), rtol=1e-6)
    np.testing.assert_allclose(z, 4.0 * x.astype(np.float64), rtol=1e-6)


def test_every_library_kernel_compiles_with_the_shared_helpers_for_each_dtype():
    from tilex.stdlib._launch import source

    for name, dtypes in (("linear", {"T": "f16"}), ("rope", {"T": "f16", "I": "i32"})):
        text = source(name)
        assert "import" in text
        for k in compile_program(text, f"stdlib_kernels/{name}.tile", Options(defines=dtypes)).kernels:
            assert k.info is not None


def test_explain_names_the_fn_a_main_loop_is_inlined_from():
    from pathlib import Path

    from tilex.explain import explain

    path = Path(__file__).resolve().parents[1] / "stdlib_kernels" / "linear.tile"
    text = path.read_text()
    prog = compile_program(text, "stdlib_kernels/linear.tile", Options(arch="sm_90a", kernel="linear"))
    loop = explain(prog)[0]["matmul_loops"][0]
    lines = text.splitlines()
    fn_loop = next(i for i, ln in enumerate(lines, 1) if ln.strip().startswith("for k in pipeline(k0, k1"))
    call = next(i for i, ln in enumerate(lines, 1) if ln.strip().startswith("acc = tile_xwt(x, w, m, n, 0, K"))
    assert (loop["line"], loop["file"]) == (fn_loop, "stdlib_kernels/linear.tile")
    assert loop["inlined_at"] == [f"in fn tile_xwt, inlined at stdlib_kernels/linear.tile:{call}"]


def test_the_parse_dump_shows_fn_statements():
    src = "fn two(v) {\n    return v, v\n}\n" + KERNEL.format(body="a, b = two(x[0 : 64])\n    y[0 : 64] = a + b")
    p = compile_program(src, "t.tile", stop_after="parse")
    assert unparse_stmt(p.kernels[0].body.stmts[0]) == "a, b = two(x[0 : 64])"


DTYPE_FN = """
fn scaled<T: dtype, B: int>(v, s) {
    acc = zeros(f32[B])
    acc += v.to(f32) * s
    return acc.to(T), zeros(T[B]) + 1.0
}
kernel k(x: f32[N], y: out bf16[N], z: out f16[N], w: out f16[N])
    grid (1,)
{
    a, b = scaled(x[0 : 64], 2.0, T=bf16, B=64)
    c, d = scaled(x[0 : 64], 3.0, T=f16, B=64)
    y[0 : 64] = a
    z[0 : 64] = c
    w[0 : 64] = d
}
"""


def test_a_dtype_parameter_of_a_fn_makes_values_of_the_callers_dtype():
    x = RNG.standard_normal(64).astype(np.float32)
    y, z, w = np.empty(64, ml_dtypes.bfloat16), np.empty(64, np.float16), np.zeros(64, np.float16)
    tilex.compile(DTYPE_FN).interp("k", x, y, z, w)
    d = x.astype(np.float64)
    np.testing.assert_allclose(y.astype(np.float64), 2.0 * d, rtol=2 ** -8, atol=1e-6)   # rounded to bf16
    np.testing.assert_allclose(z.astype(np.float64), 3.0 * d, rtol=2 ** -11, atol=1e-6)  # rounded to f16
    np.testing.assert_array_equal(w, np.ones(64, np.float16))
    e = _error(DTYPE_FN.replace("T=f16", "T=2.0"))
    assert e.message == "compile-time parameter 'T' of fn 'scaled' is a dtype: give one (T=bf16)"


def test_two_fns_of_one_name_are_an_error(tmp_path):
    _write(tmp_path / "a.tile", "fn f(v) {\n    return v\n}\n")
    _write(tmp_path / "b.tile", "fn f(v) {\n    return -v\n}\n")
    main = _write(tmp_path / "m.tile", 'import "a.tile"\nimport "b.tile"\n' + KERNEL.format(body="y[0 : 64] = f(x[0 : 64])"))
    e = _error(main.read_text(), str(main))
    assert e.message.startswith("fn 'f' is defined twice (here and at ") and e.span.line == 2
    _write(main, 'import "a.tile"\nimport "./a.tile"\n' + KERNEL.format(body="y[0 : 64] = f(x[0 : 64])"))
    assert translate(main.read_text(), str(main)).cuda  # the same fn through two paths is one fn


def test_a_fn_call_in_atomic_cas_expected_value_is_inlined():
    """atomic_cas(t[...], expected, value): a fn call in `expected` is inlined like one in the value (it was left
    as an unknown function)."""
    src = """
fn neg1() {
    return -1
}

kernel claim(owner: out i32[N])
    grid (4,)
{
    atomic_cas(owner[0], neg1(), program_id(0))
}
"""
    owner = np.full(1, -1, np.int32)
    tilex.compile(src, cache_dir=False).interp("claim", owner)
    assert owner[0] == 0  # program 0 runs first in the interpreter and finds -1
