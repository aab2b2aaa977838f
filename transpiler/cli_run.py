"""`tilex run`: one launch of a kernel on random (or given) inputs, on the GPU compared with the interpreter (the
harness of `tilex.harness`), or in the interpreter alone; its table or JSON report."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Optional

import typer

from . import cli_common
from .cli_common import (ARG_OPT, DEFINE_OPT, FILE_ARG, KERNEL_OPT, Fail, console, defines_of, errors, fmt,
                         json_safe, need_codegen, options_of, pairs_of, read_tile, shapes_of, write_out)


def _pick_kernel(source: str, name: str, kernel: Optional[str]) -> str:
    """`kernel`, else the file's only kernel (Fail naming them when it has several)."""
    from .harness import pick_kernel
    from .pipeline import compile_program

    if kernel is not None:
        return kernel
    parsed = compile_program(source, name, options_of({}), stop_after="parse")
    return pick_kernel([k.name for k in parsed.kernels], name, error=Fail)


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
    defines = defines_of(define)
    if backend not in ("auto", "cuda", "interp"):
        raise typer.BadParameter(f"{backend!r}: choose auto, cuda or interp", param_hint="'--backend'")
    shapes = shapes_of(shape)
    input_files = pairs_of(input_, "--input")
    scalar_args = pairs_of(arg, "--arg")

    err = console(stderr=True)

    def progress(msg: str) -> None:
        err.print(msg, style="dim")

    failed = False
    with errors(json_mode=as_json):
        from . import harness as H
        from .inputs import stats
        from .launchspec import make_spec
        from .pipeline import compile_program

        name, source = read_tile(file)
        kname = _pick_kernel(source, name, kernel)
        options = options_of(defines, kname)

        chosen = backend
        if backend != "interp":
            usable, why = cli_common.gpu_status()  # looked up here: tests replace it
            if backend == "cuda" and not usable:
                raise Fail(f"--backend cuda: no usable GPU: {why}")
            chosen = "cuda" if usable else "interp"
            if backend == "auto" and not usable:
                progress(f"note: no usable GPU ({why}); using the interpreter")
        if bench and chosen != "cuda":
            raise Fail("--bench needs the cuda backend (a GPU with CuPy)")

        translation = None
        if chosen == "cuda":
            need_codegen()
            from .runtime.nvrtc import default_arch
            from .translate import translate as do_translate

            options = options_of(defines, kname, default_arch())  # the GPU's own arch (e.g. sm_90a)
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
            write_out(json.dumps(json_safe(report), allow_nan=False) + "\n")
        else:
            _print_run(report)
    if failed:
        raise typer.Exit(1)


def _print_run(report: dict) -> None:
    from rich.table import Table

    con = console()
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
               fmt(st["min"]), fmt(st["max"]), fmt(st["mean"]), str(st["nan"])]
        if outputs is not None:
            r = outputs[n]
            row += [fmt(r["max_abs_err"]), fmt(r["rel_err"]), fmt(r["tol"]) if r["tol"] else "exact",
                    "ok" if r["ok"] else "FAIL"]
        table.add_row(*row)
    con.print(table)
    if "time_ms" in report:
        line = f"time {report['time_ms'] * 1e3:.2f} us (median)  {fmt(report.get('gb_s'), '.1f')} GB/s"
        if report.get("tflop_s") is not None:
            line += f"  {report['tflop_s']:.2f} TFLOP/s"
        con.print(line)
    if outputs is not None:
        con.print("PASS" if report["ok"] else "FAIL: outputs differ from the interpreter",
                  style="green" if report["ok"] else "bold red")
