"""Build a wheel, check its package data, install it into a bare target dir and run it from there.

Works from a fresh clone with `pip install -e '.[test]'` or plain `pip install '.[test]'`:
the wheel is built from a copy of the source tree, and the installed copy is run in a
subprocess whose only path to tilex is the --target directory.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (source dir relative to ROOT, glob, wheel dir)
DATA_GLOBS = [
    ("grammar", "*.lark", "tilex/grammar"),
    ("templates", "*.j2", "tilex/templates"),
    ("templates", "*.cuh", "tilex/templates"),
    ("stdlib_kernels", "*.tile", "tilex/stdlib_kernels"),
]
TOP_LEVEL_SKIP = {".git", ".venv", ".whl", "build", "dist", "out", ".pytest_cache"}


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed ({r.returncode})\n"
        f"--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr}")
    return r


def _copy_ignore(src, names):
    skip = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
    if Path(src).resolve() == ROOT:
        skip |= TOP_LEVEL_SKIP & set(names)
    return skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Wheel built from a clean copy of the tree (no stale build/ can hide missing data)."""
    base = tmp_path_factory.mktemp("wheel")
    src, dist = base / "src", base / "dist"
    shutil.copytree(ROOT, src, ignore=_copy_ignore)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "-w", str(dist), str(src)], timeout=600)
    wheels = list(dist.glob("tilex-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel installed with `pip install --no-deps --target`."""
    target = tmp_path_factory.mktemp("target")
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target),
          str(wheel)], timeout=600)
    return target


def _env(target: Path, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(target), PYTHONNOUSERSITE="1",
               TILEX_CACHE_DIR=str(tmp / "cache"))
    return env


def test_wheel_contains_package_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {"tilex/__init__.py", "tilex/__main__.py", "tilex/grammar/__init__.py",
                "tilex/templates/__init__.py", "tilex/stdlib_kernels/__init__.py"}
    # every Python module of the package (catches subpackages missing from pyproject)
    for f in (ROOT / "transpiler").rglob("*.py"):
        if "__pycache__" not in f.parts:
            expected.add("tilex/" + f.relative_to(ROOT / "transpiler").as_posix())
    # every data file that exists in the source tree right now
    for src_dir, pattern, whl_dir in DATA_GLOBS:
        for f in sorted((ROOT / src_dir).glob(pattern)):
            expected.add(f"{whl_dir}/{f.name}")
    missing = sorted(expected - names)
    assert not missing, f"missing from {wheel.name}: {missing}\nwheel has: {sorted(names)}"


def test_installed_wheel_imports_from_target(installed, tmp_path):
    code = ("import tilex, sys; t = sys.argv[1]; "
            "assert tilex.__file__.startswith(t), (tilex.__file__, t)")
    _run([sys.executable, "-c", code, str(installed)], cwd=tmp_path,
         env=_env(installed, tmp_path), timeout=120)


def test_installed_wheel_translates_example(installed, tmp_path):
    source = ROOT / "examples" / "vector_add.tile"
    assert source.is_file(), f"{source} is missing"
    example = tmp_path / "vector_add.tile"
    shutil.copy(source, example)
    out = tmp_path / "vector_add.cu"
    _run([sys.executable, "-m", "tilex", "translate", str(example), "-o", str(out)],
         cwd=tmp_path, env=_env(installed, tmp_path), timeout=300)
    assert out.is_file(), "translate did not write its output"
    assert "__global__" in out.read_text()
