"""`tilex tune`: the measured search of a kernel's compile-time parameters on the GPU (`tilex.tune`), its table or
JSON result."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from . import cli_common
from .cli_common import (ARG_OPT, FILE_ARG, KERNEL_OPT, console, defines_of, errors, json_safe, need_codegen,
                         pairs_of, read_tile, shapes_of, write_err, write_out)


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
    from .inputs import InputError

    defines = defines_of(define)
    shapes = shapes_of(shape)
    scalar_args = pairs_of(arg, "--arg")
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
    usable, why = cli_common.gpu_status()  # looked up here: tests replace it
    if not usable:
        message = f"tilex tune needs a GPU with CuPy: {why}"
        write_err(f"error: {message}")
        if as_json:
            write_out(json.dumps({"ok": False, "error": message}) + "\n")
        raise typer.Exit(2)
    err = console(stderr=True)
    with errors(json_mode=as_json):
        from . import tune as T

        read_tile(file)  # a clear error for a missing or unreadable file (tune reads the Path as a file too)
        need_codegen()
        result = T.tune(file, kernel, shapes, space=space_map, defines=defines,
                        warmup_ms=warmup, rep=rep, reference=reference, seed=seed, store=not no_store,
                        args=scalar_args,
                        progress=lambda msg: err.print(msg, style="dim"))
        if as_json:
            write_out(json.dumps(json_safe(result.as_dict()), allow_nan=False) + "\n")
        else:
            con = console()
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
