"""The closed sets as enums, the one dtype table, the Target table and the typed launch parameters (issue 21
items 3 and 4): what each promises, checked against independent facts (NumPy, torch, ctypes) or against the
older spelling it replaces."""
from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

from tilex import ast as A
from tilex.builtins import FUNCTIONS, BuiltinKind, is_reduction
from tilex.diagnostics import CompileError
from tilex.launch_params import KernelLaunch, requested_launch
from tilex.parser import parse
from tilex.pipeline import Options, compile_program
from tilex.spec import ParamKind
from tilex.targets import DEFAULT_ARCH, TARGETS, resolve_arch, target
from tilex.translate import translate
from tilex.types import DTYPES, PARAM_DTYPES, SUPPORTED, DType, MmaStrategy, TyWhat, numpy_dtype

ELEMENTWISE = """kernel k<BLOCK: int = 256{cp}>(x: f32[N], y: out f32[N]) grid (cdiv(N, BLOCK),) {{
    i = program_id(0) * BLOCK
    y[i : i + BLOCK] = x[i : i + BLOCK] * 2.0
}}
"""


# ---------------------------------------------------------------- str-valued enums
@pytest.mark.parametrize("member", [DType.BF16, TyWhat.TENSOR, MmaStrategy.WGMMA, BuiltinKind.REDUCE,
                                    ParamKind.SCALAR, A.CParamKind.WARPS])
def test_str_enums_behave_as_their_value(member):
    text = member.value
    assert member == text and hash(member) == hash(text) and {text: 1}[member] == 1
    assert str(member) == f"{member}" == "%s" % member == text
    assert json.dumps({member: [member]}) == json.dumps({text: [text]})
    assert type(member)(text) is member


def test_the_ast_holds_dtypes():
    k = parse("kernel k(x: bf16[N], s: f32, y: out f32[N]) grid (1,) {\n y[0 : 16] = zeros(f32[16]) + x[0 : 16].to(f32)\n}\n",
              "t.tile").kernels[0]
    assert [p.type.dtype for p in k.params] == [DType.BF16, DType.F32, DType.F32]
    assert all(type(p.type.dtype) is DType for p in k.params)
    found = []

    def walk(n):
        if isinstance(n, (A.DTypeLit, A.TileTypeExpr)):
            found.append(n.dtype)
        for c in n.children() if hasattr(n, "children") else ():
            walk(c)

    for s in k.body.stmts:
        walk(s.value)
    assert sorted(found) == [DType.F32, DType.F32] and all(type(d) is DType for d in found)


def test_launch_specs_carry_enum_kinds_and_dtypes():
    spec = translate("kernel k(x: bf16[N], s: f32, y: out f32[N]) grid (1,) {\n y[0 : 16] = x[0 : 16].to(f32) * s\n}\n",
                     "t.tile").specs["k"]
    assert [(p.kind, p.dtype) for p in spec.params] == [("tensor", "bf16"), ("scalar", "f32"), ("tensor", "f32")]
    assert [type(p.dtype) for p in spec.params] == [DType] * 3
    assert spec.params[0].kind == ParamKind.TENSOR


def test_f64_is_read_but_not_supported_yet():
    compile_program("kernel k(x: f8e5m2[N], y: out f32[N]) grid (1,) {\n y[0 : 16] = x[0 : 16].to(f32)\n}\n")
    with pytest.raises(CompileError, match="dtype f64 is not supported yet"):
        compile_program("kernel k(x: f64[N], y: out f32[N]) grid (1,) {\n y[0 : 16] = x[0 : 16].to(f32)\n}\n")


def test_builtin_kinds_and_reductions():
    assert {b.kind for b in FUNCTIONS.values()} <= set(BuiltinKind)
    call = lambda f, n: A.Call(f, tuple(A.IntLit(0) for _ in range(n)), ())  # noqa: E731
    assert [f for f in FUNCTIONS if is_reduction(call(f, 1))] == ["max", "min", "sum", "mean", "argmax", "argmin"]
    assert not is_reduction(call("max", 2)) and not is_reduction(call("exp", 1))


# ---------------------------------------------------------------- the dtype table
@pytest.mark.parametrize("dt", list(DType))
def test_dtype_info_agrees_with_numpy(dt):
    info = dt.info
    assert info.name == dt.value and info.itemsize * 8 == info.bits
    npd = numpy_dtype(dt)
    assert npd.itemsize == info.itemsize
    assert (npd.kind == "f" or npd.name.startswith(("bfloat16", "float8"))) == dt.is_float
    assert (npd.kind in "iu") == dt.is_int and (npd.kind == "b") == dt.is_bool
    if dt.is_int:
        assert (npd.kind == "i") == info.signed


@pytest.mark.parametrize("dt", list(DType))
def test_dtype_info_agrees_with_torch(dt):
    torch = pytest.importorskip("torch")
    t = getattr(torch, dt.info.torch)
    assert t.itemsize == dt.itemsize and t.is_floating_point == dt.is_float


def test_kernel_parameter_facts():
    assert set(PARAM_DTYPES) == SUPPORTED == {d for d, i in DTYPES.items() if i.param}
    for d in PARAM_DTYPES:
        c = getattr(ctypes, d.info.scalar_arg)
        # narrow floats are passed as float (the kernel rounds), narrow ints as int; the others at their own width
        assert ctypes.sizeof(c) == (4 if d.is_float or d.is_narrow_int else d.itemsize)  # narrow ones as int


def test_the_runtime_tables_are_the_hand_written_ones():
    """The tables of runtime/arrays, runtime/plan and stdlib/_launch, now read from DTYPES, have the values
    they were written with."""
    from tilex.runtime import arrays, plan
    narrow = ("i8", "u8", "i16", "u16")
    assert arrays._NUMPY_NAMES == ("f16", "bf16", "f32", "i32", "i64", "bool", "f8e4m3", *narrow, "f8e5m2")
    assert arrays._TORCH_NAMES == {"f16": "torch.float16", "bf16": "torch.bfloat16", "f32": "torch.float32",
                                 "i32": "torch.int32", "i64": "torch.int64", "bool": "torch.bool",
                                 "f8e4m3": "torch.float8_e4m3fn", "i8": "torch.int8", "u8": "torch.uint8",
                                 "i16": "torch.int16", "u16": "torch.uint16", "f8e5m2": "torch.float8_e5m2"}
    assert plan._SCALAR_CTYPES == {"f32": ctypes.c_float, "f16": ctypes.c_float, "bf16": ctypes.c_float,
                                   "f8e4m3": ctypes.c_float, "i32": ctypes.c_int32, "i64": ctypes.c_int64,
                                   "bool": ctypes.c_bool, **{n: ctypes.c_int32 for n in narrow},
                                   "f8e5m2": ctypes.c_float}
    assert arrays.numpy_dtype("bf16") == numpy_dtype(DType.BF16) and arrays.numpy_dtype("i64") == np.dtype(np.int64)


# ---------------------------------------------------------------- targets
def test_target_table():
    h = target(DEFAULT_ARCH)
    assert (h.arch, h.smem_per_block, h.wgmma, h.tma, h.mma, h.cp_async, h.fp8, h.cc) == \
        ("sm_90a", 232448, True, True, True, True, True, 90)
    assert [a for a, t in TARGETS.items() if t.wgmma] == ["sm_90a"]
    assert not target("sm_80").fp8 and target("sm_89").fp8 and target("sm_80").mma
    assert all(t.smem_per_block <= t.smem_per_sm for t in TARGETS.values())


def test_unknown_targets_get_the_defaults():
    t = target("sm_75")
    assert (t.smem_per_block, t.mma, t.cp_async, t.wgmma, t.fp8) == (49152, False, False, False, False)
    assert target("sm_121").fp8 and target("compute_xx").fp8 and target("compute_xx").cc is None


def test_options_carry_the_target():
    assert Options().target is target(DEFAULT_ARCH)
    assert Options(arch="sm_80").target.smem_per_block == 166912


def test_the_passes_read_the_target():
    """The shared-memory limit infer_memory records and the f8e4m3 check come from the Target."""
    src = ELEMENTWISE.format(cp="")
    for arch in ("sm_80", "sm_90a", "sm_75"):
        k = compile_program(src, options=Options(arch=arch)).kernels[0]
        assert k.info.smem_limit == target(arch).smem_per_block
    f8 = "kernel k(x: f8e4m3[N], y: out f32[N]) grid (1,) {\n y[0 : 16] = x[0 : 16].to(f32)\n}\n"
    compile_program(f8, options=Options(arch="sm_89"))
    with pytest.raises(CompileError, match="needs sm_89 or later; the target is sm_80"):
        compile_program(f8, options=Options(arch="sm_80"))


def test_resolve_arch(monkeypatch):
    assert resolve_arch("sm_80") == "sm_80"
    import tilex.runtime.nvrtc as nvrtc

    monkeypatch.setattr(nvrtc, "default_arch", lambda: "sm_86")
    assert resolve_arch() == "sm_86"

    def no_gpu():
        raise RuntimeError("no device")

    monkeypatch.setattr(nvrtc, "default_arch", no_gpu)
    assert resolve_arch() == DEFAULT_ARCH


def test_module_carries_its_target():
    import tilex

    m = tilex.compile(ELEMENTWISE.format(cp=""), arch="sm_80")
    assert m.target is target("sm_80")


# ---------------------------------------------------------------- launch parameters
def _cuda_body(cuda: str) -> str:
    """The generated CUDA without the lines that name the file or the parameters."""
    return "\n".join(line for line in cuda.splitlines() if not line.startswith("//") and "tile:" not in line)


@pytest.mark.parametrize("typed, legacy", [("NW: warps = 2, MB: min_blocks = 3", "WARPS: int = 2, MIN_BLOCKS: int = 3"),
                                           ("NW: warps = 4", "WARPS: int = 4"),
                                           ("MB: min_blocks = 2", "MIN_BLOCKS: int = 2")])
def test_typed_launch_parameters_are_the_legacy_names(typed, legacy):
    new = translate(ELEMENTWISE.format(cp=", " + typed), "t.tile")
    old = translate(ELEMENTWISE.format(cp=", " + legacy), "t.tile")
    assert _cuda_body(new.cuda) == _cuda_body(old.cuda)
    assert new.specs["k"].threads == old.specs["k"].threads


def test_requested_launch_reads_both_spellings():
    def launch(cp, **defines):
        k = compile_program(ELEMENTWISE.format(cp=cp), options=Options(defines=defines),
                            stop_after="resolve_names").kernels[0]
        return requested_launch(k)

    assert launch("") == KernelLaunch()
    assert launch(", NW: warps = 2", NW=8) == KernelLaunch(warps=8)
    got = launch(", WARPS: int = 2, MIN_BLOCKS: int = 1")
    assert got == KernelLaunch(2, 1) and got.names == {"warps": "WARPS", "min_blocks": "MIN_BLOCKS"}
    assert compile_program(ELEMENTWISE.format(cp=", NW: warps = 2"), options=Options(defines={"NW": 8})) \
        .kernels[0].info.threads == 256


def test_launch_parameter_errors_name_the_parameter():
    with pytest.raises(CompileError, match="NW must be a power of two from 1 to 32, got 3"):
        compile_program(ELEMENTWISE.format(cp=", NW: warps = 3"))
    with pytest.raises(CompileError, match="MB must be an integer from 0 to 32 for 64 threads per block"):
        compile_program(ELEMENTWISE.format(cp=", NW: warps = 2, MB: min_blocks = 40"))
    with pytest.raises(CompileError, match="declares two warps parameters \\('WARPS' and 'NW'\\)"):
        compile_program(ELEMENTWISE.format(cp=", WARPS: int = 2, NW: warps = 2"))
    with pytest.raises(CompileError, match="'NW' is warps, got 2.5"):
        compile_program(ELEMENTWISE.format(cp=", NW: warps = 2"), options=Options(defines={"NW": 2.5}))
    with pytest.raises(CompileError, match="unknown type 'wraps'"):
        compile_program(ELEMENTWISE.format(cp=", NW: wraps = 2"))


def test_tune_and_auto_know_the_warps_type():
    from tilex.autoconfig import declared_space
    from tilex.tune import WARP_BOUNDS, default_candidates

    assert default_candidates("NW", A.CParamKind.WARPS, 4) == default_candidates("WARPS", "int", 4)
    assert all(WARP_BOUNDS[0] <= v <= WARP_BOUNDS[1] for v in default_candidates("NW", A.CParamKind.WARPS, 32))
    k = parse(ELEMENTWISE.format(cp=", NW: warps = auto"), "t.tile").kernels[0]
    legacy = parse(ELEMENTWISE.format(cp=", WARPS: int = auto"), "t.tile").kernels[0]
    assert declared_space(k)["NW"] == declared_space(legacy)["WARPS"]


@pytest.mark.gpu
def test_typed_launch_parameters_on_the_gpu():
    """On a GPU: the module's Target is the device's, and a kernel with typed launch parameters (64 threads,
    __launch_bounds__(64, 3)) writes exactly 2 * x at an odd size, nothing past N."""
    cp = pytest.importorskip("cupy")
    import tilex
    from tilex.runtime.nvrtc import default_arch

    m = tilex.compile(ELEMENTWISE.format(cp=", NW: warps = 2, MB: min_blocks = 3"))
    assert m.target is target(default_arch())
    assert m.specs["k"].threads == 64
    x = np.random.default_rng().standard_normal(1001).astype(np.float32)
    y = cp.full(1001 + 7, np.nan, np.float32)
    m.k(x=cp.asarray(x), y=y[:1001])
    got = cp.asnumpy(y)
    np.testing.assert_array_equal(got[:1001], x * np.float32(2.0))
    assert np.isnan(got[1001:]).all()
