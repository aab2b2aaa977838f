"""Shared pytest setup: golden-file refresh flag, GPU/nvcc auto-skips, cache dir."""
from __future__ import annotations

import functools
import shutil

import pytest


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden files instead of comparing against them")


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


@functools.lru_cache(maxsize=None)
def gpu_status() -> tuple[bool, str]:
    """(usable, reason): CuPy importable and at least one CUDA device. Computed once."""
    try:
        import cupy
    except Exception as e:  # ImportError, missing CUDA libs, ...
        return False, f"no usable GPU: cannot import cupy ({type(e).__name__}: {e})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device, ...
        return False, f"no usable GPU: cupy cannot query devices ({type(e).__name__}: {e})"
    if n <= 0:
        return False, "no usable GPU: cupy sees 0 CUDA devices"
    return True, f"{n} CUDA device(s)"


def has_gpu() -> bool:
    return gpu_status()[0]


def has_nvcc() -> bool:
    return shutil.which("nvcc") is not None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            ok, reason = gpu_status()  # imports cupy only if a gpu test was collected
            if not ok:
                item.add_marker(pytest.mark.skip(reason=reason))
        if item.get_closest_marker("nvcc") is not None and not has_nvcc():
            item.add_marker(pytest.mark.skip(reason="nvcc not found on PATH"))


@pytest.fixture
def nvcc() -> str:
    """Path to nvcc; skips the test when it is missing."""
    path = shutil.which("nvcc")
    if path is None:
        pytest.skip("nvcc not found on PATH")
    return path


@pytest.fixture
def tmp_cache_dir(tmp_path, monkeypatch):
    """A fresh, empty TILEX_CACHE_DIR for this test."""
    d = tmp_path / "tilex-cache"
    d.mkdir()
    monkeypatch.setenv("TILEX_CACHE_DIR", str(d))
    return d
