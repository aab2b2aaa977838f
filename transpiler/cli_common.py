"""What every `tilex` command shares: output, the errors-to-exit-status wrapper, reading FILE, the options
several commands take and their parsing, the GPU probe, number formatting.

Errors in a program print as `file:line:col: error: ...` with the source line and a caret; other errors print
as `error: ...`. Both exit with status 1; bad usage (typer.BadParameter) exits 2.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

import typer

from .diagnostics import CompileError, TilexError  # LaunchError is a TilexError

STATE = {"debug": False}  # `tilex --debug`: internal errors raise (a traceback) instead of a one-line message


# ---------------------------------------------------------------- output
def write_err(text: str) -> None:
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


def write_out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def console(stderr: bool = False):
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


def fmt(v: Any, spec: str = ".3g") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return format(v, spec)
    return str(v)


def json_safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return v


# ---------------------------------------------------------------- errors
class Fail(Exception):
    """Abort a command with `error: message` (exit 1)."""


@contextlib.contextmanager
def errors(json_mode: bool = False) -> Iterator[None]:
    """Turn tilex errors into messages on stderr and exit status 1 (never a traceback)."""
    message = None
    try:
        yield
        return
    except (typer.Exit, typer.Abort, typer.BadParameter):
        raise
    except CompileError as e:
        message = e.render()
        write_err(message)
    except (Fail, TilexError) as e:  # LaunchError, InputError, ...
        message = str(e)
        write_err(f"error: {message}")
    except KeyboardInterrupt:
        message = "interrupted"
        write_err(f"error: {message}")
    except Exception as e:  # a bug in tilex: say so briefly
        if STATE["debug"]:
            raise
        message = f"internal error: {type(e).__name__}: {e}"
        write_err(message + "\n  (this is a bug in tilex; rerun with `tilex --debug ...` for the traceback)")
    if json_mode:
        write_out(json.dumps({"ok": False, "error": message}) + "\n")
    raise typer.Exit(1)


# ---------------------------------------------------------------- files
def read_tile(file: Path) -> tuple[str, str]:
    """(path text, source) of a .tile file; Fail (`FILE: why`) on a missing or unreadable file."""
    from .source import read_file

    try:
        source, name = read_file(file, "tilex")
    except (OSError, ValueError) as e:
        raise Fail(f"{file}: {e.reason}") from None
    return name, source


def write_file(path: Path, text: str) -> None:
    try:
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise Fail(f"{path}: cannot write: {e.strerror or e}") from None


# ---------------------------------------------------------------- options several commands take
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
ARCH_OPT = typer.Option("sm_90a", "--arch", metavar="ARCH", help="Target GPU architecture, e.g. sm_90a, sm_80.")

_ARCH = re.compile(r"^sm_\d{2,3}[af]?$")


def option_value(parse: Callable[[Any], Any], value: Any, hint: str) -> Any:
    """`parse(value)` of an option's text (an `inputs` parser), an InputError becoming bad usage of `hint`."""
    from .inputs import InputError

    try:
        return parse(value)
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint=f"'{hint}'") from None


def defines_of(items: Optional[List[str]]) -> dict:
    """The -D NAME=VALUE options as {name: value}."""
    from .inputs import parse_defines

    return option_value(parse_defines, items or [], "-D")


def shapes_of(items: Optional[List[str]]) -> dict:
    """The --shape SYM=VAL[,SYM=VAL...] options as {symbol: size}."""
    from .inputs import parse_shapes

    return option_value(parse_shapes, items or [], "--shape")


def pairs_of(items: Optional[List[str]], option: str) -> dict:
    """The NAME=VALUE pairs of a repeatable option (--input, --arg) as {name: text}."""
    from .inputs import parse_pairs

    return option_value(lambda v: parse_pairs(v, option), items or [], option)


def check_arch(arch: str) -> None:
    if not _ARCH.match(arch):
        raise typer.BadParameter(f"{arch!r} is not an architecture such as sm_90a or sm_80",
                                 param_hint="'--arch'")


def options_of(defines: dict, kernel: Optional[str] = None, arch: str = "sm_90a"):
    """The compiler's `pipeline.Options` of a command."""
    from .pipeline import Options

    return Options(defines=defines, arch=arch, kernel=kernel)


def need_codegen():
    """tilex.codegen.generate, or Fail when code generation is not available."""
    try:
        from .codegen import generate  # noqa: F401
    except ImportError as e:
        raise Fail(f"CUDA code generation is not available in this installation "
                   f"(cannot import tilex.codegen: {e})") from None
    return generate


# ---------------------------------------------------------------- the GPU
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
