"""`tilex translate --help` names every pass `--dump-after` takes: the CLI spells the list out (importing the
passes would slow every command's start by ~0.3 s), so this keeps it equal to pipeline.PASS_NAMES."""
from __future__ import annotations

from typer.testing import CliRunner

from tilex.cli import app
from tilex.cli_translate import PASSES
from tilex.pipeline import PASS_NAMES


def test_dump_after_help_lists_the_pipeline_passes():
    assert list(PASSES) == PASS_NAMES, "update cli_translate.PASSES to pipeline.PASS_NAMES"
    r = CliRunner().invoke(app, ["translate", "--help"], terminal_width=400)
    assert r.exit_code == 0
    assert ", ".join(PASS_NAMES) in " ".join(r.output.split())
