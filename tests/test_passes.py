"""The semantic passes, one at a time, on small programs; `verify` runs after every pass.

Each test compiles with `check=True` (IR invariants checked after each pass) and
`stop_after=` the pass under test, then looks at the structure that pass guarantees.
"""
from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path

import pytest

from tilex import ast as A
from tilex.diagnostics import CompileError
from tilex.layout import Layout
from tilex.passes.infer_shapes import broadcast
from tilex.pipeline import PASS_NAMES, Options, compile_program
from tilex.targets import target
from tilex.types import DType, MemSpace
from tilex.verify import verify

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.tile"))
B = A.BinOpKind

HEADER = ("kernel f<BLK: int = 128>(a: f16[N], b: bf16[N], c: f32[N], i: i32[N], l: i64[N], m: bool[N], "
          "y: out f32[N], s: f32, n: i32, h: f16)\n    grid (cdiv(N, BLK),)\n")


def compile_src(src: str, stop_after: str | None = None, check: bool = True, **options) -> A.Program:
    return compile_program(src, "t.tile", Options(**options), stop_after=stop_after, check=check)


def kernel(stmts: str, stop_after: str | None = None, header: str = HEADER, check: bool = True, **options) -> A.Kernel:
    return compile_src(header + "{\n" + stmts + "\n}\n", stop_after, check=check, **options).kernels[0]


def nodes(root, cls=None):
    """Every AST node below `root` (depth first), optionally of one class."""
    out = []

    def go(v):
        if isinstance(v, tuple):
            for x in v:
                go(x)
            return
        if not isinstance(v, (A.Expr, A.Stmt, A.Block)):
            return
        if cls is None or isinstance(v, cls):
            out.append(v)
        for f in fields(v):
            if f.name not in ("span", "ty"):
                go(getattr(v, f.name))

    go(root)
    return out


def assigned(k: A.Kernel, name: str) -> A.Expr:
    """The value of the last top-level or nested `name = ...` in the kernel."""
    found = [s for s in nodes(k.body, A.Assign) if s.name == name]
    assert found, f"no assignment to {name}"
    return found[-1].value


def error(stmts: str, header: str = HEADER, **options) -> CompileError:
    try:
        kernel(stmts, header=header, **options)
    except CompileError as e:
        return e
    except Exception as e:  # noqa: BLE001 - any other exception is a compiler bug
        raise AssertionError(f"expected a CompileError, got {type(e).__name__}: {e}") from e
    raise AssertionError("expected a CompileError, compiled fine")


# ---------------------------------------------------------------- all passes on the examples
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("stop", PASS_NAMES)
def test_examples_verify_after_every_pass(path, stop):
    prog = compile_program(path.read_text(), path.name, Options(), stop_after=stop, check=True)
    if stop != "parse":
        verify(prog, stop)
    assert prog.kernels


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_examples_compile_for_both_archs(path, arch):
    prog = compile_program(path.read_text(), path.name, Options(arch=arch), check=True)
    k = prog.kernels[0]
    assert k.info.smem_bytes <= k.info.smem_limit


def test_pass_names():
    assert PASS_NAMES == ["parse", "inline_functions", "resolve_names", "infer_dtypes", "infer_shapes", "check_constraints", "plan_matmul", "choose_threads",
                          "choose_mma", "place_resident", "plan_streams", "assign_layouts", "plan_tma", "budget_smem",
                          "plan_barriers"]


@pytest.mark.parametrize("name", PASS_NAMES[1:])
def test_every_pass_is_a_module_saying_what_it_needs_and_guarantees(name):
    import importlib

    doc = importlib.import_module(f"tilex.passes.{name}").__doc__
    assert doc.startswith(f"Pass {name}:") or name in doc.splitlines()[0], doc.splitlines()[0]
    assert "Needs:" in doc and "Guarantees:" in doc, name


def test_the_memory_passes_are_consecutive_and_hand_on_a_memory_plan():
    from tilex.passes.choose_threads import LaunchConfig
    from tilex.passes.memory_info import KernelMemory, MemoryPlan
    from tilex.pipeline import MEMORY_PASSES

    at = PASS_NAMES.index(MEMORY_PASSES[0])
    assert tuple(PASS_NAMES[at: at + len(MEMORY_PASSES)]) == MEMORY_PASSES and MEMORY_PASSES[-1] == "budget_smem"
    src = (ROOT / "examples" / "bmm.tile").read_text()
    infos = {n: compile_program(src, "bmm.tile", stop_after=n).kernels[0].info for n in ("choose_mma",) + MEMORY_PASSES}
    assert isinstance(infos["choose_mma"], LaunchConfig) and isinstance(infos["budget_smem"], KernelMemory)
    assert all(isinstance(infos[n], MemoryPlan) for n in MEMORY_PASSES[:-1])
    assert infos["plan_tma"].tma_maps == infos["budget_smem"].tma_maps != ()  # sm_90a: the wgmma main loop's maps
    assert not infos["plan_streams"].uses and infos["assign_layouts"].uses  # each pass fills its own fields


def test_the_pipeline_runs_the_memory_passes_again_until_the_kernel_fits():
    """attention_prefill's 3-stage rings do not fit on sm_80: the dump after plan_streams is the second attempt's
    (2 stages), as is the final kernel."""
    from tilex.stdlib import _launch as L

    def stages(stop):
        p = compile_program(L.source("attention_prefill"), "a.tile", Options(arch="sm_80", defines=dict(STAGES=3)),
                            stop_after=stop)
        return {t.stages for k in p.kernels for f in nodes(k.body, A.For) for t in f.stream}, p.kernels[0].info
    (first, plan), (final, mem) = stages("plan_streams"), stages("budget_smem")
    assert first == final == {2} and plan.shrink == 1 and mem.smem_bytes <= mem.smem_limit


# ---------------------------------------------------------------- resolve_names
def test_cparams_are_substituted():
    k = kernel("    r = BLK * 2\n    y[0 : BLK] = c[0 : BLK]", "resolve_names")
    assert k.defines == (("BLK", 128),)
    r = assigned(k, "r")
    assert isinstance(r.lhs, A.IntLit) and r.lhs.value == 128
    assert not [n for n in nodes(k.body, A.Name) if n.id == "BLK"]
    assert k.grid[0].args[1] == A.IntLit(128, k.grid[0].args[1].span)


@pytest.mark.parametrize("value, expect", [(256, 256), ("256", 256), ("0x40", 64), (64.0, 64)])
def test_define_overrides_default(value, expect):
    k = kernel("    r = BLK", "resolve_names", defines={"BLK": value})
    assert k.defines == (("BLK", expect),)
    assert assigned(k, "r").value == expect


def test_defines_of_each_kind():
    header = "kernel f<I: int = 1, F: float = 0.5, T: bool = False>(y: out f32[N])\n    grid (N,)\n"
    k = kernel("    a = I\n    b = F\n    t = T", "resolve_names", header=header,
               defines={"I": "7", "F": "2", "T": "yes"})
    assert dict(k.defines) == {"I": 7, "F": 2.0, "T": True}
    assert isinstance(assigned(k, "b"), A.FloatLit) and assigned(k, "b").value == 2.0
    assert isinstance(assigned(k, "t"), A.BoolLit) and assigned(k, "t").value is True


def test_bad_define_value():
    e = error("    r = BLK", defines={"BLK": "lots"})
    assert e.message == "compile-time parameter 'BLK' is int, got 'lots'"
    assert e.span.line == 1


def test_unknown_define_name():
    e = error("    r = BLK", defines={"BLOCK": 4})
    assert e.message.startswith("-D BLOCK: no kernel in t.tile has a compile-time parameter 'BLOCK'")
    assert "(they have: BLK)" in e.message and e.span.line == 0
    assert e.render().startswith("t.tile: error: -D BLOCK")


def test_cparam_in_tensor_dims_and_pipeline_stages():
    header = "kernel f<D: int = 16, S: int = 3>(a: f32[M, D], y: out f32[M, D])\n    grid (M,)\n"
    k = kernel("    for q in pipeline(0, M, 1, stages = S) { y[q, 0 : D] = a[q, 0 : D] }", "resolve_names", header=header)
    assert [type(d).__name__ for d in k.params[0].type.dims] == ["Name", "IntLit"]
    assert k.params[0].type.dims[1].value == 16
    loop = k.body.stmts[0]
    assert loop.stages == 3 and loop.pipelined


def test_symbols_in_order_of_first_appearance():
    header = "kernel f(b: f32[K, N], a: f32[M, K], c: out f32[M, N], z: f32[Q])\n    grid (M,)\n"
    k = kernel("", "resolve_names", header=header)
    assert k.symbols == ("K", "N", "M", "Q")
    assert all(d.kind is A.NameKind.SYMBOL for p in k.params for d in p.type.dims)


def test_name_kinds():
    k = kernel("    q = program_id(0)\n    for j in range(0, N, 4) { t = c[j : j + 4] * s + q }\n    w = inf", "resolve_names")
    kinds = {n.id: n.kind for n in nodes(k.body, A.Name)}
    assert kinds == {"q": A.NameKind.LOCAL, "c": A.NameKind.TENSOR, "s": A.NameKind.SCALAR_PARAM,
                     "j": A.NameKind.LOOP_VAR, "N": A.NameKind.SYMBOL}
    w = assigned(k, "w")
    assert isinstance(w, A.FloatLit) and math.isinf(w.value)


def test_negated_constants_become_literals():
    k = kernel("    w = -inf\n    v = -BLK", "resolve_names")
    assert isinstance(assigned(k, "w"), A.FloatLit) and assigned(k, "w").value == -math.inf
    assert assigned(k, "v") == A.IntLit(-128, assigned(k, "v").span)


def test_augmented_assignment_is_desugared():
    k = kernel("    acc = zeros(f32[4])\n    acc += c[0 : 4]\n    acc max= c[0 : 4]\n    acc /= 2.0\n"
               "    y[0 : 4] -= acc", "resolve_names")
    stmts = k.body.stmts
    assert all(s.op is None for s in stmts)
    add, mx, div, store = stmts[1].value, stmts[2].value, stmts[3].value, stmts[4]
    assert isinstance(add, A.BinOp) and add.op is B.ADD and add.lhs.id == "acc" and add.lhs.kind is A.NameKind.LOCAL
    assert isinstance(mx, A.Call) and mx.func == "max" and mx.args[0].id == "acc"
    assert isinstance(div, A.BinOp) and div.op is B.DIV
    assert isinstance(store, A.Store) and store.op is None
    assert isinstance(store.value, A.BinOp) and store.value.op is B.SUB
    assert isinstance(store.value.lhs, A.Index) and store.value.lhs.base.id == "y"


@pytest.mark.parametrize("stmts, message, line, col", [
    ("    for j in range(4) { t = 1 }\n    r = t", "'t' is only defined inside the loop at line 4", 5, 9),
    ("    if n > 0 { t = 1 }\n    r = t", "'t' is only defined inside the if at line 4", 5, 9),
    ("    if n > 0 { r = 1 } else { t = 2 }\n    q = t", "'t' is only defined inside the else at line 4", 5, 9),
    ("    for j in range(4) { }\n    r = j", "'j' is only defined inside the loop at line 4", 5, 9),
    ("    r = cc", "unknown name 'cc'", 4, 9),
    ("    t += 1", "'t' is updated with an augmented assignment before it has a value", 4, 5),
    ("    for j in range(4) { j = 2 }", "cannot assign to loop variable 'j'", 4, 25),
    ("    s = 1.0", "cannot assign to 's': it is a scalar param", 4, 5),
    ("    c = 1.0", "cannot assign to 'c': it is a tensor", 4, 5),
    ("    N = 1", "cannot assign to 'N': it is a symbol", 4, 5),
    ("    BLK = 1", "cannot assign to 'BLK': it is a compile-time parameter", 4, 5),
    ("    tx_i = 1", "names starting with 'tx_' or 'tilex' are reserved for generated code: rename 'tx_i'", 4, 5),
    ("    tilexy = 1", "names starting with 'tx_' or 'tilex' are reserved for generated code: rename 'tilexy'", 4, 5),
    ("    for tx_j in range(4) { }", "names starting with 'tx_' or 'tilex' are reserved for generated code: rename 'tx_j'", 4, 5),
    ("    r = foo(1)", "unknown function 'foo'", 4, 9),
    ("    q = 1\n    q[0] = 1", "only tensor parameters can be written with x[...] = ...; 'q' is a local", 5, 5),
    ("    s[0] = 1", "only tensor parameters can be written with x[...] = ...; 's' is a scalar param", 4, 5),
])
def test_resolve_errors(stmts, message, line, col):
    e = error(stmts)
    assert e.message == message
    assert (e.span.line, e.span.col) == (line, col)


def test_unknown_name_suggests():
    e = error("    r = c[0 : 4] + ss")
    assert e.message == "unknown name 'ss'" and e.notes == ("did you mean 's'?",)
    e = error("    r = progrm_id(0)")
    assert e.notes == ("did you mean 'program_id'?",)
    e = error("    r = qqqqqq")
    assert e.notes == ()


def test_inner_scope_sees_outer_names():
    k = kernel("    t = 1\n    for j in range(4) { t = t + j }\n    r = t", "resolve_names")
    assert assigned(k, "r").kind is A.NameKind.LOCAL


@pytest.mark.parametrize("header, message", [
    ("kernel f<A: int = 1, A: int = 2>(y: out f32[N])\n    grid (N,)\n", "compile-time parameter 'A' is declared twice"),
    ("kernel f(y: out f32[N], y: f32[N])\n    grid (N,)\n", "parameter 'y' is declared twice"),
    ("kernel f<A: int>(y: out f32[N])\n    grid (N,)\n",
     "compile-time parameter 'A' has no default: give one or pass -D A=VALUE"),
    ("kernel f(y: out f32[N * 2])\n    grid (N,)\n", "a tensor dimension is a symbol (like N) or a positive integer"),
    ("kernel f(y: out f32)\n    grid (1,)\n", "output parameter 'y' must be a tensor (scalars are passed by value)"),
    ("kernel f(y: out f32[N], s: f32)\n    grid (s,)\n",
     "the launch grid may use only shape symbols and compile-time parameters; 's' is a scalar param"),
    ("kernel f(y: out f32[N])\n    grid (N, 1, 1, 1)\n", "the launch grid has 1 to 3 dimensions, got 4"),
])
def test_header_errors(header, message):
    e = error("", header=header)
    assert e.message == message
    assert e.span.line in (1, 2)


def test_param_named_like_a_shape_symbol():
    e = error("", header="kernel f(y: out f32[N], N: i32)\n    grid (N,)\n")
    assert e.message == "'N' is already a shape symbol"
    assert (e.span.line, e.span.col) == (1, 25)
    assert e.notes == ("'N' is a dimension of 'y' and takes its value from that tensor's shape; rename the parameter",)
    e = error("", header="kernel f(x: f32[M], y: out f32[N], M: f32[4])\n    grid (N,)\n")
    assert e.message == "'M' is already a shape symbol" and "dimension of 'x'" in e.notes[0]


def test_tensor_named_like_its_own_dimension():
    e = error("", header="kernel f(y: out f32[y])\n    grid (1,)\n")
    assert e.message == "'y' names both a tensor parameter and one of its dimensions"
    assert (e.span.line, e.span.col) == (1, 10)


@pytest.mark.parametrize("name, why", [
    ("norm", "the CUDA math API or the C library has a function 'norm'"),
    ("rsqrt", "the CUDA math API or the C library has a function 'rsqrt'"),
    ("select", "the CUDA math API or the C library has a function 'select'"),
    ("threadIdx", "the CUDA or C library headers declare a type, variable or constant 'threadIdx'"),
    ("float4", "the CUDA or C library headers declare a type, variable or constant 'float4'"),
    ("assert", "the CUDA or C library headers define a macro 'assert'"),
    ("class", "'class' is a C++ keyword"),
    ("requires", "'requires' is a C++ keyword"),
    ("main", "'main' is the entry point of a C++ program"),
    ("_scale", "C++ reserves names that start with '_' or contain '__'"),
    ("my__kernel", "C++ reserves names that start with '_' or contain '__'"),
    ("tilex_copy", "names starting with 'tx_' or 'tilex' are reserved for generated code"),
])
def test_kernel_named_like_cuda(name, why):
    src = f"# {name}\n  kernel  {name}(y: out f32[N])\n    grid (N,)\n{{\n}}\n"
    with pytest.raises(CompileError) as ei:
        compile_src(src)
    e = ei.value
    assert e.message == f"kernel name '{name}' is reserved in CUDA C++: {why}"
    assert (e.span.line, e.span.col, e.span.end_line, e.span.end_col) == (2, 11, 2, 11 + len(name))
    assert e.notes[0].startswith('a kernel is emitted as an extern "C" function under its own name')


@pytest.mark.parametrize("name", ["rmsnorm", "softmax", "matmul", "layer_norm", "sum_rows", "norm2", "exp_kernel"])
def test_kernel_names_that_do_not_collide(name):
    assert compile_src(f"kernel {name}(y: out f32[N]) grid (N,) {{ }}\n").kernels[0].name == name


def test_duplicate_kernel():
    src = "kernel f(y: out f32[N]) grid (N,) { }\nkernel f(y: out f32[N]) grid (N,) { }\n"
    with pytest.raises(CompileError) as ei:
        compile_src(src)
    assert ei.value.message == "kernel 'f' is defined twice" and ei.value.span.line == 2


def test_select_kernel_option():
    src = "kernel f(y: out f32[N]) grid (N,) { }\nkernel g(y: out f32[N]) grid (N,) { }\n"
    assert [k.name for k in compile_src(src, kernel="g").kernels] == ["g"]
    with pytest.raises(CompileError) as ei:
        compile_src(src, kernel="h")
    assert ei.value.message == "no kernel named 'h' in t.tile (it has: f, g)"


# ---------------------------------------------------------------- infer_dtypes
LOADS = {"a": "a[0 : 16]", "b": "b[0 : 16]", "c": "c[0 : 16]", "i": "i[0 : 16]", "l": "l[0 : 16]",
         "m": "m[0 : 16]", "s": "s", "n": "n", "h": "h"}


def dtype_of(text: str) -> DType:
    for k, v in LOADS.items():
        text = text.replace("{" + k + "}", v)
    k = kernel(f"    r = {text}", "infer_dtypes")
    return assigned(k, "r").ty.dtype


@pytest.mark.parametrize("text, dt", [
    # same dtype
    ("{a} + {a}", "f16"), ("{b} * {b}", "bf16"), ("{i} - {i}", "i32"),
    # promotion between tiles
    ("{a} + {b}", "f32"), ("{b} + {a}", "f32"), ("{a} + {c}", "f32"), ("{b} * {c}", "f32"),
    ("{i} + {a}", "f16"), ("{i} + {l}", "i64"), ("{l} + {c}", "f32"), ("{m} + {i}", "i32"),
    ("{m} + {m}", "i32"), ("{m} + {a}", "f16"),
    # scalars are not weak: an f32 scalar param promotes an f16 tile
    ("{a} * {s}", "f32"), ("{a} * {h}", "f16"), ("{i} * {n}", "i32"), ("{a} * {n}", "f16"),
    # weak literals take the other operand's dtype
    ("{a} + 1.0", "f16"), ("1.0 + {b}", "bf16"), ("{a} * 2", "f16"), ("{i} + 1", "i32"),
    ("{l} * 3", "i64"), ("{i} + 1.5", "f32"), ("{l} + 0.5", "f32"), ("{m} + 1", "i32"),
    ("1 + 2", "i32"), ("1 + 2.0", "f32"), ("-inf", "f32"), ("BLK", "i32"),
    # division
    ("{i} / {i}", "f32"), ("{i} / 2", "f32"), ("7 / 2", "f32"), ("{a} / {a}", "f16"), ("{n} / 2", "f32"),
    ("{i} // 2", "i32"), ("{l} // {i}", "i64"), ("{a} % 2.0", "f16"), ("{i} % 3", "i32"),
    # power, compare, logic, bit ops
    ("{a} ** 2", "f16"), ("{c} > 0.0", "bool"), ("{i} == {l}", "bool"), ("{n} > 0 and {s} < 1.0", "bool"),
    ("not {n} > 0", "bool"), ("{m} & {m}", "bool"), ("{i} | {l}", "i64"), ("-{a}", "f16"),
    # matmul
    ("zeros(bf16[16, 16]) @ zeros(bf16[16, 16])", "f32"), ("zeros(f16[16, 16]) @ zeros(f16[16, 16])", "f32"),
    ("zeros(f32[16, 16]) @ zeros(f32[16, 16])", "f32"),
    # calls
    ("exp({a})", "f16"), ("exp({i})", "f32"), ("rsqrt({b})", "bf16"), ("abs({i})", "i32"), ("abs({a})", "f16"),
    ("max({a}, {b})", "f32"), ("min({i}, 0)", "i32"), ("max({a}, 1.0)", "f16"),
    ("sum({b})", "f32"), ("sum({a})", "f32"), ("sum({c})", "f32"), ("sum({i})", "i32"), ("sum({l})", "i64"),
    ("sum({m})", "i32"), ("mean({i})", "f32"), ("mean({b})", "f32"), ("max({b})", "bf16"), ("min({i})", "i32"),
    ("argmax({a})", "i32"), ("argmin({c})", "i32"),
    ("where({m}, {a}, 0.0)", "f16"), ("where({m}, {a}, {b})", "f32"),
    ("zeros(bf16[16])", "bf16"), ("full(i64[16], 3)", "i64"), ("arange(0, 16)", "i32"),
    ("program_id(0)", "i32"), ("num_programs(0)", "i32"), ("cdiv({n}, 4)", "i32"),
    # conversions
    ("{c}.to(bf16)", "bf16"), ("{a}.to(f32)", "f32"), ("{i}.to(f8e4m3)", "f8e4m3"), ("{c}.T", "f32"),
    ("{a}[None, :]", "f16"),
])
def test_dtype_rules(text, dt):
    assert dtype_of(text) == DType(dt)


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_87"])
def test_fp8_parameter_needs_sm89(arch):
    e = error("", header="kernel f(x: f32[N], q: f8e4m3[N], y: out f32[N])\n    grid (1,)\n", arch=arch)
    assert e.message == f"parameter 'q' is f8e4m3, which needs sm_89 or later; the target is {arch}"
    assert (e.span.line, e.span.col) == (1, 21)
    assert e.notes == ("compile for sm_89 or later (--arch sm_89, sm_90a), or use bf16 or f16",)


@pytest.mark.parametrize("stmts, col", [("    r = c[0 : 4].to(f8e4m3)", 21), ("    r = zeros(f8e4m3[4])", 15)])
def test_fp8_in_the_body_needs_sm89(stmts, col):
    e = error(stmts, arch="sm_80")
    assert e.message == "f8e4m3 needs sm_89 or later; the target is sm_80"
    assert (e.span.line, e.span.col) == (4, col)


@pytest.mark.parametrize("arch", ["sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120"])
def test_fp8_is_accepted_from_sm89(arch):
    header = "kernel f(q: f8e4m3[N], y: out f32[N])\n    grid (1,)\n"
    kernel("    y[0 : 4] = (q[0 : 4].to(f32) * 2.0).to(f8e4m3).to(f32)", header=header, arch=arch)


def test_every_expression_has_a_dtype_after_infer_dtypes():
    k = kernel("    r = sum(exp(a[0 : 16] - max(a[0 : 16])))\n    y[0] = r", "infer_dtypes")
    for e in nodes(k.body, A.Expr):
        if not isinstance(e, (A.Slice, A.NewAxis)):
            assert e.ty is not None and e.ty.dtype is not None, e
    tensor = [n for n in nodes(k.body, A.Name) if n.id == "a"][0]
    assert tensor.ty.what == "tensor" and tensor.ty.dtype is DType.F16


def test_weak_literal_assigned_to_float_variable_takes_its_dtype():
    k = kernel("    acc = 0.0\n    for j in range(4) { acc = 1 }\n    t = a[0 : 16]\n    t = 0.5", "infer_dtypes")
    vals = [s.value for s in nodes(k.body, A.Assign)]
    assert [v.ty.dtype for v in vals] == [DType.F32, DType.F32, DType.F16, DType.F16]


@pytest.mark.parametrize("stmts, message", [
    ("    r = c[0 : 4] // 2.0", "'//' is integer division; got f32 and f32 (use / for floats)"),
    ("    r = zeros(f32[16, 16]) @ zeros(bf16[16, 16])", "@ needs operands of one dtype, got f32 @ bf16"),
    ("    r = zeros(i32[16, 16]) @ zeros(i32[16, 16])", "@ needs float operands, got i32 @ i32"),
    ("    r = n and True", "'and' needs bool operands, got i32"),
    ("    r = not s", "'not' needs a bool, got f32"),
    ("    r = -(n > 0)", "cannot negate a bool; use 'not'"),
    ("    r = s & 1", "'&' needs bool or integer operands, got f32 and i32"),
    ("    y[0 : 16] = a[0 : 16]", "storing f16 into y: f32"),
    ("    r = 1\n    for j in range(4) { r = c[0] }", "'r' holds i32 (from line 4) but is assigned f32 here"),
    ("    r = a[0 : 4]\n    r = b[0 : 4]", "'r' holds f16 (from line 4) but is assigned bf16 here"),
    ("    r = c", "'r' must hold a tile or scalar, not the tensor 'c'"),
    ("    r = exp(c)", "exp() takes values, got the tensor 'c'; slice the tensor into a tile first"),
    ("    r = exp(1.0, 2.0)", "exp() takes 1 argument, got 2"),
    ("    r = where(n, 1, 2)", "the condition of where() must be a condition (bool), got i32"),
    ("    r = sum(c[0 : 4], dim = 0)", "sum() got an unexpected keyword argument 'dim'"),
    ("    r = max(s, 1.0, axis = 0)", "max() got an unexpected keyword argument 'axis'"),
    ("    r = zeros(4)", "zeros() takes a tile type such as f32[BLOCK] first, got the value '4'"),
    ("    r = c[0 : 4].to(f32, f16)", ".to() takes one dtype, e.g. .to(f32)"),
    ("    r = c[0 : 4].foo()", "unknown method '.foo()' (tiles have .to(dtype) and .T)"),
    ("    r = c[0 : 4].U", "unknown attribute '.U' (tiles and tensors have .T)"),
    ("    r = c[s]", "an index must be an integer, got f32"),
    ("    r = c[0 : 4, foo = 1.0]", "unknown subscript keyword 'foo' (other=VALUE, mask=CONDITION, and distinct=True on a store)"),
    ("    r = c[0.0 : 4.0]", "slice bounds must be integers, got f32"),
    ("    for j in range(0, s) { }", "a loop bound must be an integer, got f32"),
    ("    if n { }", "an if condition must be a condition (bool), got i32"),
    ("    r = zeros(f64[4])", "dtype f64 is not supported yet (use one of bf16, bool, f16, f32, f8e4m3, f8e5m2, i16, i32, i64, i8, u16, u8)"),
])
def test_dtype_errors(stmts, message):
    e = error(stmts)
    assert e.message == message
    assert e.span.line >= 4


def test_tensor_in_arithmetic_message():
    e = error("    r = c + 1.0")
    assert e.message == "the tensor 'c' cannot be used in arithmetic; slice it into a tile first"
    assert (e.span.line, e.span.col) == (4, 9)


def test_where_constraint_must_be_bool():
    header = "kernel f(y: out f32[N])\n    where N % 8\n    grid (N,)\n"
    e = error("", header=header)
    assert e.message == "a where constraint must be a condition (bool), got i32"
    assert (e.span.line, e.span.col) == (2, 11)


# ---------------------------------------------------------------- infer_shapes
def shape_of(stmts: str, name: str = "r", check: bool = True, header: str = HEADER):
    k = kernel(stmts, "infer_shapes", header=header, check=check)
    return assigned(k, name).ty.shape


@pytest.mark.parametrize("a, b, out", [
    ((), (), ()), ((4,), (), (4,)), ((), (4, 8), (4, 8)), ((4, 1), (1, 8), (4, 8)), ((1, 8), (4, 1), (4, 8)),
    ((8,), (4, 8), (4, 8)), ((4, 8), (4, 8), (4, 8)), ((4,), (8,), None), ((4, 8), (8, 4), None),
    ((1,), (1,), (1,)), ((2, 1, 4), (3, 1), (2, 3, 4)),
])
def test_broadcast_function(a, b, out):
    assert broadcast(a, b) == out


@pytest.mark.parametrize("text, shape", [
    ("c[0 : 64]", (64,)),
    ("c[j : j + 64]", (64,)),
    ("c[2 * j + 1 : 2 * j + 33]", (32,)),
    ("c[j + BLK : j + 2 * BLK]", (128,)),
    ("c[j]", ()),
    ("c[j : j + 16] + 1.0", (16,)),
    ("c[0 : 16][:, None] * c[0 : 32][None, :]", (16, 32)),
    ("c[0 : 16][:, None] + zeros(f32[16, 8])", (16, 8)),
    ("zeros(f32[4, 8]) + c[0 : 8]", (4, 8)),
    ("c[0 : 16][None, :, None]", (1, 16, 1)),
    ("zeros(f32[4, 8]).T", (8, 4)),
    ("zeros(f32[4, 8])[:, :]", (4, 8)),
    ("zeros(bf16[16, 32]) @ zeros(bf16[32, 64])", (16, 64)),
    ("sum(c[0 : 64])", ()),
    ("max(zeros(f32[4, 8]))", ()),
    ("where(c[0 : 16] > 0.0, c[0 : 16], 0.0)", (16,)),
    ("max(c[0 : 16], s)", (16,)),
    ("arange(j, j + 32)", (32,)),
    ("full(f32[8, 4], s)", (8, 4)),
    ("program_id(0) * BLK", ()),
    ("exp(c[0 : 8]).to(bf16)", (8,)),
])
def test_shape_rules(text, shape):
    assert shape_of(f"    j = program_id(0)\n    r = {text}") == shape


@pytest.mark.parametrize("text, shape", [
    ("sum(zeros(f32[4, 8]), axis = 1)", (4,)),
    ("sum(zeros(f32[4, 8]), axis = 0)", (8,)),
    ("sum(zeros(f32[4, 8]), axis = -1)", (4,)),
    ("max(zeros(f32[4, 8]), axis = 1, keepdims = True)", (4, 1)),
    ("mean(zeros(f32[4, 8]), axis = 0, keepdims = True)", (1, 8)),
    ("argmax(zeros(f32[4, 8]), axis = 1)", (4,)),
])
def test_reduction_with_axis_shapes(text, shape):
    # check=False: see test_reduction_axis_passes_verify for why
    assert shape_of(f"    r = {text}", check=False) == shape


def test_reduction_keepdims_without_axis():
    assert shape_of("    r = sum(zeros(f32[4, 8]), keepdims = True)") == (1, 1)


def test_reduction_axis_passes_verify():
    assert shape_of("    r = sum(zeros(f32[4, 8]), axis = 1)") == (4,)


def test_axis_is_normalized():
    k = kernel("    r = sum(zeros(f32[4, 8]), axis = -1)", "infer_shapes", check=False)
    assert assigned(k, "r").kwarg("axis").value == 1


def test_transposed_tensor_view():
    header = "kernel f(w: bf16[K, N], y: out bf16[N, K])\n    grid (1,)\n"
    k = kernel("    r = w.T[0 : 16, 0 : 32]\n    q = w.T.T[0 : 16, 0 : 32]\n    y[0 : 16, 0 : 32] = r", "infer_shapes",
               header=header)
    r = assigned(k, "r")
    assert r.ty.shape == (16, 32)
    view = r.base
    assert isinstance(view, A.Attr) and view.ty.what == "tensor"
    assert view.ty.shape == ("N", "K") and view.ty.layout == (1, 0)
    assert view.obj.ty.shape == ("K", "N")
    twice = assigned(k, "q").base
    assert twice.ty.shape == ("K", "N") and twice.ty.layout == (0, 1)


def test_tensors_keep_symbolic_shapes():
    header = "kernel f(w: bf16[K, 64], y: out bf16[K, 64])\n    grid (1,)\n"
    k = kernel("    r = w[0 : 4, :]\n    y[0 : 4, :] = r", "infer_shapes", header=header)
    assert assigned(k, "r").ty.shape == (4, 64)
    w = [n for n in nodes(k.body, A.Name) if n.id == "w"][0]
    assert w.ty.shape == ("K", 64)


def test_every_value_has_a_static_shape_after_infer_shapes():
    k = kernel("    j = program_id(0)\n    t = c[j : j + 32]\n    y[j : j + 32] = t * t + sum(t)", "infer_shapes")
    for e in nodes(k.body, A.Expr):
        if isinstance(e, (A.Slice, A.NewAxis)) or e.ty.what == "dtype":
            continue
        assert e.ty.shape is not None, e
        if e.ty.what == "value":
            assert all(isinstance(d, int) for d in e.ty.shape), e


@pytest.mark.parametrize("stmts, message", [
    ("    r = c[0 : 16] + c[0 : 32]", "shapes [16] and [32] do not broadcast for '+'"),
    ("    r = zeros(f32[4, 8]) * zeros(f32[8, 4])", "shapes [4, 8] and [8, 4] do not broadcast for '*'"),
    ("    r = zeros(f32[16, 32]) @ zeros(f32[16, 32])", "@ inner dimensions differ: [16, 32] @ [16, 32] (32 != 16)"),
    ("    r = zeros(f32[16]) @ zeros(f32[16, 32])", "@ multiplies 2-D tiles, got [16] @ [16, 32]"),
    ("    j = program_id(0)\n    r = c[j : 2 * j]", "the extent of slice 'j : 2 * j' must be a compile-time constant"),
    ("    r = c[0 : n]", "the extent of slice '0 : n' must be a compile-time constant"),
    ("    r = c[4 : 4]", "slice '4 : 4' is empty (extent 0)"),
    ("    r = c[:]", "':' along axis 0 would take all of 'N', which is not a compile-time size"),
    ("    r = c[:4]", "a slice needs both bounds: start : start + SIZE"),
    ("    r = zeros(f32[100])", "tile type f32[100] has shape [100]: tile dimensions must be powers of two"),
    ("    r = c[0 : 48]", "the tile read from 'c' has shape [48]: tile dimensions must be powers of two"),
    ("    r = zeros(f32[512, 256])", "tile type f32[512, 256] has 131072 elements, more than the 65536 a tile may hold"),
    ("    r = zeros(f32[n])", "a tile dimension must be a compile-time constant, got 'n'"),
    ("    y[0 : 16] = c[0 : 32]", "cannot store a value of shape [32] into 'y[0 : 16]' of shape [16]"),
    ("    y[0] = c[0 : 32]", "cannot store a value of shape [32] into 'y[0]' of shape scalar"),
    ("    r = c[0, 0 : 4]", "'c' has 1 dimension [N] but is indexed with 2"),
    ("    r = c[0 : 4][0]", "a tile can be indexed only with ':' and None (to add an axis); read smaller tiles from the tensor instead"),
    ("    r = c[0 : 4][:, :]", "too many ':' for a tile of shape [4]"),
    ("    r = zeros(f32[4, 4])[:]", "a tile of shape [4, 4] needs 2 ':' in its subscript, got 1"),
    ("    r = c[None, 0 : 4]", "None (new axis) applies to tiles, not to tensor reads; index the tile afterwards"),
    ("    r = s[0]", "a scalar cannot be indexed; use full(f32[N], v) to make a tile of it"),
    ("    r = c[zeros(i32[4, 4])]", "index 0 of 'c' is a tile of shape [4, 4]; an index tile must be 1-D (one row of the result per element)"),
    ("    r = program_id(3)", "program_id(3): the grid has 1 dimension"),
    ("    r = num_programs(n)", "the axis of num_programs() must be a compile-time constant, got 'n'"),
    ("    r = sum(s)", "sum() of a scalar: reduce a tile, or pass two values for the elementwise sum"),
    ("    r = sum(zeros(f32[4]), axis = 1)", "axis 1 is out of range for a tile of shape [4]"),
    ("    r = sum(zeros(f32[4]), keepdims = 1)", "keepdims must be True or False"),
    ("    r = sum(zeros(f32[4]), axis = n)", "the axis of sum() must be a compile-time constant, got 'n'"),
    ("    r = zeros(f32[4]).T", ".T transposes 2-D tiles and tensors, got shape [4]"),
    ("    r = arange(n, 2 * n)", "arange(start, stop) needs stop - start to be a positive compile-time constant, got '2 * n - n'"),
    ("    if c[0 : 4] > 0.0 { }", "an if condition (use where() to select between tiles) must be a scalar, got a tile of shape [4]"),
    ("    for j in range(0, N, 0) { }", "the loop step must be positive, got 0"),
    ("    r = c[0 : 4]\n    r = c[0 : 8]", "'r' has shape [4] (from line 4) but is assigned shape [8] here"),
    ("    r = c[0 : 4, other = c[0 : 4]]", "other= must be a scalar, got a tile of shape [4]"),
    ("    r = full(f32[4], c[0 : 4])", "the fill value of full() must be a scalar, got a tile of shape [4]"),
    ("    r = n > 0 and c[0 : 4] > 0.0", "an operand of 'and' must be a scalar, got a tile of shape [4]"),
])
def test_shape_errors(stmts, message):
    e = error(stmts)
    assert e.message == message
    assert e.span.line >= 4


def test_grid_must_be_scalar():
    # a tile in the grid is a CompileError at the grid expression: resolve_names allows only
    # symbols, compile-time parameters and cdiv/min/max there, so infer_shapes' scalar check
    # (wrapped in _at, so it would be a CompileError too) is not reached from source
    header = "kernel f(y: out f32[N])\n    grid (arange(0, 4),)\n"
    e = error("", header=header)
    assert e.message == "the launch grid may call only cdiv(), min() and max(), not arange()"
    assert (e.span.line, e.span.col) == (2, 11)


def test_program_id_axes_follow_the_grid():
    header = "kernel f(y: out f32[N])\n    grid (N, 2, 3)\n"
    k = kernel("    r = program_id(2) + num_programs(1)", "infer_shapes", header=header)
    assert assigned(k, "r").ty.shape == ()
    e = error("    r = program_id(1)", header="kernel f(y: out f32[N])\n    grid (N,)\n")
    assert e.message == "program_id(1): the grid has 1 dimension"
    e = error("    r = program_id(3)", header=header)
    assert e.message == "program_id(3): the grid has 3 dimensions"


# ---------------------------------------------------------------- check_constraints
def facts(where: str, stop: str = "check_constraints", **options):
    header = f"kernel f<BLK: int = 128>(a: f32[M, K], y: out f32[N])\n    where {where}\n    grid (N,)\n"
    return kernel("", stop, header=header, **options).facts


def test_facts_divisors_and_lower_bounds():
    f = facts("N % 8 == 0 and K >= 64, M > 3")
    assert f.divisors == {"N": 8} and f.lower == {"K": 64, "M": 4}
    assert f.divisor("N") == 8 and f.divisor("K") == 1 and f.minimum("K") == 64 and f.minimum("N") == 0


def test_facts_combine_divisors_as_lcm():
    f = facts("N % 8 == 0, N % 12 == 0, K >= 16, K >= 32, K > 8")
    assert f.divisors == {"N": 24} and f.lower == {"K": 32}


def test_facts_from_equality():
    f = facts("K == 128")
    assert f.divisors == {"K": 128} and f.lower == {"K": 128}


def test_facts_ignore_what_they_cannot_use():
    f = facts("N + K > 4, N != 3, M < 100, N % M == 0")
    assert f.divisors == {} and f.lower == {}


def test_constant_constraints_are_decided():
    f = facts("BLK % 8 == 0, N % 4 == 0")
    assert f.divisors == {"N": 4}
    with pytest.raises(CompileError) as ei:
        facts("BLK % 8 == 0, N % 4 == 0", defines={"BLK": 4})
    e = ei.value
    assert e.message == "constraint '4 % 8 == 0' is false for these compile-time parameters"
    assert e.notes == ("values: BLK = 4",)
    assert (e.span.line, e.span.col) == (2, 11)


def test_facts_before_check_constraints_are_unset():
    k = kernel("", "infer_shapes", header="kernel f(y: out f32[N])\n    where N % 8 == 0\n    grid (N,)\n")
    assert k.facts is None


# ---------------------------------------------------------------- the memory passes
def memory(stmts: str, header: str = HEADER, **options) -> A.Kernel:
    return kernel(stmts, "budget_smem", header=header, **options)


@pytest.mark.parametrize("elems, threads", [(16, 32), (256, 32), (512, 64), (1024, 128), (2048, 256), (8192, 256)])
def test_threads_per_block_follow_the_biggest_tile(elems, threads):
    k = memory(f"    r = zeros(f32[{elems}])")
    assert k.info.threads == threads


def test_threads_of_the_examples():
    got = {p.stem: compile_program(p.read_text(), p.name, check=True).kernels[0].info.threads for p in EXAMPLES}
    assert got == {"matmul": 128, "rmsnorm": 128, "softmax": 128, "swiglu": 128, "vector_add": 128,
                   "bmm": 256, "bmm_persistent": 256, "head_scores": 256,
                   "gemv_int8": 256, "gemv_int4": 256}  # wgmma: 2 consumer warpgroups


def test_choose_threads_decides_the_threads_memory_passes_use():
    from tilex.passes.choose_threads import LaunchConfig

    for p in EXAMPLES:
        chosen = compile_program(p.read_text(), p.name, stop_after="choose_threads", check=True).kernels[0].info
        final = compile_program(p.read_text(), p.name).kernels[0].info
        assert isinstance(chosen, LaunchConfig), p.stem
        assert (chosen.threads, chosen.producers) == (final.threads, final.producers), p.stem
        assert chosen.launch_threads == final.launch_threads


def test_choose_threads_follows_the_biggest_tile_before_the_memory_passes():
    k = kernel("    r = zeros(f32[2048])", "choose_threads")
    assert (k.info.threads, k.info.producers) == (256, 0)


@pytest.mark.parametrize("warps", [1, 2, 4, 8, 16, 32])
def test_warps_override(warps):
    header = "kernel f<WARPS: int = 4>(y: out f32[N])\n    grid (N,)\n"
    k = memory("    y[0 : 1024] = zeros(f32[1024])", header=header, defines={"WARPS": warps})
    assert k.info.threads == 32 * warps


@pytest.mark.parametrize("warps", [0, 3, 64])
def test_bad_warps(warps):
    header = "kernel f<WARPS: int = 4>(y: out f32[N])\n    grid (N,)\n"
    e = error("    y[0 : 1024] = zeros(f32[1024])", header=header, defines={"WARPS": warps})
    assert e.message == f"WARPS must be a power of two from 1 to 32, got {warps}"
    assert e.span.line == 1


@pytest.mark.parametrize("warps, blocks", [(8, 0), (8, 1), (8, 8), (2, 32), (32, 2)])
def test_min_blocks_reaches_launch_bounds(warps, blocks):
    from transpiler.pipeline import Options
    from transpiler.translate import translate

    src = ("kernel f<WARPS: int = 4, MIN_BLOCKS: int = 0>(y: out f32[N])\n    grid (N,)\n"
           "{\n    y[0 : 1024] = zeros(f32[1024])\n}\n")
    k = memory("    y[0 : 1024] = zeros(f32[1024])", header=src.split("{")[0],
               defines={"WARPS": warps, "MIN_BLOCKS": blocks})
    assert k.info.min_blocks == blocks
    cuda = translate(src, "f.tile", Options(defines={"WARPS": warps, "MIN_BLOCKS": blocks})).cuda
    want = f"__launch_bounds__({32 * warps}, {blocks})" if blocks else f"__launch_bounds__({32 * warps})"
    assert want + " f(" in cuda


@pytest.mark.parametrize("warps, blocks", [(8, 9), (32, 3), (1, 65), (4, -1)])
def test_bad_min_blocks(warps, blocks):
    header = "kernel f<WARPS: int = 4, MIN_BLOCKS: int = 0>(y: out f32[N])\n    grid (N,)\n"
    e = error("    y[0 : 1024] = zeros(f32[1024])", header=header, defines={"WARPS": warps, "MIN_BLOCKS": blocks})
    most = 2048 // (32 * warps)
    assert e.message == (f"MIN_BLOCKS must be an integer from 0 to {most} for {32 * warps} threads per block "
                         f"(at most 2048 threads per SM), got {blocks}")
    assert e.span.line == 1


def test_smem_for_a_cross_warp_reduction():
    k = memory("    r = sum(c[0 : 1024])\n    y[0] = r")
    assert k.info.threads == 128
    (use,) = k.info.uses
    assert use.what == "combining sum() across 4 warps" and use.bytes == 4 * 4 and use.line == 4
    assert k.info.smem_bytes == 16


def test_smem_of_a_reduction_within_one_warp_is_zero():
    k = memory("    r = sum(c[0 : 256])\n    y[0] = r")
    assert k.info.threads == 32 and k.info.uses == [] and k.info.smem_bytes == 0


def test_smem_of_the_examples():
    got = {p.stem: compile_program(p.read_text(), p.name, check=True).kernels[0].info for p in EXAMPLES}
    assert got["vector_add"].smem_bytes == 0 and got["swiglu"].smem_bytes == 0
    assert got["rmsnorm"].smem_bytes == 16
    assert [u.what for u in got["softmax"].uses] == ["combining max() across 4 warps", "combining sum() across 4 warps"]
    # matmul (tiles left to tilex: its choice at the nominal sizes, no launch facts, so the cp.async path):
    # a STAGES-deep ring of (BM * (BK + 8) + BK * (BN + 8)) bf16 elements per stage
    mm = compile_program((ROOT / "examples/matmul.tile").read_text(), "matmul.tile").kernels[0]
    d = dict(mm.defines)
    # (pitches unproven: the shifted ring's re-aligned stage besides the STAGES of the ring)
    assert got["matmul"].smem_bytes == (d["STAGES"] + 1) * (d["BM"] * (d["BK"] + 8) + d["BK"] * (d["BN"] + 8)) * 2


def test_reduction_result_layout_is_a_slice():
    # check=False: reductions with axis= trip the infer_shapes verify bug (test_reduction_axis_passes_verify)
    k = kernel("    t = zeros(f32[32, 64]) + 1.0\n    r = sum(t, axis = 1)\n    q = max(t, axis = 0, keepdims = True)",
               "budget_smem", check=False)
    t, r, q = (assigned(k, n) for n in ("t", "r", "q"))
    assert isinstance(t.ty.layout, Layout) and isinstance(r.ty.layout, Layout)
    assert r.ty.layout.root == t.ty.layout.root
    assert r.ty.layout.dims == (0,) and r.ty.layout.shape == (32,)
    assert r.ty.layout == t.ty.layout.reduce(1)
    assert set(r.ty.layout.digits) < set(t.ty.layout.digits)
    assert q.ty.layout.dims == (None, 1) and q.ty.layout.shape == (1, 64)
    assert k.info.var_layouts["r"] == r.ty.layout


def test_full_reduction_is_uniform():
    k = memory("    t = c[0 : 1024]\n    r = sum(t)\n    y[0] = r")
    r = assigned(k, "r")
    assert r.ty.space is MemSpace.UNIFORM and r.ty.layout is None
    assert r.args[0].ty.space is MemSpace.REGISTERS and isinstance(r.args[0].ty.layout, Layout)


def test_spaces_and_layouts_everywhere():
    k = memory("    j = program_id(0) * BLK\n    t = c[j : j + BLK] * s\n    u = t[:, None] * t[None, :]\n"
               "    y[j : j + BLK] = (t + sum(u) + exp(t)).to(f32)\n"
               "    w = zeros(bf16[32, 16]) @ zeros(bf16[16, 32])")
    for e in nodes(k.body, A.Expr):
        if isinstance(e, (A.Slice, A.NewAxis)) or e.ty.what in ("dtype", "type"):
            continue
        if e.ty.what == "tensor":
            assert e.ty.space is MemSpace.GLOBAL, e
        elif e.ty.shape == ():
            assert e.ty.space is MemSpace.UNIFORM, e
        else:
            assert e.ty.space in (MemSpace.REGISTERS, MemSpace.SHARED), e
            assert isinstance(e.ty.layout, Layout) and e.ty.layout.shape == e.ty.shape, e
    mm = assigned(k, "w")
    assert mm.lhs.ty.space is MemSpace.SHARED and mm.rhs.ty.space is MemSpace.SHARED
    assert mm.ty.space is MemSpace.REGISTERS


def test_elementwise_result_takes_the_accumulators_layout():
    k = memory("    acc = zeros(f32[1024])\n    t = c[0 : 1024]\n    acc += t * t")
    acc0, acc1 = [s.value for s in nodes(k.body, A.Assign) if s.name == "acc"]
    assert acc1.ty.layout == acc0.ty.layout
    assert not [u for u in k.info.uses if "converting" in u.what]


@pytest.mark.parametrize("stmts", [
    "    r = c[0 : 16] + 1.0",
    "    r = zeros(f32[8, 16]).T",
    "    r = c[0 : 16][:, None]",
    "    r = where(c[0 : 64] > 0.0, c[0 : 64], 0.0)",
])
def test_every_tile_has_a_layout(stmts):
    k = memory(stmts)  # verify() already ran after budget_smem; check the assigned value directly too
    r = assigned(k, "r")
    assert isinstance(r.ty.layout, Layout) and r.ty.layout.shape == r.ty.shape


def test_transposed_tile_layout_is_a_view():
    k = memory("    t = zeros(f32[8, 16]) + 1.0\n    r = t.T")
    t, r = assigned(k, "t"), assigned(k, "r")
    assert r.ty.layout == t.ty.layout.transpose() and r.ty.layout.root == t.ty.layout.root


def test_smem_limit_by_arch():
    src = (ROOT / "examples/matmul.tile").read_text()
    assert compile_program(src, "matmul.tile", Options(arch="sm_90a"), check=True).kernels[0].info.smem_limit == 232448
    assert compile_program(src, "matmul.tile", Options(arch="sm_80"), check=True).kernels[0].info.smem_limit == 166912
    assert compile_program(src, "matmul.tile", Options(arch="sm_75"), check=True).kernels[0].info.smem_limit == 49152


def test_shared_memory_budget_exceeded():
    src = (ROOT / "examples/matmul.tile").read_text()
    with pytest.raises(CompileError) as ei:
        compile_program(src, "matmul.tile", Options(defines={"BM": 256, "BN": 256, "BK": 256, "STAGES": 2},
                                                      arch="sm_90a"), check=True)
    e = ei.value
    assert "shared memory" in e.message
    # 2 stages and the re-aligned one (pitches unproven) of (256 * 264 + 256 * 264) * 2 bytes
    assert "811008 bytes" in e.message and "232448" in e.message
    assert e.span.line == next(i for i, ln in enumerate(src.splitlines(), 1) if "pipeline(" in ln)
    assert e.notes and "-D" in e.notes[0]


def test_shared_memory_budget_depends_on_arch():
    src = (ROOT / "examples/matmul.tile").read_text()
    # 2 stages and the re-aligned one (pitches unproven) of (256 * 72 + 64 * 136) * 2 = 162816 bytes
    opts = {"BM": 256, "BN": 128, "BK": 64, "STAGES": 2}
    k = compile_program(src, "matmul.tile", Options(defines=opts, arch="sm_90a"), check=True).kernels[0]
    assert k.info.smem_bytes == 162816
    with pytest.raises(CompileError) as ei:
        compile_program(src, "matmul.tile", Options(defines=opts, arch="sm_86"), check=True)
    assert "162816 bytes of shared memory" in ei.value.message and "101376" in ei.value.message


def test_argmax_of_i64_counts_value_and_index_bytes():
    """Cross-warp argmax keeps (value, i32 index) pairs: 8 + 4 bytes per warp for i64 values."""
    k = memory("    y[0] = argmax(x[0 : 1024])", header="kernel f(x: i64[N], y: out i32[1])\n    grid (1,)\n")
    groups = k.info.threads // 32
    assert [u.bytes for u in k.info.uses] == [groups * (8 + 4)]


def test_program_id_axis_may_be_a_constant_expression():
    """program_id(1 - 1) is program_id(0) everywhere after the shape pass (codegen used to read the
    argument as a literal and crash with an AttributeError)."""
    from transpiler.pipeline import Options
    from transpiler.translate import translate

    src = "kernel f(y: out i32[N])\n    grid (N, 2)\n{\n    y[program_id(1 - 1)] = program_id(2 - 1) + num_programs(0 * 3)\n}\n"
    cuda = translate(src, "f.tile", Options()).cuda
    assert "(int)blockIdx.x" in cuda and "(int)blockIdx.y" in cuda and "(int)gridDim.x" in cuda


# ---------------------------------------------------------------- budget_smem (the shared-memory policy)
def _attention_sm80(stages: int) -> A.Program:
    from tilex.stdlib import _launch as L

    return compile_program(L.source("attention_prefill"), "a.tile",
                           Options(arch="sm_80", defines=dict(STAGES=stages)), stop_after="choose_mma")


def _streamed_stages(program: A.Program) -> set:
    return {t.stages for k in program.kernels for f in nodes(k.body, A.For) for t in f.stream}


def test_smem_policy_is_the_pipelines_list():
    from tilex import pipeline
    from tilex.passes.budget_smem import SMEM_POLICY, fewer_stream_stages, no_register_streams, shallower_ring

    assert pipeline.SMEM_POLICY == SMEM_POLICY == (fewer_stream_stages, no_register_streams, shallower_ring)


def test_smem_policy_decides_what_a_kernel_over_budget_gives_up():
    """3 stages of attention_prefill's k and v rings do not fit on sm_80: the default policy's first
    fallback gives them 2; with no fallback the budget's error is raised instead."""
    from tilex.passes.budget_smem import SMEM_POLICY, shallower_ring
    from tilex.pipeline import fit_memory

    prog, sm80 = _attention_sm80(3), Options(arch="sm_80")
    fitted = fit_memory(prog, sm80, SMEM_POLICY)
    assert _streamed_stages(fitted) == {2}
    assert all(k.info.smem_bytes <= k.info.smem_limit for k in fitted.kernels)
    for policy in ((), (shallower_ring,)):  # no fallback that applies to streamed rings
        with pytest.raises(CompileError) as e:
            fit_memory(prog, sm80, policy)
        assert "bytes of shared memory; the target allows" in e.value.message
    assert _streamed_stages(fit_memory(_attention_sm80(2), sm80, ())) == {2}  # fits as asked


def test_the_memory_passes_need_choose_threads():
    prog = compile_program(HEADER + "{\n    y[0 : 16] = zeros(f32[16])\n}\n", stop_after="plan_matmul")
    from tilex.passes.place_resident import place_resident

    with pytest.raises(Exception, match="needs choose_threads"):
        place_resident(prog, target("sm_90a"))
