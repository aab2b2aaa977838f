"""The parser: .tile text -> tilex.ast, with spans, precedence and syntax errors.

Everything here stops at `parse` (no semantic pass runs), so the snippets need not be
well-typed programs, only well-formed ones.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tilex import ast as A
from tilex.diagnostics import CompileError
from tilex.parser import parse

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.tile"))
B = A.BinOpKind


def body(stmts: str, header: str = "kernel f(x: f32[N], y: out f32[N])\n    grid (N,)\n") -> tuple[A.Stmt, ...]:
    return parse(header + "{\n" + stmts + "\n}\n", "t.tile").kernels[0].body.stmts


def expr(text: str) -> A.Expr:
    """The parsed value of `r = <text>`."""
    (s,) = body(f"    r = {text}")
    assert isinstance(s, A.Assign) and s.name == "r"
    return s.value


def shape(e) -> object:
    """A compact, span-free rendering of an expression tree for precedence checks."""
    if isinstance(e, A.Name):
        return e.id
    if isinstance(e, (A.IntLit, A.FloatLit, A.BoolLit)):
        return e.value
    if isinstance(e, A.BinOp):
        return (e.op.value, shape(e.lhs), shape(e.rhs))
    if isinstance(e, A.UnaryOp):
        return (e.op.value, shape(e.operand))
    if isinstance(e, A.Call):
        return ("call", e.func, tuple(shape(a) for a in e.args), tuple((k, shape(v)) for k, v in e.kwargs))
    if isinstance(e, A.Method):
        return ("method", shape(e.obj), e.name, tuple(shape(a) for a in e.args))
    if isinstance(e, A.Attr):
        return ("attr", shape(e.obj), e.name)
    if isinstance(e, A.Index):
        return ("index", shape(e.base), tuple(shape(i) for i in e.items), tuple((k, shape(v)) for k, v in e.kwargs))
    if isinstance(e, A.Slice):
        return ("slice", shape(e.start) if e.start else None, shape(e.stop) if e.stop else None)
    if isinstance(e, A.NewAxis):
        return "None"
    if isinstance(e, A.DTypeLit):
        return ("dtype", e.dtype)
    if isinstance(e, A.TileTypeExpr):
        return ("tiletype", e.dtype, tuple(shape(d) for d in e.dims))
    raise AssertionError(f"unexpected node {e!r}")


# ---------------------------------------------------------------- examples
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_parse(path):
    src = path.read_text()
    prog = parse(src, str(path))
    assert prog.file == str(path) and prog.source == src
    assert [k.name for k in prog.kernels] == [path.stem]
    k = prog.kernels[0]
    assert k.body.stmts, "kernel body is empty"
    assert k.grid, "kernel has no grid"
    assert any(p.is_out for p in k.params)
    assert k.span.file == str(path) and k.span.line >= 1


def test_example_kernel_headers():
    mm = parse((ROOT / "examples/matmul.tile").read_text(), "matmul.tile").kernels[0]
    assert [(c.name, c.kind, c.default, c.auto, c.space) for c in mm.cparams] == [
        (n, "int", None, True, None) for n in ("BM", "BN", "BK", "STAGES")]
    assert [(p.name, p.type.dtype, p.is_out) for p in mm.params] == [
        ("a", "bf16", False), ("b", "bf16", False), ("c", "bf16", True)]
    assert [d.id for d in mm.params[0].type.dims] == ["M", "K"]
    assert len(mm.grid) == 2
    loop = mm.body.stmts[3]
    assert isinstance(loop, A.For) and loop.pipelined and loop.var == "k"
    assert isinstance(loop.stages, A.Name) and loop.stages.id == "STAGES"  # folded by resolve_names

    rms = parse((ROOT / "examples/rmsnorm.tile").read_text(), "rmsnorm.tile").kernels[0]
    eps = rms.params[-1]
    assert eps.name == "eps" and eps.type.dims is None and isinstance(eps.default, A.FloatLit)
    assert eps.default.value == pytest.approx(1e-6)
    assert rms.where == ()  # masked 16-byte chunks need no divisibility: the example states none


# ---------------------------------------------------------------- spans
def test_spans_vector_add():
    prog = parse((ROOT / "examples/vector_add.tile").read_text(), "vector_add.tile")
    k = prog.kernels[0]
    assert (k.span.line, k.span.col) == (2, 1)
    assert k.span.end_line == 7
    i_assign, store = k.body.stmts
    assert (i_assign.span.line, i_assign.span.col) == (5, 5)
    call = i_assign.value.lhs
    assert isinstance(call, A.Call) and call.func == "program_id"
    assert (call.span.line, call.span.col, call.span.end_col) == (5, 9, 22)
    assert (store.span.line, store.span.col) == (6, 5)
    assert (store.target.span.line, store.target.span.col) == (6, 5)
    assert store.target.span.end_col == len("    z[i : i + BLOCK]") + 1
    rhs = store.value
    assert isinstance(rhs, A.BinOp) and (rhs.span.line, rhs.span.col) == (6, 24)
    assert (rhs.rhs.span.line, rhs.rhs.span.col) == (6, 43)
    param_z = k.params[2]
    assert (param_z.span.line, param_z.span.col) == (2, 60)
    assert (k.cparams[0].span.line, k.cparams[0].span.col) == (2, 19)


def test_spans_across_lines_and_nested():
    (loop,) = body("    for c in range(0, N, 4) {\n        t = x[c : c + 4]\n    }")
    assert (loop.span.line, loop.span.col) == (4, 5)
    (inner,) = loop.body.stmts
    assert (inner.span.line, inner.span.col) == (5, 9)
    idx = inner.value
    assert (idx.span.line, idx.span.col, idx.span.end_col) == (5, 13, 25)
    sl = idx.items[0]
    assert (sl.span.col, sl.span.end_col) == (15, 24)


# ---------------------------------------------------------------- precedence
@pytest.mark.parametrize("text, tree", [
    ("a + b * c", ("+", "a", ("*", "b", "c"))),
    ("a * b + c", ("+", ("*", "a", "b"), "c")),
    ("a - b - c", ("-", ("-", "a", "b"), "c")),
    ("a / b * c", ("*", ("/", "a", "b"), "c")),
    ("a // b % c", ("%", ("//", "a", "b"), "c")),
    ("(a + b) * c", ("*", ("+", "a", "b"), "c")),
    ("-x ** 2", ("-", ("**", "x", 2))),
    ("-x * y", ("*", ("-", "x"), "y")),
    ("a ** b ** c", ("**", "a", ("**", "b", "c"))),
    ("a ** -b", ("**", "a", ("-", "b"))),
    ("2 ** -1", ("**", 2, -1)),
    ("a @ b + c", ("+", ("@", "a", "b"), "c")),
    ("a + b @ c", ("+", "a", ("@", "b", "c"))),
    ("a @ b * c", ("*", ("@", "a", "b"), "c")),
    ("a < b and c > d", ("and", ("<", "a", "b"), (">", "c", "d"))),
    ("a < b and c > d or e == f", ("or", ("and", ("<", "a", "b"), (">", "c", "d")), ("==", "e", "f"))),
    ("a or b and c", ("or", "a", ("and", "b", "c"))),
    ("not a == b", ("not", ("==", "a", "b"))),
    ("not a and b", ("and", ("not", "a"), "b")),
    ("a + 1 <= b * 2", ("<=", ("+", "a", 1), ("*", "b", 2))),
    ("a & b | c", ("|", ("&", "a", "b"), "c")),
    ("a | b == c", ("==", ("|", "a", "b"), "c")),
    ("a & b + c", ("&", "a", ("+", "b", "c"))),
    ("x.to(f32) * 2", ("*", ("method", "x", "to", (("dtype", "f32"),)), 2)),
    ("-x.T", ("-", ("attr", "x", "T"))),
    ("+x", "x"),
    ("-3", -3),
    ("-2.5", -2.5),
    ("0x1F", 31),
    ("1e-6", 1e-6),
    (".5", 0.5),
    ("3.", 3.0),
    ("True", True),
])
def test_precedence(text, tree):
    assert shape(expr(text)) == tree


def test_comparison_is_not_chained():
    with pytest.raises(CompileError) as ei:
        expr("a < b < c")
    assert ei.value.span.line == 4 and ei.value.span.col == 15


# ---------------------------------------------------------------- statements
def test_statements_without_separators_on_one_line():
    stmts = body("    a = 1 b = a + 2 y[0] = b for i in range(3) { a += i } if a > 1 { b = 2 }")
    kinds = [type(s).__name__ for s in stmts]
    assert kinds == ["Assign", "Assign", "Store", "For", "If"]
    assert all(s.span.line == 4 for s in stmts)


def test_semicolons():
    stmts = body("    a = 1; b = 2;\n    c = 3;")
    assert [s.name for s in stmts] == ["a", "b", "c"]
    prog = parse("kernel f(x: f32[N]) grid (N,) { a = 1; b = a; }", "t.tile")
    assert len(prog.kernels[0].body.stmts) == 2


def test_double_semicolon_is_an_error():
    with pytest.raises(CompileError) as ei:
        parse("kernel f(x: f32[N]) grid (N,) { a = 1;; }", "t.tile")
    assert ei.value.span.col == 39 and "';'" in ei.value.message


def test_comments():
    src = ("# leading comment\n"
           "kernel f(x: f32[N],  # trailing after a param\n"
           "         y: out f32[N]) # before grid\n"
           "    grid (N,)  # grid\n"
           "{ # open\n"
           "    # a whole-line comment with symbols ()[]{}:= and kernel keywords\n"
           "    a = 1  # a = 2\n"
           "}\n"
           "# trailing comment without newline")
    k = parse(src, "t.tile").kernels[0]
    assert [p.name for p in k.params] == ["x", "y"]
    (s,) = k.body.stmts
    assert s.name == "a" and s.value.value == 1 and s.span.line == 7


def test_empty_program():
    assert parse("", "t.tile").kernels == ()
    assert parse("# only a comment\n\n", "t.tile").kernels == ()


def test_two_kernels():
    prog = parse("kernel f(x: f32[N]) grid (N,) { }\nkernel g(x: f32[N]) grid (N,) { }", "t.tile")
    assert [k.name for k in prog.kernels] == ["f", "g"]
    assert prog.kernel("g").span.line == 2


def test_elif_chain():
    (s,) = body("    if a { r = 1 } elif b { r = 2 } elif c { r = 3 } else { r = 4 }")
    assert isinstance(s, A.If) and shape(s.cond) == "a"
    assert s.then.stmts[0].value.value == 1
    e1 = s.orelse.stmts[0]
    assert isinstance(e1, A.If) and shape(e1.cond) == "b" and len(s.orelse.stmts) == 1
    e2 = e1.orelse.stmts[0]
    assert isinstance(e2, A.If) and shape(e2.cond) == "c"
    assert e2.then.stmts[0].value.value == 3
    assert e2.orelse.stmts[0].value.value == 4
    assert not isinstance(e2.orelse.stmts[0], A.If)


def test_elif_without_else_and_plain_if():
    (s,) = body("    if a { r = 1 } elif b { r = 2 }")
    assert s.orelse.stmts[0].orelse is None
    (t,) = body("    if a { r = 1 }")
    assert t.orelse is None
    (u,) = body("    if a { r = 1 } else { }")
    assert u.orelse is not None and u.orelse.stmts == ()


def test_augmented_assignments_keep_their_operator():
    stmts = body("    a += 1\n    a -= 1\n    a *= 2\n    a /= 2\n    a max= b\n    a min= b\n    y[0 : 4] += 1")
    assert [s.op for s in stmts] == [B.ADD, B.SUB, B.MUL, B.DIV, B.MAX, B.MIN, B.ADD]
    assert isinstance(stmts[-1], A.Store)


def test_for_forms():
    a, b, c, d = body("    for i in range(4) { }\n    for i in range(1, 4) { }\n    for i in range(1, 9, 2) { }\n"
                      "    for k in pipeline(0, K, 32, stages = 3) { }")
    assert (a.start.value, shape(a.stop), a.step.value) == (0, 4, 1)
    assert (b.start.value, b.stop.value, b.step.value) == (1, 4, 1)
    assert (c.start.value, c.stop.value, c.step.value) == (1, 9, 2)
    assert d.pipelined and shape(d.stages) == 3 and not a.pipelined and a.stages == 1


def test_for_over_non_range_is_an_error():
    with pytest.raises(CompileError) as ei:
        body("    for i in x { }")
    assert "range(start, stop" in ei.value.message
    assert (ei.value.span.line, ei.value.span.col) == (4, 14)


# ---------------------------------------------------------------- calls and subscripts
def test_kwargs_in_calls():
    e = expr("sum(t, axis = 1, keepdims = True)")
    assert shape(e) == ("call", "sum", ("t",), (("axis", 1), ("keepdims", True)))
    assert shape(expr("max(t,)")) == ("call", "max", ("t",), ())
    assert shape(expr("num_programs(0)")) == ("call", "num_programs", (0,), ())
    assert shape(expr("zeros(f32[BM, BN])")) == ("call", "zeros", (("tiletype", "f32", ("BM", "BN")),), ())


def test_kwargs_in_subscripts():
    e = expr("x[row, c : c + B, other = -inf]")
    assert isinstance(e, A.Index)
    assert shape(e) == ("index", "x", ("row", ("slice", "c", ("+", "c", "B"))), (("other", ("-", "inf")),))
    assert e.kwarg("other") is not None and e.kwarg("nope") is None
    assert shape(expr("x[0 : 4, other = 0.0,]")) == ("index", "x", (("slice", 0, 4),), (("other", 0.0),))


def test_subscript_forms():
    assert shape(expr("t[:, None]")) == ("index", "t", (("slice", None, None), "None"), ())
    assert shape(expr("t[None, :]")) == ("index", "t", ("None", ("slice", None, None)), ())
    assert shape(expr("t[:4]")) == ("index", "t", (("slice", None, 4),), ())
    assert shape(expr("x.T[0 : 4, 0 : 8]")) == ("index", ("attr", "x", "T"), (("slice", 0, 4), ("slice", 0, 8)), ())


def test_kwarg_before_positional_in_subscript_is_an_error():
    with pytest.raises(CompileError):
        expr("x[other = 0.0, 0 : 4]")


def test_where_is_a_call_and_a_clause():
    e = expr("where(t > 0.0, t, 0.0)")
    assert shape(e) == ("call", "where", ((">", "t", 0.0), "t", 0.0), ())
    k = parse("kernel f(x: f32[N]) where N % 4 == 0, N >= 8 grid (N,) { r = where(c, a, b) }", "t.tile").kernels[0]
    assert len(k.where) == 2 and shape(k.where[1]) == (">=", "N", 8)
    assert shape(k.body.stmts[0].value)[:2] == ("call", "where")


def test_cparam_defaults():
    k = parse("kernel f<A: int = -3, F: float = -0.5, T: bool = True, H: int = 0x10, D: int>(x: f32[N]) grid (N,) { }",
              "t.tile").kernels[0]
    assert [(c.name, c.kind, c.default) for c in k.cparams] == [
        ("A", "int", -3), ("F", "float", -0.5), ("T", "bool", True), ("H", "int", 16), ("D", "int", None)]


def test_negative_infinity_is_not_folded_by_the_parser():
    e = expr("-inf")
    assert isinstance(e, A.UnaryOp) and shape(e) == ("-", "inf")


# ---------------------------------------------------------------- syntax errors
@pytest.mark.parametrize("src, line, col, message", [
    ("kernel f(x: f32[N]) grid (N,)\n    a = 1\n}\n", 2, 5, "unexpected name 'a'"),
    ("kernel f(x: f32[N]) grid (N,) {\n    a = 1 +* 2\n}\n", 2, 12, "unexpected '*'"),
    ("kernel f(x: f32[N]) grid (N,) {\n    a = 1 $ 2\n}\n", 2, 11, "unexpected character '$'"),
    ("kernel f(x: f32[N]) grid (N,) {\n  a = 1\n", 2, 8, "unexpected end of file"),
    ("kernel f(x: f32[N]) {\n}\n", 1, 21, "unexpected '{'"),
    ("kernel f(x: f32[N]) grid (N,) {\n    a = = 1\n}\n", 2, 9, "unexpected '='"),
    ("kernel kernel(x: f32[N]) grid (N,) { }", 1, 8, "unexpected 'kernel'"),
    ("kernel f(x: f32[N]) grid (N,) {\n    for = 1\n}\n", 2, 9, "unexpected '='"),
    ("kernel f(x: f32[N]) grid (N,) {\n    a = (1 + 2\n}\n", 3, 1, "unexpected '}'"),
    ("kernel f(x: f32[N]) grid (N,) {\n    a = x[0 : 4\n}\n", 3, 1, "unexpected '}'"),
    ("kernel f(x: f32[N]) grid (N,) {\n    1 = a\n}\n", 2, 5, "unexpected number 1"),
    ("kernel f(x: f32[N]) grid (N,) {\n\ta = 1 @@ 2\n}\n", 2, 9, "unexpected '@'"),
    ("kernel f(x: f32[N]) grid (N,) { a = 1 }\n}\n", 2, 1, "unexpected '}'"),
    ("f(x: f32[N]) grid (N,) { }", 1, 1, "unexpected name 'f'"),
])
def test_syntax_errors(src, line, col, message):
    with pytest.raises(CompileError) as ei:
        parse(src, "bad.tile")
    e = ei.value
    assert e.message == message
    assert (e.span.file, e.span.line, e.span.col) == ("bad.tile", line, col)
    assert e.render().startswith(f"bad.tile:{line}:{col}: error: {message}")


def test_syntax_error_lists_what_was_expected():
    with pytest.raises(CompileError) as ei:
        parse("kernel f(x: f32[N]) {\n}\n", "bad.tile")
    assert ei.value.notes and ei.value.notes[0].startswith("expected ")
    assert "'grid'" in ei.value.notes[0]
    assert "GRID" not in ei.value.render() and "lark" not in ei.value.render().lower()


def test_leading_zero_integer_is_a_compile_error():
    with pytest.raises(CompileError) as ei:
        parse("kernel f(x: f32[N]) grid (N,) {\n    a = 0123\n}\n", "bad.tile")
    assert (ei.value.span.line, ei.value.span.col) == (2, 9)


def test_end_of_file_error_points_past_the_last_token():
    with pytest.raises(CompileError) as ei:
        parse("kernel f(x: f32[N]) grid (N,) {\n    for i in range(4) {\n    }\n", "bad.tile")
    assert ei.value.message == "unexpected end of file"
    assert (ei.value.span.line, ei.value.span.col) in ((3, 6), (4, 1))
