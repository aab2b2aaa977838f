"""codegen/remat.py: a tile that is a pure function of its coordinates (rows = r + arange(0, RB)) is recomputed in
the layout a use wants instead of converted through shared memory; a tile depending on a name that changes keeps
the conversion. CUDA text checked here; the generated kernels' values on the GPU: tests/test_backend*.py (GPU)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tilex.pipeline import Options
from tilex.translate import translate

ROTARY = (Path(__file__).parent / "golden" / "backend" / "rotary.tile").read_text()
DEFINES = {"RB": 32, "CB": 16}


def cuda(src: str) -> str:
    return translate(src, "k.tile", Options(defines=DEFINES, arch="sm_90a")).cuda


def test_row_offsets_of_a_generated_kernel_need_no_layout_conversion():
    text = cuda(ROTARY)
    assert "layout conversion" not in text and "__syncthreads" not in text


def test_a_reassigned_scalar_keeps_the_conversion():
    # r changes after rows is defined: recomputing rows later would read the new r, so it is converted as before
    src = ROTARY.replace("    rows = r + arange(0, RB)\n", "    rows = r + arange(0, RB)\n    r = r + 0\n")
    assert src != ROTARY
    assert "layout conversion of rows" in cuda(src)


@pytest.mark.parametrize("stmt", ["    rows = r + arange(0, RB)\n    rows = rows + 0\n"])
def test_a_reassigned_tile_keeps_the_conversion(stmt):
    src = ROTARY.replace("    rows = r + arange(0, RB)\n", stmt)
    assert "layout conversion of rows" in cuda(src)


def test_a_tile_defined_in_a_loop_keeps_the_conversion():
    # rows defined inside the column loop (a per-iteration value for codegen's purposes): converted, not recomputed
    body = ROTARY.replace("    rows = r + arange(0, RB)\n", "")
    body = body.replace("    for c in range(0, N, CB) {\n", "    for c in range(0, N, CB) {\n        rows = r + arange(0, RB)\n", 1)
    lines = body.splitlines(keepends=True)
    # the row offsets (g0..g3) read rows: move them into the loop after it
    offsets = [ln for ln in lines if re.match(r"    go?\d+ = ", ln)]
    body = "".join(ln for ln in lines if ln not in offsets)
    body = body.replace("        rows = r + arange(0, RB)\n", "        rows = r + arange(0, RB)\n" + "".join("    " + ln for ln in offsets), 1)
    assert "layout conversion of rows" in cuda(body)
