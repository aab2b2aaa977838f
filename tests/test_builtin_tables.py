"""The builtin table's rows stay in step (docs/internals.md, "Adding a builtin"): every elementwise math function
has a NumPy formula (the interpreter's) and a CUDA one (codegen's), is built by nvcc in a program of
tests/test_nvcc.py, and is documented in docs/language.md. CPU only: the numbers are compared elsewhere
(tests/test_interp.py against float64 NumPy, tests/test_math_gpu.py and the examples on the GPU).
"""
from __future__ import annotations

import re
from pathlib import Path

from tilex.builtins import CUDA_MATH, FUNCTIONS, NUMPY_MATH, BuiltinKind

import test_nvcc

ROOT = Path(__file__).resolve().parents[1]
MATH = {name for name, b in FUNCTIONS.items() if b.kind is BuiltinKind.MATH}


def _calls(text: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\(", text) is not None


def test_every_math_builtin_has_both_formulas():
    assert set(NUMPY_MATH) == MATH, "NUMPY_MATH (the interpreter) and FUNCTIONS disagree"
    assert set(CUDA_MATH) == MATH, "CUDA_MATH (codegen) and FUNCTIONS disagree"
    for name in MATH:
        assert "{x}" in CUDA_MATH[name] and "x" in NUMPY_MATH[name], name


def test_every_math_builtin_is_built_by_nvcc():
    """Called in a feature program of test_nvcc.py, or in an example or library kernel it compiles."""
    sources = "".join(test_nvcc.FEATURES.values()) + "".join(p.read_text(encoding="utf-8")
                                                             for p in test_nvcc.SOURCES)
    missing = sorted(n for n in MATH if not _calls(sources, n))
    assert not missing, f"no program of tests/test_nvcc.py calls {missing}: add them to FEATURES['elementwise_math']"


def test_every_builtin_is_documented():
    doc = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
    assert not [n for n in FUNCTIONS if not re.search(rf"`{re.escape(n)}\b", doc)]
