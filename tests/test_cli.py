"""The `tilex` command line: translate, check, run, explain, and its error reporting.

Most tests invoke the Typer app in-process (CliRunner keeps stdout and stderr apart);
a few go through `python -m tilex` in a subprocess to see exactly what a user sees.
Tests that need CUDA code generation skip while `tilex.codegen.generate` cannot be
imported; tests that need the interpreter skip while `tilex.interp` cannot.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from typer.testing import CliRunner

from tilex import __version__
from tilex.cli import app
from tilex.explain import dump_ir, explain
from tilex.inputs import (InputError, compare, load_input, make_inputs, parse_defines, parse_literal,
                          parse_shapes, resolve_symbols)
from tilex.launchspec import make_spec
from tilex.pipeline import PASS_NAMES, compile_file
from tilex.spec import ParamSpec

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
VECTOR_ADD = str(EXAMPLES / "vector_add.tile")
RMSNORM = str(EXAMPLES / "rmsnorm.tile")
MATMUL = str(EXAMPLES / "matmul.tile")

try:
    from tilex.codegen import generate as _generate  # noqa: F401
    HAVE_CODEGEN = True
except ImportError:
    HAVE_CODEGEN = False
try:
    import tilex.interp  # noqa: F401
    HAVE_INTERP = True
except ImportError:
    HAVE_INTERP = False

needs_codegen = pytest.mark.skipif(not HAVE_CODEGEN, reason="tilex.codegen.generate is not available yet")
needs_interp = pytest.mark.skipif(not HAVE_INTERP, reason="tilex.interp is not available yet")

BAD_SOURCE = """\
kernel f(x: f32[N], y: out f32[N])
    grid (N,)
{
    y[0 : 4] = x[0 : 4] + zz
}
"""

TWO_KERNELS = """\
kernel scale<BLOCK: int = 256>(x: f32[N], y: out f32[N], s: f32)
    grid (cdiv(N, BLOCK),)
{
    i = program_id(0) * BLOCK
    y[i : i + BLOCK] = x[i : i + BLOCK] * s
}
kernel incr<BLOCK: int = 256>(x: i32[N], y: out i32[N])
    grid (cdiv(N, BLOCK),)
{
    i = program_id(0) * BLOCK
    y[i : i + BLOCK] = x[i : i + BLOCK] + 1
}
"""


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    try:  # Click < 8.2 mixes stderr into stdout unless told not to
        return CliRunner(mix_stderr=False)
    except TypeError:
        return CliRunner()


def invoke(runner, *args):
    return runner.invoke(app, [str(a) for a in args])


def tilex_subprocess(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tilex", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def no_traceback(text: str) -> None:
    assert "Traceback" not in text
    assert "transpiler/" not in text and ".py" not in text, text


# ---------------------------------------------------------------- basics
def test_version(runner):
    r = invoke(runner, "--version")
    assert r.exit_code == 0
    assert r.stdout.strip() == f"tilex {__version__}"


@pytest.mark.parametrize("command,words", [
    ("translate", ["--output", "--kernel", "--arch", "--define", "--host", "--dump-after", "_host.cu"]),
    ("check", ["--kernel", "--define"]),
    ("run", ["--shape", "--backend", "--seed", "--input", "--arg", "--bench", "--json", "--define"]),
    ("explain", ["--kernel", "--define", "--json"]),
])
def test_help(runner, command, words):
    r = invoke(runner, command, "--help")
    assert r.exit_code == 0, r.output
    for w in words:
        assert w in r.stdout, (w, r.stdout)


def test_missing_file(runner, tmp_path):
    missing = tmp_path / "nope.tile"
    for cmd in ("check", "translate", "explain"):
        r = invoke(runner, cmd, missing)
        assert r.exit_code == 1
        assert f"error: {missing}: No such file" in r.stderr
        assert r.exception is None or isinstance(r.exception, SystemExit)


def test_usage_errors_exit_2(runner):
    assert invoke(runner, "translate", VECTOR_ADD, "--dump-after", "no_such_pass").exit_code == 2
    assert invoke(runner, "run", VECTOR_ADD, "--backend", "gpu").exit_code == 2
    assert invoke(runner, "run", VECTOR_ADD, "--shape", "N=abc").exit_code == 2
    assert invoke(runner, "check", VECTOR_ADD, "-D", "BLOCK").exit_code == 2
    assert invoke(runner, "check", VECTOR_ADD, "-D", "BLOCK=notanumber").exit_code == 2
    assert invoke(runner, "nosuchcommand").exit_code == 2


# ---------------------------------------------------------------- translate
@needs_codegen
def test_translate_stdout_and_file_deterministic(runner, tmp_path):
    r1 = invoke(runner, "translate", RMSNORM)
    r2 = invoke(runner, "translate", RMSNORM)
    assert r1.exit_code == 0, r1.output
    assert "__global__" in r1.stdout
    assert r1.stdout == r2.stdout
    out1, out2 = tmp_path / "a" / "rmsnorm.cu", tmp_path / "b.cu"
    assert invoke(runner, "translate", RMSNORM, "-o", out1).exit_code == 0
    assert invoke(runner, "translate", RMSNORM, "-o", out2).exit_code == 0
    assert out1.read_bytes() == out2.read_bytes()
    assert "__global__" in out1.read_text()
    assert out1.read_text() == r1.stdout


@needs_codegen
def test_translate_host(runner, tmp_path):
    out = tmp_path / "vadd.cu"
    r = invoke(runner, "translate", VECTOR_ADD, "--host", "-o", out)
    assert r.exit_code == 0, r.output
    assert out.is_file() and "__global__" in out.read_text()
    host = tmp_path / "vadd_host.cu"
    assert host.is_file() and host.read_text().strip()
    r = invoke(runner, "translate", VECTOR_ADD, "--host")
    assert r.exit_code == 0 and "host launcher" in r.stdout


@needs_codegen
def test_translate_subprocess_and_defines(tmp_path):
    r = tilex_subprocess("translate", VECTOR_ADD, "-D", "BLOCK=256", "-o", tmp_path / "v.cu")
    assert r.returncode == 0, r.stderr
    assert "__global__" in (tmp_path / "v.cu").read_text()


@pytest.mark.parametrize("pass_name", PASS_NAMES)
def test_dump_after_each_pass(runner, pass_name):
    r = invoke(runner, "translate", RMSNORM, "--dump-after", pass_name)
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "kernel rmsnorm" in out
    assert "param x: bf16[M, N]" in out and "param eps: f32 = 1e-06" in out
    assert "__global__" not in out
    assert "   5 |" in out and "  13 |" in out  # statements carry source line numbers
    if PASS_NAMES.index(pass_name) >= PASS_NAMES.index("infer_shapes"):
        assert "f32[1024]" in out  # tile types of expressions
    if pass_name == "parse":
        assert "`" not in out  # nothing is typed yet
    at = PASS_NAMES.index(pass_name)
    if at >= PASS_NAMES.index("assign_layouts"):
        assert "@registers" in out or "@uniform" in out
    if PASS_NAMES.index("choose_threads") <= at < PASS_NAMES.index("assign_layouts"):
        assert "info: threads = 128" in out and "@registers" not in out  # threads chosen, no memory yet
    # the shared memory in all: budget_smem's KernelMemory
    assert ("smem_bytes = " in out) == (at >= PASS_NAMES.index("budget_smem"))


def test_every_pass_is_in_the_dump_after_help(runner):
    r = invoke(runner, "translate", "--help")
    text = " ".join(r.output.split())  # rich wraps the help
    assert all(name in text.replace(" ", "").split("PASS(oneof:")[1] for name in PASS_NAMES), text


@pytest.mark.parametrize("pass_name", ["choose_mma", "place_resident", "plan_streams", "assign_layouts", "plan_tma",
                                       "budget_smem"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_dump_after_each_memory_pass_of_attention(runner, pass_name, arch):
    """attention_prefill: streamed rings (TMA-filled on sm_90a), a resident q, wgmma products; on sm_80 its
    3-stage rings do not fit and the memory passes run again with 2 (the dump shows the last attempt)."""
    src = str(ROOT / "stdlib_kernels" / "attention_prefill.tile")
    r = invoke(runner, "translate", src, "--arch", arch, "-D", "STAGES=3", "--dump-after", pass_name)
    assert r.exit_code == 0, r.output
    assert "kernel attention_prefill" in r.stdout and "for n0 in pipeline(" in r.stdout
    assert ("@registers" in r.stdout) == (PASS_NAMES.index(pass_name) >= PASS_NAMES.index("assign_layouts"))


def test_dump_after_to_file(runner, tmp_path):
    out = tmp_path / "ir.txt"
    r = invoke(runner, "translate", MATMUL, "--dump-after", "infer_shapes", "-o", out)
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "kernel matmul" in text and "for k in pipeline(" in text and "@" in text


def test_dump_ir_api():
    text = dump_ir(compile_file(VECTOR_ADD))
    assert text.startswith("kernel vector_add")
    assert "`x[i : i + 1024] + y[i : i + 1024]` f32[1024]" in text


# ---------------------------------------------------------------- check
@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.tile")))
def test_check_examples_ok(runner, example):
    path = str(EXAMPLES / example)
    r = invoke(runner, "check", path)
    assert r.exit_code == 0, r.output
    assert r.stdout == f"{path}: ok (1 kernel)\n"


def test_check_counts_kernels(runner, tmp_path):
    f = tmp_path / "two.tile"
    f.write_text(TWO_KERNELS)
    r = invoke(runner, "check", f)
    assert r.exit_code == 0 and r.stdout.strip() == f"{f}: ok (2 kernels)"


def test_check_bad_program(tmp_path):
    f = tmp_path / "bad.tile"
    f.write_text(BAD_SOURCE)
    r = tilex_subprocess("check", "bad.tile", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stdout == ""
    err = r.stderr
    assert "bad.tile:4:27: error:" in err and "zz" in err
    lines = err.splitlines()
    caret = [ln for ln in lines if "^" in ln]
    assert caret and caret[0].index("^") == lines[lines.index(caret[0]) - 1].index("zz")
    no_traceback(err)


def test_bad_define_name(runner):
    r = invoke(runner, "check", RMSNORM, "-D", "NOPE=3")
    assert r.exit_code == 1
    assert "-D NOPE" in r.stderr and "BLOCK" in r.stderr
    no_traceback(r.stderr)


def test_define_value_is_used(runner):
    r = invoke(runner, "check", RMSNORM, "-D", "BLOCK=100")  # not a power of two
    assert r.exit_code == 1 and "error:" in r.stderr and "^" in r.stderr
    r = invoke(runner, "explain", RMSNORM, "-D", "BLOCK=256", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["defines"] == {"BLOCK": 256}


def test_unknown_kernel(runner):
    r = invoke(runner, "check", RMSNORM, "--kernel", "nope")
    assert r.exit_code == 1 and "no kernel named 'nope'" in r.stderr and "rmsnorm" in r.stderr


# ---------------------------------------------------------------- run
def run_json(runner, *args):
    r = invoke(runner, "run", *args, "--json")
    data = json.loads(r.stdout)  # exactly one JSON object, nothing else
    assert isinstance(data, dict)
    return r, data


@needs_interp
def test_run_interp_json_vector_add(runner, tmp_path):
    r, data = run_json(runner, VECTOR_ADD, "--shape", "N=3000", "--backend", "interp")
    assert r.exit_code == 0, r.stderr
    assert data["kernel"] == "vector_add" and data["backend"] == "interp"
    assert data["shapes"] == {"N": 3000} and data["ok"] is True
    assert data["stats"]["z"]["shape"] == [3000]
    # known inputs: z = arange(N) + 1
    np.save(tmp_path / "x.npy", np.arange(3000, dtype=np.float32))
    np.save(tmp_path / "y.npy", np.ones(3000, dtype=np.float32))
    r, data = run_json(runner, VECTOR_ADD, "--backend", "interp",
                       "--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}")
    assert r.exit_code == 0, r.stderr
    st = data["stats"]["z"]
    assert data["shapes"] == {"N": 3000}  # N taken from the input's shape
    assert (st["min"], st["max"], st["mean"]) == (1.0, 3000.0, 1500.5)


@needs_interp
def test_run_interp_json_rmsnorm(runner):
    r, data = run_json(runner, RMSNORM, "--shape", "M=3,N=200", "--backend", "interp", "--seed", "1")
    assert r.exit_code == 0, r.stderr
    assert data["backend"] == "interp" and data["kernel"] == "rmsnorm"
    assert data["shapes"] == {"M": 3, "N": 200}
    st = data["stats"]["y"]
    assert st["dtype"] == "bfloat16" and st["shape"] == [3, 200] and st["nan"] == 0
    assert 0.3 < st["std"] < 3  # normalized rows times random weights
    _, again = run_json(runner, RMSNORM, "--shape", "M=3,N=200", "--backend", "interp", "--seed", "1")
    assert again == data  # same seed, same result


@needs_interp
def test_run_interp_human_output(runner):
    r = invoke(runner, "run", RMSNORM, "--shape", "M=2,N=64", "--backend", "interp", "--arg", "eps=0.5")
    assert r.exit_code == 0, r.output
    assert "rmsnorm" in r.stdout and "backend=interp" in r.stdout and "bfloat16" in r.stdout


def test_run_missing_shape_symbol(runner):
    r = invoke(runner, "run", RMSNORM, "--shape", "M=4", "--backend", "interp")
    assert r.exit_code == 1
    assert "symbol N" in r.stderr and "--shape" in r.stderr
    no_traceback(r.stderr)
    r, data = run_json(runner, RMSNORM, "--shape", "M=4", "--backend", "interp")
    assert r.exit_code == 1 and data["ok"] is False and "symbol N" in data["error"]


def test_run_bad_shapes(runner, tmp_path):
    constrained = tmp_path / "rmsnorm.tile"  # the example with a `where` the run violates
    constrained.write_text(Path(RMSNORM).read_text().replace("    grid (M,)", "    where N % 8 == 0\n    grid (M,)"))
    r = invoke(runner, "run", str(constrained), "--shape", "M=4,N=12", "--backend", "interp")
    assert r.exit_code == 1 and "N % 8 == 0" in r.stderr and "N = 12" in r.stderr
    r = invoke(runner, "run", RMSNORM, "--shape", "M=4,N=8,Q=2", "--backend", "interp")
    assert r.exit_code == 1 and "no symbol Q" in r.stderr


def test_run_scalar_needs_value_and_kernel_choice(runner, tmp_path):
    f = tmp_path / "two.tile"
    f.write_text(TWO_KERNELS)
    r = invoke(runner, "run", f, "--shape", "N=8", "--backend", "interp")
    assert r.exit_code == 1 and "2 kernels (scale, incr)" in r.stderr and "--kernel" in r.stderr
    r = invoke(runner, "run", f, "--kernel", "scale", "--shape", "N=8", "--backend", "interp")
    assert r.exit_code == 1
    assert "scalar parameter 's' needs a value: pass --arg s=VALUE" in r.stderr
    r = invoke(runner, "run", f, "--kernel", "scale", "--shape", "N=8", "--arg", "x=1", "--backend", "interp")
    assert r.exit_code == 1 and "--input x=FILE.npy" in r.stderr


@needs_interp
def test_run_ints_and_scalar_arg(runner, tmp_path):
    f = tmp_path / "two.tile"
    f.write_text(TWO_KERNELS)
    r, data = run_json(runner, f, "-k", "incr", "--shape", "N=300", "--backend", "interp")
    assert r.exit_code == 0, r.stderr
    st = data["stats"]["y"]
    assert st["dtype"] == "int32" and 1 <= st["min"] and st["max"] <= 16
    np.save(tmp_path / "x.npy", np.full(5, 2.0, dtype=np.float32))
    r, data = run_json(runner, f, "-k", "scale", "--input", f"x={tmp_path / 'x.npy'}", "--arg", "s=1.5",
                       "--backend", "interp")
    assert r.exit_code == 0, r.stderr
    assert data["stats"]["y"]["min"] == data["stats"]["y"]["max"] == 3.0


def test_run_input_checks(runner, tmp_path):
    np.save(tmp_path / "i.npy", np.arange(16, dtype=np.int64).reshape(2, 8))
    r = invoke(runner, "run", RMSNORM, "--input", f"x={tmp_path / 'i.npy'}", "--backend", "interp")
    assert r.exit_code == 1 and "dtype int64" in r.stderr and "bf16[M, N]" in r.stderr
    r = invoke(runner, "run", RMSNORM, "--input", f"x={tmp_path / 'missing.npy'}", "--backend", "interp")
    assert r.exit_code == 1 and "No such file" in r.stderr
    r = invoke(runner, "run", RMSNORM, "--input", f"q={tmp_path / 'i.npy'}", "--backend", "interp")
    assert r.exit_code == 1 and "no parameter 'q'" in r.stderr


def test_run_cuda_without_gpu(runner):
    from tilex.cli import gpu_status

    if gpu_status()[0]:
        pytest.skip("a GPU is usable here")
    r = invoke(runner, "run", VECTOR_ADD, "--shape", "N=8", "--backend", "cuda")
    assert r.exit_code == 1 and "no usable GPU" in r.stderr
    r = invoke(runner, "run", VECTOR_ADD, "--shape", "N=8", "--bench")
    assert r.exit_code == 1 and "--bench needs the cuda backend" in r.stderr


@pytest.mark.gpu
@needs_codegen
@needs_interp
def test_run_cuda_compare_and_bench(runner):
    r, data = run_json(runner, RMSNORM, "--shape", "M=64,N=1000", "--backend", "cuda", "--bench")
    assert r.exit_code == 0, r.stderr
    assert data["backend"] == "cuda" and data["ok"] is True
    y = data["outputs"]["y"]
    assert y["ok"] and y["tol"] == 1e-2 and y["rel_err"] <= 1e-2
    assert data["time_ms"] > 0 and data["gb_s"] > 0 and data["tflop_s"] is None
    r, data = run_json(runner, MATMUL, "--shape", "M=256,N=256,K=128", "--backend", "cuda", "--bench")
    assert r.exit_code == 0, r.stderr
    assert data["outputs"]["c"]["ok"] and data["tflop_s"] > 0


# ---------------------------------------------------------------- explain
def test_explain_json(runner):
    r = invoke(runner, "explain", MATMUL, "--json")
    assert r.exit_code == 0, r.output
    (k,) = json.loads(r.stdout)
    assert k["kernel"] == "matmul"
    assert {"threads", "smem_bytes", "grid", "symbols", "params", "constraints", "tiles"} <= set(k)
    d = k["defines"]  # the tiles tilex chose at its nominal sizes (no --shape), and which they are
    assert k["nominal"] == ["BM", "BN", "BK", "STAGES"]
    assert k["grid"] == [f"cdiv(M, {d['BM']})", f"cdiv(N, {d['BN']})"]
    assert k["symbols"] == ["M", "K", "N"]
    assert [p["name"] for p in k["params"]] == ["a", "b", "c"] and k["params"][2]["out"] is True
    tiles = {t["expr"]: t for t in k["tiles"]}
    acc = tiles[f"zeros(f32[{d['BM']}, {d['BN']}])"]
    assert acc["dtype"] == "f32" and acc["shape"] == [d["BM"], d["BN"]] and acc["line"] == 10
    for t in k["tiles"]:
        assert {"line", "expr", "dtype", "shape", "space", "layout", "regs_per_thread"} <= set(t)


def test_explain_human(runner):
    r = invoke(runner, "explain", RMSNORM)
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "kernel rmsnorm" in out and "grid" in out and "(M,)" in out
    assert "x[row, c : c + 1024]" in out  # shown verbatim, not eaten as Rich markup


def test_explain_api_before_memory_pass():
    from tilex.pipeline import compile_program

    src = (EXAMPLES / "softmax.tile").read_text()
    data = explain(compile_program(src, "softmax.tile", stop_after="infer_shapes"))
    assert data[0]["threads"] is None and data[0]["smem_bytes"] is None
    assert all(t["space"] is None for t in data[0]["tiles"])


# ---------------------------------------------------------------- inputs.py
def test_parse_literals_and_defines():
    assert parse_literal("3") == 3 and parse_literal("-0x10") == -16 and parse_literal("0") == 0
    assert parse_literal("1e-6") == 1e-6 and parse_literal("True") is True and parse_literal("False") is False
    with pytest.raises(InputError):
        parse_literal("abc")
    assert parse_defines(["A=1", "B=2.5", "C=True", "A=4"]) == {"A": 4, "B": 2.5, "C": True}
    assert parse_shapes(["M=2,N=8", "K=3"]) == {"M": 2, "N": 8, "K": 3}
    with pytest.raises(InputError):
        parse_shapes(["M=-1"])


def test_make_inputs_dtypes_and_determinism():
    spec = make_spec(compile_file(RMSNORM).kernels[0])
    syms = resolve_symbols(spec, {"M": 3, "N": 16})
    a1, s1 = make_inputs(spec, syms, seed=7)
    a2, _ = make_inputs(spec, syms, seed=7)
    assert a1["x"].dtype == np.dtype(ml_dtypes.bfloat16) and a1["x"].shape == (3, 16)
    assert a1["w"].shape == (16,) and a1["y"].shape == (3, 16)
    assert s1 == {"eps": pytest.approx(1e-6)}
    for n in a1:
        assert np.array_equal(a1[n].astype(np.float32), a2[n].astype(np.float32))
    assert not np.array_equal(a1["x"], a1["y"])
    _, s3 = make_inputs(spec, syms, args={"eps": "0.25"})
    assert s3["eps"] == 0.25


def test_load_input_bf16_roundtrip(tmp_path):
    p = ParamSpec("x", "tensor", "bf16", ("M", "N"))
    arr = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "x.npy", arr)
    got = load_input(str(tmp_path / "x.npy"), p)
    assert got.dtype == arr.dtype and np.array_equal(got.astype(np.float32), arr.astype(np.float32))
    with pytest.raises(InputError, match="rank"):
        np.save(tmp_path / "v.npy", arr.reshape(-1))
        load_input(str(tmp_path / "v.npy"), p)


def test_compare():
    a = np.array([1.0, 2.0, np.nan, 4.0], dtype=np.float32)
    r = compare(a, a.copy(), "f32")
    assert r == {"max_abs_err": 0.0, "rel_err": 0.0, "tol": 1e-5, "ok": True}
    b = a.copy()
    b[3] = 4.1
    r = compare(b, a, "f32")
    assert r["max_abs_err"] == pytest.approx(0.1, rel=1e-3) and r["rel_err"] == pytest.approx(0.025, rel=1e-3)
    assert not r["ok"]
    assert compare(b, a, "bf16")["ok"] is False and compare(a * (1 + 1e-3), a, "bf16")["ok"] is True
    c = a.copy()
    c[0] = np.nan  # a NaN where the reference has a number
    assert compare(c, a, "f32")["ok"] is False and math.isinf(compare(c, a, "f32")["rel_err"])
    i = np.arange(5, dtype=np.int32)
    assert compare(i, i, "i32")["ok"] and not compare(i + (i == 4), i, "i32")["ok"]


# ---------------------------------------------------------------- issue 22: run's sizes, seed and -D values
@pytest.mark.parametrize("args, msg", [
    (["--shape", "N=2147483648"], "size must be at most 2147483647"),
    (["--shape", "N=2**100"], "size must be an integer, got '2**100'"),
    (["--shape", "N=4,N=5"], "--shape N is given twice (N=4 and N=5)"),
    (["--shape", "N=4", "--shape", "N=5"], "--shape N is given twice"),
    (["--shape", "N=8", "--seed", "-1"], "--seed"),
    (["--shape", "N=8", "-D", "BLOCK=08"], "invalid integer literal '08'"),
])
def test_run_bad_sizes_and_values_are_usage_errors(runner, args, msg):
    r = invoke(runner, "run", VECTOR_ADD, "--backend", "interp", *args)
    assert r.exit_code == 2 and msg in r.stderr, r.stderr
    no_traceback(r.stderr)


def test_run_inputs_too_large_for_memory_fail_before_allocating(runner, monkeypatch):
    import tilex.inputs

    monkeypatch.setattr(tilex.inputs, "_memory_bytes", lambda: 16 << 30)  # the same answer on any machine
    r = invoke(runner, "run", VECTOR_ADD, "--backend", "interp", "--shape", "N=2147483647")
    assert r.exit_code == 1 and "the random inputs would take 24.0 GiB" in r.stderr and "allows 8.0 GiB" in r.stderr
    no_traceback(r.stderr)


def test_run_define_bool_for_an_int_parameter(runner):
    r = invoke(runner, "run", VECTOR_ADD, "--backend", "interp", "--shape", "N=8", "-D", "BLOCK=True")
    assert r.exit_code == 1 and "compile-time parameter 'BLOCK' is int, got True" in r.stderr
    no_traceback(r.stderr)


def test_parse_shapes_repeated_same_value_is_fine():
    assert parse_shapes(["M=4", "M=4"]) == {"M": 4}
