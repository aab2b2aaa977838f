"""The `tilex` command line: translate, check, run, tune and explain .tile files.

    tilex translate examples/rmsnorm.tile -o rmsnorm.cu
    tilex check examples/rmsnorm.tile
    tilex run examples/rmsnorm.tile --shape M=256,N=1000 --backend auto
    tilex tune examples/matmul.tile --shape M=4096,N=4096,K=4096 --space BM=64,128
    tilex explain examples/matmul.tile
    tilex report -o report/          (HTML reports of the graphs torch.compile(backend="tilex") cached)

Errors in a program print as `file:line:col: error: ...` with the source line and a
caret; other errors print as `error: ...`. Both exit with status 1; bad usage exits 2.

This module is the Typer app: the global options and the commands, each from a module of its own
(`cli_translate`, `cli_run`, `cli_tune`, `cli_explain`, `cli_report`) over what they share (`cli_common`).
"""
from __future__ import annotations

import typer

from .cli_common import STATE, gpu_status, write_out  # noqa: F401  (gpu_status: tilex.cli.gpu_status)
from .cli_explain import explain
from .cli_report import report
from .cli_run import run
from .cli_translate import check, translate
from .cli_tune import tune
from .version import __version__

app = typer.Typer(
    name="tilex",
    help="tilex: a compiler for tile-level GPU kernels (.tile -> checked IR -> CUDA C++).",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_cb(value: bool) -> None:
    if value:
        write_out(f"tilex {__version__}\n")
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
    STATE["debug"] = debug


for _command in (translate, check, run, tune, explain, report):  # in this order in `tilex --help`
    app.command()(_command)


def main() -> None:
    """Entry point of the `tilex` script."""
    app(prog_name="tilex")


if __name__ == "__main__":
    main()
