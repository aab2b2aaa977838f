"""The `tilex` command line: translate, check, run, tune and explain .tile files.

    tilex translate examples/rmsnorm.tile -o rmsnorm.cu
    tilex check examples/rmsnorm.tile
    tilex run examples/rmsnorm.tile --shape M=256,N=1000 --backend auto
    tilex tune examples/matmul.tile --shape M=4096,N=4096,K=4096 --space BM=64,128
    tilex explain examples/matmul.tile
    tilex report -o report/          (HTML reports of the graphs torch.compile(backend="tilex") cached)

Errors in a program print as `file:line:col: error: ...` with the source line and a
caret; other errors print as `error: ...`. Both exit with status 1; bad usage exits 2.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Iterator, List, Optional

import typer

from .version import __version__
from .diagnostics import CompileError, TilexError  # LaunchError is a TilexError

app = typer.Typer(
    name="tilex",
    help="tilex: a compiler for tile-level GPU kernels (.tile -> checked IR -> CUDA C++).",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_STATE = {"debug": False}


# ---------------------------------------------------------------- output helpers
def _stderr(text: str) -> None:
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


def _stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _console(stderr: bool = False):
    from rich.console import Console

    # markup off: shapes like [M, N] and slices like x[i : i + B] are data, not Rich tags
    stream = sys.stderr if stderr else sys.stdout
    # piped output: wide enough that tables do not wrap (Rich assumes 80 columns otherwise)
    width = None if _isatty(stream) else 200
    return Console(stderr=stderr, markup=False, highlight=False, emoji=False, width=width)


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _Fail(Exception):
    """Abort a command with `error: message` (exit 1)."""


@contextlib.contextmanager
def _errors(json_mode: bool = False) -> Iterator[None]:
    """Turn tilex errors into messages on stderr and exit status 1 (never a traceback)."""
    message = None
    try:
        yield
        return
    except (typer.Exit, typer.Abort, typer.BadParameter):
        raise
    except CompileError as e:
        message = e.render()
        _stderr(message)
    except (_Fail, TilexError) as e:  # LaunchError, InputError, ...
        message = str(e)
        _stderr(f"error: {message}")
    except KeyboardInterrupt:
        message = "interrupted"
        _stderr(f"error: {message}")
    except Exception as e:  # a bug in tilex: say so briefly
        if _STATE["debug"]:
            raise
        message = f"internal error: {type(e).__name__}: {e}"
        _stderr(message + "\n  (this is a bug in tilex; rerun with `tilex --debug ...` for the traceback)")
    if json_mode:
        _stdout(json.dumps({"ok": False, "error": message}) + "\n")
    raise typer.Exit(1)


def _read_source(file: Path) -> tuple[str, str]:
    """(path text, source) of a .tile file; _Fail (`FILE: why`) on a missing or unreadable file."""
    from .source import read_file

    try:
        source, name = read_file(file, "tilex")
    except (OSError, ValueError) as e:
        raise _Fail(f"{file}: {e.reason}") from None
    return name, source


def _write(path: Path, text: str) -> None:
    try:
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise _Fail(f"{path}: cannot write: {e.strerror or e}") from None


def _defines(items: Optional[List[str]]) -> dict:
    from .inputs import InputError, parse_defines

    try:
        return parse_defines(items or [])
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint="'-D'") from None


_ARCH = re.compile(r"^sm_\d{2,3}[af]?$")
ARCH_OPT = typer.Option("sm_90a", "--arch", metavar="ARCH", help="Target GPU architecture, e.g. sm_90a, sm_80.")


def _check_arch(arch: str) -> None:
    if not _ARCH.match(arch):
        raise typer.BadParameter(f"{arch!r} is not an architecture such as sm_90a or sm_80",
                                 param_hint="'--arch'")


def _options(defines: dict, kernel: Optional[str] = None, arch: str = "sm_90a"):
    from .pipeline import Options

    return Options(defines=defines, arch=arch, kernel=kernel)


def _kernels_text(names) -> str:
    return ", ".join(names) if names else "none"


def _codegen():
    """tilex.codegen.generate, or _Fail when code generation is not available."""
    try:
        from .codegen import generate  # noqa: F401
    except ImportError as e:
        raise _Fail(f"CUDA code generation is not available in this installation "
                    f"(cannot import tilex.codegen: {e})") from None
    return generate


# ---------------------------------------------------------------- options shared by commands
FILE_ARG = typer.Argument(..., metavar="FILE", help="The .tile source file.", show_default=False)
DEFINE_OPT = typer.Option(
    None, "-D", "--define", metavar="NAME=VALUE",
    help="Set a compile-time parameter, e.g. -D BLOCK=512 (repeatable). "
         "VALUE is an int, a float, True/False, or a dtype (-D T=f16) for a dtype parameter.")
KERNEL_OPT = typer.Option(None, "--kernel", "-k", metavar="NAME",
                          help="Only this kernel of the file.")
ARG_OPT = typer.Option(
    None, "--arg", "-a", metavar="NAME=VALUE",
    help="Value of scalar parameter NAME (repeatable); default: the value declared in the source.")


def _version_cb(value: bool) -> None:
    if value:
        _stdout(f"tilex {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version_cb, is_eager=True,
                                 help="Print the tilex version and exit."),
    debug: bool = typer.Option(False, "--debug", hidden=True,
                               help="Show Python tracebacks of internal errors."),
) -> None:
    """tilex: a compiler for tile-level GPU kernels (.tile -> checked IR -> CUDA C++).

    Errors in a program print as file:line:col: error: ... with the source line and a
    caret, and exit with status 1.
    """
    _STATE["debug"] = debug


# ---------------------------------------------------------------- translate
@app.command()
def translate(
    file: Path = FILE_ARG,
    output: Optional[Path] = typer.Option(
        None, "-o", "--output", metavar="OUT",
        help="Write the CUDA source to OUT (default: stdout)."),
    kernel: Optional[str] = KERNEL_OPT,
    arch: str = ARCH_OPT,
    define: Optional[List[str]] = DEFINE_OPT,
    host: bool = typer.Option(
        False, "--host",
        help="Also write the C++ host launcher: to <OUT stem>_host.cu next to OUT with -o, "
             "else to stdout after the kernel source."),
    dump_after: Optional[str] = typer.Option(
        None, "--dump-after", metavar="PASS",
        help="Instead of CUDA, print the IR after PASS (one of: parse, resolve_names, infer_dtypes, "
             "infer_shapes, check_constraints, plan_matmul, choose_threads, infer_memory), with every expression's type; "
             "to OUT with -o."),
) -> None:
    """Translate a .tile file to a self-contained CUDA C++ source (.cu)."""
    from .pipeline import PASS_NAMES

    defines = _defines(define)
    if dump_after is not None and dump_after not in PASS_NAMES:
        raise typer.BadParameter(f"{dump_after!r} is not a pass; passes: {', '.join(PASS_NAMES)}",
                                 param_hint="'--dump-after'")
    if dump_after is not None and host:
        raise typer.BadParameter("--host cannot be combined with --dump-after", param_hint="'--host'")
    _check_arch(arch)
    with _errors():
        name, source = _read_source(file)
        options = _options(defines, kernel, arch)
        if dump_after is not None:
            from .explain import dump_ir
            from .pipeline import compile_program

            text = dump_ir(compile_program(source, name, options, stop_after=dump_after))
            _write(output, text) if output is not None else _stdout(text)
            return
        _codegen()
        from .translate import translate as do_translate

        t = do_translate(source, name, options, host=host)
        cuda = t.cuda if t.cuda.endswith("\n") else t.cuda + "\n"
        host_code = None
        if host:
            if not t.host:
                raise _Fail("code generation produced no host launcher for this file")
            host_code = t.host if t.host.endswith("\n") else t.host + "\n"
        if output is None:
            _stdout(cuda)
            if host_code is not None:
                _stdout("\n// ---- host launcher (tilex translate --host) ----\n" + host_code)
            return
        _write(output, cuda)
        if host_code is not None:
            host_path = output.with_name(output.stem + "_host.cu")
            if host_path == output:
                raise _Fail(f"{output}: the host launcher would overwrite the kernel source")
            _write(host_path, host_code)


# ---------------------------------------------------------------- check
@app.command()
def check(
    file: Path = FILE_ARG,
    kernel: Optional[str] = KERNEL_OPT,
    define: Optional[List[str]] = DEFINE_OPT,
) -> None:
    """Parse and check a .tile file (all passes, no code generation): prints FILE: ok (N kernels)."""
    defines = _defines(define)
    with _errors():
        name, source = _read_source(file)
        from .pipeline import compile_program

        program = compile_program(source, name, _options(defines, kernel))
        n = len(program.kernels)
        _stdout(f"{name}: ok ({n} kernel{'' if n == 1 else 's'})\n")


# ---------------------------------------------------------------- run
def gpu_status() -> tuple[bool, str]:
    """(usable, reason): CuPy imports and sees at least one CUDA device."""
    try:
        import cupy
    except Exception as e:
        return False, f"cannot import cupy ({type(e).__name__}: {e})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return False, f"cupy cannot query CUDA devices ({type(e).__name__}: {e})"
    if n <= 0:
        return False, "cupy sees no CUDA device"
    return True, f"{n} CUDA device(s)"


def _pick_kernel(source: str, name: str, defines: dict, kernel: Optional[str]) -> str:
    from .harness import pick_kernel
    from .pipeline import compile_program

    if kernel is not None:
        return kernel
    parsed = compile_program(source, name, _options({}), stop_after="parse")
    return pick_kernel([k.name for k in parsed.kernels], name, error=_Fail)


def _fmt(v: Any, spec: str = ".3g") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return format(v, spec)
    return str(v)


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


@app.command()
def run(
    file: Path = FILE_ARG,
    kernel: Optional[str] = KERNEL_OPT,
    shape: Optional[List[str]] = typer.Option(
        None, "--shape", "-s", metavar="SYM=VAL[,SYM=VAL...]",
        help="Sizes of the kernel's shape symbols, e.g. --shape M=256,N=1000 (repeatable). "
             "Symbols may also come from the shapes of --input arrays."),
    backend: str = typer.Option(
        "auto", "--backend", "-b", metavar="auto|cuda|interp",
        help="cuda: run on the GPU and compare every output with the interpreter; "
             "interp: the NumPy interpreter only; auto: cuda when CuPy sees a GPU, else interp."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the random inputs (a non-negative integer)."),
    input_: Optional[List[str]] = typer.Option(
        None, "--input", "-i", metavar="NAME=FILE.npy",
        help="Use this array for tensor parameter NAME (dtype and shape are checked) instead of "
             "random data (repeatable)."),
    arg: Optional[List[str]] = ARG_OPT,
    define: Optional[List[str]] = DEFINE_OPT,
    bench: bool = typer.Option(
        False, "--bench",
        help="cuda only: also time the kernel (median of many launches) and report GB/s over all "
             "tensor parameters, and TFLOP/s (2*M*N*K) for kernels with @ and symbols M, N, K."),
    as_json: bool = typer.Option(
        False, "--json",
        help="Print exactly one JSON object on stdout: kernel, backend, shapes, outputs "
             "(max_abs_err, rel_err, tol, ok per output when compared), stats, time_ms, gb_s, "
             "tflop_s, ok. Progress goes to stderr."),
) -> None:
    """Run a kernel on random (or given) inputs; with the cuda backend, check it against the interpreter.

    Inputs: tensors get random normal values in their dtype (ints in [0, 16), random bools);
    outputs start with random data too, so backends agree where a kernel does not write.
    Outputs are compared with tolerance 1e-2 (bf16, f16, fp8) or 1e-5 (f32) on
    max|gpu - interp| / max|interp|, exactly for ints and bools. Exit status 1 when a
    comparison fails.
    """
    defines = _defines(define)
    if backend not in ("auto", "cuda", "interp"):
        raise typer.BadParameter(f"{backend!r}: choose auto, cuda or interp", param_hint="'--backend'")
    from .inputs import InputError, parse_pairs, parse_shapes

    try:
        shapes = parse_shapes(shape or [])
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint="'--shape'") from None
    try:
        input_files = parse_pairs(input_ or [], "--input")
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint="'--input'") from None
    try:
        scalar_args = parse_pairs(arg or [], "--arg")
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint="'--arg'") from None

    err = _console(stderr=True)

    def progress(msg: str) -> None:
        err.print(msg, style="dim")

    failed = False
    with _errors(json_mode=as_json):
        from . import harness as H
        from .inputs import stats
        from .launchspec import make_spec
        from .pipeline import compile_program

        name, source = _read_source(file)
        kname = _pick_kernel(source, name, defines, kernel)
        options = _options(defines, kname)

        chosen = backend
        if backend != "interp":
            usable, why = gpu_status()
            if backend == "cuda" and not usable:
                raise _Fail(f"--backend cuda: no usable GPU: {why}")
            chosen = "cuda" if usable else "interp"
            if backend == "auto" and not usable:
                progress(f"note: no usable GPU ({why}); using the interpreter")
        if bench and chosen != "cuda":
            raise _Fail("--bench needs the cuda backend (a GPU with CuPy)")

        translation = None
        if chosen == "cuda":
            _codegen()
            from .runtime.nvrtc import default_arch
            from .translate import translate as do_translate

            options = _options(defines, kname, default_arch())  # the GPU's own arch (e.g. sm_90a)
            progress(f"translating {name} for {options.arch} ...")
            translation = do_translate(source, name, options)
            program = translation.program
            spec = translation.specs[kname]
        else:
            program = compile_program(source, name, options)
            spec = make_spec(program.kernel(kname), source)
        kern = program.kernel(kname)

        prob = H.problem(spec, shapes, seed, H.load_inputs(spec, input_files), scalar_args)

        report: dict[str, Any] = {"kernel": kname, "backend": chosen, "shapes": dict(prob.symbols)}
        results: dict[str, dict] = {}
        if chosen == "cuda":
            import cupy

            from .runtime import Kernel

            k = Kernel(spec, translation.cuda, arch=options.arch)
            dev = {n: cupy.asarray(a) for n, a in prob.arrays.items()}
            progress(f"compiling and launching {kname} on the GPU ...")
            k(**dev, **prob.scalars)
            cupy.cuda.get_current_stream().synchronize()
            got = {n: cupy.asnumpy(dev[n]) for n in prob.outputs}
            progress("running the interpreter for reference ...")
            results = H.compare_outputs(got, H.reference(program, kname, prob), prob)
            report["outputs"] = results
            if bench:
                progress("timing ...")
                ms = k.bench(**dev, **prob.scalars)
                nbytes, flop = H.work(kern, spec, prob.symbols)
                report["time_ms"] = ms
                report["gb_s"] = nbytes / (ms * 1e-3) / 1e9 if ms > 0 else None
                report["tflop_s"] = flop / (ms * 1e-3) / 1e12 if flop is not None and ms > 0 else None
        else:
            progress(f"running {kname} in the interpreter ...")
            got = H.reference(program, kname, prob)
        out_stats = {n: stats(got[n]) for n in prob.outputs}
        report["stats"] = out_stats
        report["ok"] = all(r["ok"] for r in results.values())
        failed = not report["ok"]

        if as_json:
            _stdout(json.dumps(_json_safe(report), allow_nan=False) + "\n")
        else:
            _print_run(report)
    if failed:
        raise typer.Exit(1)


def _print_run(report: dict) -> None:
    from rich.table import Table

    con = _console()
    shapes = ", ".join(f"{s}={v}" for s, v in report["shapes"].items())
    con.print(f"{report['kernel']}  backend={report['backend']}  {shapes}", style="bold")
    outputs = report.get("outputs")
    table = Table(show_header=True, header_style="bold")
    for col in ("output", "dtype", "shape", "min", "max", "mean", "nan"):
        table.add_column(col, justify="left" if col in ("output", "dtype", "shape") else "right")
    if outputs is not None:
        for col in ("max abs err", "rel err", "tol", "ok"):
            table.add_column(col, justify="right")
    for n, st in report["stats"].items():
        row = [n, st["dtype"], "x".join(str(d) for d in st["shape"]) or "()",
               _fmt(st["min"]), _fmt(st["max"]), _fmt(st["mean"]), str(st["nan"])]
        if outputs is not None:
            r = outputs[n]
            row += [_fmt(r["max_abs_err"]), _fmt(r["rel_err"]), _fmt(r["tol"]) if r["tol"] else "exact",
                    "ok" if r["ok"] else "FAIL"]
        table.add_row(*row)
    con.print(table)
    if "time_ms" in report:
        line = f"time {report['time_ms'] * 1e3:.2f} us (median)  {_fmt(report.get('gb_s'), '.1f')} GB/s"
        if report.get("tflop_s") is not None:
            line += f"  {report['tflop_s']:.2f} TFLOP/s"
        con.print(line)
    if outputs is not None:
        con.print("PASS" if report["ok"] else "FAIL: outputs differ from the interpreter",
                  style="green" if report["ok"] else "bold red")


# ---------------------------------------------------------------- tune
@app.command()
def tune(
    file: Path = FILE_ARG,
    kernel: Optional[str] = KERNEL_OPT,
    shape: Optional[List[str]] = typer.Option(
        None, "--shape", "-s", metavar="SYM=VAL[,SYM=VAL...]",
        help="Sizes of every shape symbol, e.g. --shape M=4096,N=13824,K=5120 (repeatable)."),
    space: Optional[List[str]] = typer.Option(
        None, "--space", metavar="NAME=V1,V2,...",
        help="Candidate values of a compile-time parameter (repeatable). Parameters without "
             "--space get half, the default and double (powers of two; STAGES: default -1/+1); "
             "parameters left to tilex (= auto, in (...)) their implied or declared space."),
    define: Optional[List[str]] = typer.Option(
        None, "-D", "--define", metavar="NAME=VALUE", help="Fix a compile-time parameter (not searched)."),
    warmup: float = typer.Option(25.0, "--warmup", metavar="MS", help="Warm-up per configuration, in ms."),
    rep: int = typer.Option(100, "--rep", metavar="N", help="Timed launches per configuration (median)."),
    reference: str = typer.Option(
        "auto", "--reference", metavar="auto|interp|first",
        help="Check outputs against the interpreter, or the first configuration that ran "
             "(the declared defaults); auto: the interpreter for small shapes."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    arg: Optional[List[str]] = ARG_OPT,
    no_store: bool = typer.Option(False, "--no-store", help="Do not record the best configuration."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout (progress on stderr)."),
) -> None:
    """Search compile-time parameters on the GPU; print a table and store the fastest correct
    configuration for (source, kernel, shape bucket, arch) in $TILEX_CACHE_DIR/tuned.json."""
    from .inputs import InputError, parse_pairs, parse_shapes

    defines = _defines(define)
    try:
        shapes = parse_shapes(shape or [])
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint="'--shape'") from None
    try:
        scalar_args = parse_pairs(arg or [], "--arg")
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint="'--arg'") from None
    if rep < 1:
        raise typer.BadParameter("must be at least 1", param_hint="'--rep'")
    if warmup < 0:
        raise typer.BadParameter("must be >= 0", param_hint="'--warmup'")
    if reference not in ("auto", "interp", "first"):
        raise typer.BadParameter(f"{reference!r}: choose auto, interp or first", param_hint="'--reference'")
    from .tune import TuneError, parse_space

    try:
        space_map = parse_space(space)
    except (InputError, TuneError) as e:
        raise typer.BadParameter(str(e), param_hint="'--space'") from None
    usable, why = gpu_status()
    if not usable:
        message = f"tilex tune needs a GPU with CuPy: {why}"
        _stderr(f"error: {message}")
        if as_json:
            _stdout(json.dumps({"ok": False, "error": message}) + "\n")
        raise typer.Exit(2)
    err = _console(stderr=True)
    with _errors(json_mode=as_json):
        from . import tune as T

        _read_source(file)  # a clear error for a missing or unreadable file (tune reads the Path as a file too)
        _codegen()
        result = T.tune(file, kernel, shapes, space=space_map, defines=defines,
                        warmup_ms=warmup, rep=rep, reference=reference, seed=seed, store=not no_store,
                        args=scalar_args,
                        progress=lambda msg: err.print(msg, style="dim"))
        if as_json:
            _stdout(json.dumps(_json_safe(result.as_dict()), allow_nan=False) + "\n")
        else:
            con = _console()
            con.print(f"{result.kernel}  {', '.join(f'{k}={v}' for k, v in result.shapes.items())}  "
                      f"arch={result.arch}  bucket {T.bucket_text(result.shapes)}  reference={result.reference}",
                      style="bold")
            con.print(T.render_table(result))
            b = result.best
            if b is None:
                con.print("no configuration ran correctly", style="bold red")
            else:
                con.print(f"best: {T.config_text(b.defines)}  {b.time_ms:.4f} ms"
                          + (f"  (stored in {result.stored})" if result.stored else ""))
    if not result.best:
        raise typer.Exit(1)


# ---------------------------------------------------------------- explain
@app.command()
def explain(
    file: Path = FILE_ARG,
    kernel: Optional[str] = KERNEL_OPT,
    define: Optional[List[str]] = DEFINE_OPT,
    arch: str = ARCH_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print the same data as one JSON list (one object per kernel)."),
    shape: Optional[List[str]] = typer.Option(
        None, "--shape", "-s", metavar="SYM=VAL[,SYM=VAL...]",
        help="Sizes of the shape symbols: explain the configuration tilex chooses for them (parameters left to "
             "tilex, launch facts the sizes allow with aligned pointers), with every candidate's model score."),
    top: int = typer.Option(8, "--top", metavar="N", help="With --shape: how many scored candidates to print."),
) -> None:
    """Show what each kernel becomes: symbols, params, constraints, launch grid, threads,
    shared memory, each tensor-core loop's strategy (wgmma or mma.sync, tiles, stages, warps,
    why not wgmma), each pipeline loop that streams tiles through shared memory (which, how
    many stages) and how its products run (wgmma or mma.sync, why not wgmma), and every tile
    with its dtype, shape, memory space, layout and registers per thread."""
    defines = _defines(define)
    _check_arch(arch)
    with _errors(json_mode=as_json):
        from .explain import explain as do_explain
        from .pipeline import compile_program

        name, source = _read_source(file)
        if shape:
            data = _explain_shapes(source, name, defines, kernel, arch, shape)
        else:
            program = compile_program(source, name, _options(defines, kernel, arch))
            data = do_explain(program)
            parsed = {k.name: k for k in compile_program(source, name, _options(defines, kernel, arch),
                                                         stop_after="parse").kernels}
            for d in data:  # parameters left to tilex were chosen at the nominal sizes
                left = [c.name for c in parsed[d["kernel"]].cparams if c.auto and c.name not in defines]
                if left:
                    d["nominal"] = left
        if as_json:
            _stdout(json.dumps(_json_safe(data), indent=2) + "\n")
        else:
            _print_explain(data, top)


def _explain_shapes(source: str, name: str, defines: dict, kernel: Optional[str], arch: str,
                    shape: List[str]) -> list:
    """explain() of each kernel as a launch at these sizes compiles it: the chosen configuration (with the
    candidates and their scores under "autoconfig") and the launch facts the sizes allow (under "facts")."""
    from . import autoconfig as AC
    from .explain import explain as do_explain
    from .inputs import InputError, parse_shapes
    from .pipeline import Options, compile_program

    try:
        shapes = parse_shapes(shape)
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint="'--shape'") from None
    parsed = compile_program(source, name, _options(defines, kernel, arch), stop_after="parse")
    out = []
    for kd in parsed.kernels:
        syms = list(dict.fromkeys(d.id for p in kd.params for d in (p.type.dims or ()) if hasattr(d, "id")
                                  and d.id not in {c.name for c in kd.cparams}))
        missing = [s for s in syms if s not in shapes]
        if missing:
            raise typer.BadParameter(f"kernel '{kd.name}' needs a size for {', '.join(missing)}",
                                     param_hint="'--shape'")
        sizes = {s: int(shapes[s]) for s in syms}
        fixed = {n: v for n, v in defines.items() if n in {c.name for c in kd.cparams}}
        choice, facts = None, ()
        for _ in range(4):  # the facts the translation wants and the sizes satisfy (aligned pointers assumed)
            if any(c.auto and c.name not in fixed for c in kd.cparams):
                choice = AC.choose(source, name, kd.name, sizes, arch, fixed, facts)
            chosen = {**fixed, **(choice.defines if choice else {})}
            k = AC.translated(source, name, kd.name, chosen, arch, facts)
            if isinstance(k, Exception):
                raise k
            wanted = dict(getattr(k.facts, "wanted", {}) or {})
            more = tuple(sorted(set(facts) | {(s, d) for s, d in wanted.items() if sizes.get(s, 1) % d == 0}))
            if more == facts:
                break
            facts = more
        program = compile_program(source, name, Options(defines=chosen, arch=arch, kernel=kd.name, assume=facts))
        (data,) = do_explain(program)
        data["shapes"] = sizes
        data["facts"] = [f"{s} % {d} == 0" for s, d in facts]
        data["autoconfig"] = choice.as_dict() if choice else None
        out.append(data)
    return out


def _print_autoconfig(con, k: dict, top: int) -> None:
    """The --shape part of `tilex explain`: sizes, launch facts, the chosen configuration and why."""
    con.print(f"  sizes:       {', '.join(f'{s}={v}' for s, v in k['shapes'].items())}"
              f"   launch facts: {', '.join(k['facts']) or 'none'} (pointers 16-byte aligned assumed)", markup=False)
    ac = k.get("autoconfig")
    if not ac:
        return
    chosen = " ".join(f"{n}={v}" for n, v in ac["chosen"].items())
    con.print(f"  chosen:      {chosen}  (by the {ac['by']}; model bucket "
              f"{','.join(f'{s}={v}' for s, v in ac['bucket'].items())}; space "
              + ", ".join(f"{n} in {tuple(v)}" for n, v in ac["space"].items()) + ")", markup=False)
    ok = [c for c in ac["candidates"] if "time_us" in c]
    bad = [c for c in ac["candidates"] if "time_us" not in c]
    for c in ok[:top]:
        cfg = " ".join(f"{n}={v}" for n, v in c["defines"].items())
        con.print(f"  {'*' if c['status'] == 'chosen' else ' '} {c['time_us']:10.1f} us  {cfg:<32} {c['strategy']:<7} "
                  f"stages {c['stages']}, {c['programs']} programs, {c['per_sm']}/SM, {c['waves']:.2f} waves, "
                  f"{c['threads']} threads, {c['smem_bytes']} B smem, ~{c['regs_per_thread']} regs, "
                  f"eff {c['eff']:.2f}, {c['limit']}-bound", markup=False)
    if len(ok) > top:
        con.print(f"    ... {len(ok) - top} more scored candidates (--top N, or --json)")
    reasons: dict = {}
    for c in bad:
        reasons.setdefault(c.get("reason", "?"), []).append(" ".join(f"{n}={v}" for n, v in c["defines"].items()))
    for why, cfgs in reasons.items():
        con.print(f"  rejected ({len(cfgs)}): {why}  [{cfgs[0]}{', ...' if len(cfgs) > 1 else ''}]", markup=False)


def _print_explain(data: list[dict], top: int = 8) -> None:
    from rich.table import Table

    con = _console()
    for i, k in enumerate(data):
        if i:
            con.print()
        defs = ", ".join(f"{n}={v}" for n, v in k["defines"].items())
        con.print(f"kernel {k['kernel']}" + (f"<{defs}>" if defs else "") + f"  ({k['file']}:{k['line']})",
                  style="bold")
        if "shapes" in k:
            _print_autoconfig(con, k, top)
        elif k.get("nominal"):
            con.print(f"  note:        {', '.join(k['nominal'])} left to tilex: chosen here for every size 4096 and no "
                      "launch facts; --shape M=..,N=.. shows the choice for your sizes", markup=False)
        con.print(f"  symbols:     {', '.join(k['symbols']) or '-'}")
        for p in k["params"]:
            t = p["dtype"] if p["dims"] is None else f"{p['dtype']}[{', '.join(str(d) for d in p['dims'])}]"
            t = ("out " if p["out"] else "") + t + (f" = {p['default']}" if p["default"] is not None else "")
            con.print(f"  param        {p['name']}: {t}")
        for c in k["constraints"]:
            con.print(f"  where        {c}")
        con.print(f"  grid:        ({', '.join(k['grid'])}{',' if len(k['grid']) == 1 else ''})")
        con.print(f"  threads:     {_fmt(k['threads'])} per block")
        for loop in k.get("matmul_loops", []):
            con.print(f"  matmul loop: line {loop['line']}: {loop['strategy']} {'x'.join(map(str, loop['tile']))}, "
                      f"{loop['stages']} stages, {loop['warps']} warps"
                      + (f" + {loop['producer_warps']} producer warps" if loop['producer_warps'] else "")
                      + (f" ({loop['note']})" if loop['note'] else ""), markup=False)
            if loop.get("batch"):  # batched operands: the ring reads one batch's matrix (TMA: N-D maps, box 1 there)
                by = "N-D TMA maps, box 1 on the batch axes" if loop["strategy"] == "wgmma" else "cp.async from the batch's matrix"
                ops = ", ".join(f"{t}[{', '.join(ix)}, ...]" for t, ix in loop["batch"].items())
                con.print(f"  batched:     line {loop['line']}: {ops} ({by})", markup=False)
        for loop in k.get("streamed_loops", []):
            regs, swz = set(loop["into_registers"]), set(loop.get("swizzled", ()))
            names = ", ".join(n + (" (into registers)" if n in regs else " (128-byte swizzled)" if n in swz else "")
                              for n in loop["tiles"])
            if loop["tiles"]:
                fewer = f" of {loop['asked']} asked: the ring did not fit" if loop["stages"] != loop["asked"] else ""
                by = ("TMA" if loop.get("tma") else "cp.async"
                      + (f" (not TMA: {loop['tma_note']})" if loop.get("tma_note") else ""))
                con.print(f"  streamed:    line {loop['line']}: {names} by {by}, {loop['stages']} stages{fewer}, "
                          f"{loop['stages'] - 1} iteration{'s' if loop['stages'] > 2 else ''} ahead", markup=False)
            if loop.get("products"):
                how = {"wgmma": "wgmma (sm_90a), one warpgroup per 64 rows",
                       "mma": "mma.sync m16n8k16"}[loop["products"]]
                note = loop.get("products_note") or ""
                note = f" ({note})" if note.startswith("not a tensor-core main loop") else f" (not wgmma: {note})" if note else ""
                con.print(f"  products:    line {loop['line']}: {how}{note}", markup=False)
        smem = k["smem_bytes"]
        con.print(f"  shared mem:  {_fmt(smem)}" + (" bytes" if smem is not None else "")
                  + ("" if k["threads"] is not None else "   (not annotated: memory pass did not run)"))
        for key, v in k["info"].items():
            con.print(f"  {key}: {v}")
        if not k["tiles"]:
            continue
        table = Table(show_header=True, header_style="bold", title=None)
        for col, just in (("line", "right"), ("expression", "left"), ("dtype", "left"), ("shape", "left"),
                          ("space", "left"), ("layout", "left"), ("regs", "right")):
            table.add_column(col, justify=just, overflow="fold")
        for t in k["tiles"]:
            expr = t["expr"] if t["name"] is None else f"{t['name']} = {t['expr']}"
            table.add_row(str(t["line"]), expr, t["dtype"] or "-",
                          "[" + ", ".join(str(d) for d in t["shape"]) + "]",
                          t["space"] or "-", t["layout"] or "-", _fmt(t["regs_per_thread"]))
        con.print(table)


# ---------------------------------------------------------------- report (tilex.backend)
@app.command()
def report(
    cache: Optional[Path] = typer.Option(None, "--cache", metavar="DIR",
                                         help="The cache directory (default: $TILEX_CACHE_DIR or ~/.cache/tilex)."),
    output: Path = typer.Option(Path("tilex-report"), "-o", "--output", metavar="DIR",
                                help="Write the HTML files to DIR."),
) -> None:
    """Write one self-contained HTML report per graph the torch.compile backend compiled and cached."""
    from .backend.report import from_cache
    from .runtime.cache import default_cache_dir

    cache_dir = cache if cache is not None else default_cache_dir()
    if not (cache_dir / "reports").is_dir():
        raise typer.BadParameter(f"{cache_dir} has no reports/ folder: no graph compiled with "
                                 "backend='tilex' was cached there", param_hint="'--cache'")
    with _errors():
        paths = from_cache(cache_dir, output)
        if not paths:
            raise _Fail(f"{cache_dir / 'reports'} holds no graph report (compile and run a model first)")
        for p in paths:
            _stdout(f"{p}\n")


def main() -> None:
    """Entry point of the `tilex` script."""
    app(prog_name="tilex")


if __name__ == "__main__":
    main()
