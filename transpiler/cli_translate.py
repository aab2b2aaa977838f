"""`tilex translate` (a .tile file to CUDA C++, or the IR after a pass) and `tilex check` (every pass, no code)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .cli_common import (ARCH_OPT, DEFINE_OPT, FILE_ARG, KERNEL_OPT, Fail, check_arch, defines_of, errors,
                         need_codegen, options_of, read_tile, write_file, write_out)

# pipeline.PASS_NAMES for --help without importing the passes (tests/test_cli_help.py keeps the two equal)
PASSES = ("parse", "inline_functions", "resolve_names", "infer_dtypes", "infer_shapes", "check_constraints",
          "plan_matmul", "choose_threads", "choose_mma", "place_resident", "plan_streams", "assign_layouts", "plan_tma",
          "budget_smem", "plan_barriers")

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
        help=f"Instead of CUDA, print the IR after PASS (one of: {', '.join(PASSES)}), with every expression's "
             "type; to OUT with -o."),
) -> None:
    """Translate a .tile file to a self-contained CUDA C++ source (.cu)."""
    from .pipeline import PASS_NAMES

    defines = defines_of(define)
    if dump_after is not None and dump_after not in PASS_NAMES:
        raise typer.BadParameter(f"{dump_after!r} is not a pass; passes: {', '.join(PASS_NAMES)}",
                                 param_hint="'--dump-after'")
    if dump_after is not None and host:
        raise typer.BadParameter("--host cannot be combined with --dump-after", param_hint="'--host'")
    check_arch(arch)
    with errors():
        name, source = read_tile(file)
        options = options_of(defines, kernel, arch)
        if dump_after is not None:
            from .explain import dump_ir
            from .pipeline import compile_program

            text = dump_ir(compile_program(source, name, options, stop_after=dump_after))
            write_file(output, text) if output is not None else write_out(text)
            return
        need_codegen()
        from .translate import translate as do_translate

        t = do_translate(source, name, options, host=host)
        cuda = t.cuda if t.cuda.endswith("\n") else t.cuda + "\n"
        host_code = None
        if host:
            if not t.host:
                raise Fail("code generation produced no host launcher for this file")
            host_code = t.host if t.host.endswith("\n") else t.host + "\n"
        if output is None:
            write_out(cuda)
            if host_code is not None:
                write_out("\n// ---- host launcher (tilex translate --host) ----\n" + host_code)
            return
        write_file(output, cuda)
        if host_code is not None:
            host_path = output.with_name(output.stem + "_host.cu")
            if host_path == output:
                raise Fail(f"{output}: the host launcher would overwrite the kernel source")
            write_file(host_path, host_code)


# ---------------------------------------------------------------- check
def check(
    file: Path = FILE_ARG,
    kernel: Optional[str] = KERNEL_OPT,
    define: Optional[List[str]] = DEFINE_OPT,
) -> None:
    """Parse and check a .tile file (all passes, no code generation): prints FILE: ok (N kernels)."""
    defines = defines_of(define)
    with errors():
        name, source = read_tile(file)
        from .pipeline import compile_program

        program = compile_program(source, name, options_of(defines, kernel))
        n = len(program.kernels)
        write_out(f"{name}: ok ({n} kernel{'' if n == 1 else 's'})\n")
