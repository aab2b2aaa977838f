"""Golden CUDA output of every library kernel file at its default configuration (issue 21, item 6).

`tests/golden/stdlib/<name>.cu` is `translate()` of `stdlib_kernels/<name>.tile` as written (its dtype
placeholders at the dtypes the file names, every compile-time parameter at its default; parameters left to
tilex at the model's choice for the nominal sizes) for sm_90a, where the library's TMA, wgmma, gather and
streamed-ring code lives. A change of generated code then shows as a reviewed diff: refresh with `make golden`
(pytest --update-golden) only when the change is intended.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tilex.pipeline import Options
from tilex.translate import translate

from test_golden import GOLDEN, ROOT, check_golden

KERNELS = sorted((ROOT / "stdlib_kernels").glob("*.tile"))


@pytest.mark.parametrize("path", KERNELS, ids=[p.stem for p in KERNELS])
def test_golden_stdlib_kernel(path: Path, update_golden):
    t = translate(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)), Options(arch="sm_90a"))
    check_golden(GOLDEN / "stdlib" / f"{path.stem}.cu", t.cuda, update_golden)


def test_every_library_file_has_a_golden():
    have = {p.stem for p in (GOLDEN / "stdlib").glob("*.cu")}
    assert have == {p.stem for p in KERNELS}, "stale or missing goldens: run `make golden` and review the diff"
