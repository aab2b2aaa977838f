"""`tilex report`: the HTML reports of the graphs `torch.compile(backend="tilex")` compiled and cached."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .cli_common import Fail, errors, write_out


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
    with errors():
        paths = from_cache(cache_dir, output)
        if not paths:
            raise Fail(f"{cache_dir / 'reports'} holds no graph report (compile and run a model first)")
        for p in paths:
            write_out(f"{p}\n")
