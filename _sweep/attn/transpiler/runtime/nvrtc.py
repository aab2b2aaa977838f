"""Compiling generated CUDA C++ to a cubin: CuPy's NVRTC bindings, or nvcc when asked.

The generated source includes no headers (NVRTC may not find the CUDA headers), and
defines its entry points as `extern "C" __global__`. Results are cached on disk (see
`cache.py`) under a key covering the source, options, arch, compiler version and tilex
version. CuPy is imported only when a compile actually happens.

A compile error here means tilex generated bad CUDA: it is reported as a `TilexError`
carrying the compiler log and asking for a bug report.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..version import __version__ as TILEX_VERSION
from ..diagnostics import TilexError
from . import cache

DEFAULT_OPTIONS = ("--std=c++17", "-default-device")
NVCC_DEFAULT_OPTIONS = ("--std=c++17",)
# NVRTC-only options nvcc does not understand.
_NVRTC_ONLY = {"-default-device", "--device-as-default-execution-space"}
_BUG = ("this is a bug in tilex's code generator (the .tile program passed all checks); "
        "please report it with the .tile file")


def _nvrtc_module():
    """CuPy's thin NVRTC wrapper (module location differs between CuPy versions)."""
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError:  # pragma: no cover - depends on the CuPy version
        from cupy.cuda import nvrtc
    return nvrtc


def arch_for_capability(major: int, minor: int) -> str:
    """The -arch value for a compute capability: sm_90a on 9.0 (wgmma/TMA need the `a`
    variant), sm_XY otherwise."""
    if (major, minor) == (9, 0):
        return "sm_90a"
    return f"sm_{major}{minor}"


_ARCHS: dict[int, str] = {}  # device ordinal -> arch (a device's compute capability never changes)


def default_arch() -> str:
    """The arch of CuPy's current CUDA device (e.g. "sm_90a" on an H100/H200)."""
    import cupy

    device = cupy.cuda.runtime.getDevice()
    arch = _ARCHS.get(device)
    if arch is None:
        cc = cupy.cuda.Device(device).compute_capability  # a string such as "90" or "120"
        arch = _ARCHS[device] = arch_for_capability(int(cc[:-1]), int(cc[-1]))
    return arch


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library CuPy loads."""
    return tuple(_nvrtc_module().getVersion())


@functools.lru_cache(maxsize=None)
def nvcc_version(nvcc: str = "nvcc") -> str:
    """The last line of `nvcc --version` (names the release and build)."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1]


def toolkit_version(backend: str = "nvrtc") -> str:
    """A string naming the compiler that builds cubins, for cache keys and reports."""
    if backend == "nvcc":
        return "nvcc " + nvcc_version(_find_nvcc())
    major, minor = nvrtc_version()
    return f"nvrtc {major}.{minor}"


def _arch_option(arch: str) -> str:
    return f"--gpu-architecture={arch}"


def compile_with_nvrtc(source: str, arch: str, options: tuple[str, ...] = DEFAULT_OPTIONS,
                       name: str = "tilex_kernel.cu") -> bytes:
    """Compile `source` for `arch` (e.g. "sm_90a") with NVRTC; return the cubin bytes."""
    nvrtc = _nvrtc_module()
    opts = tuple(options) + (_arch_option(arch),)
    prog = nvrtc.createProgram(source, name, (), ())
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except Exception as e:
            try:
                log = nvrtc.getProgramLog(prog)
            except Exception:
                log = ""
            raise TilexError(f"internal compiler error: NVRTC failed to compile the generated "
                             f"CUDA for {arch} ({e}); {_BUG}\noptions: {' '.join(opts)}\n"
                             f"NVRTC log:\n{log.strip()}") from None
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    return bytes(cubin)


def _find_nvcc() -> str:
    path = shutil.which("nvcc")
    if path is None:
        raise TilexError("nvcc was requested to compile the generated CUDA but is not on PATH")
    return path


def compile_with_nvcc(source: str, arch: str, options: tuple[str, ...] = NVCC_DEFAULT_OPTIONS) -> bytes:
    """Compile `source` for `arch` with `nvcc -cubin`; return the cubin bytes."""
    nvcc = _find_nvcc()
    opts = [o for o in options if o not in _NVRTC_ONLY]
    with tempfile.TemporaryDirectory(prefix="tilex-nvcc-") as tmp:
        src, out = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.cubin"
        src.write_text(source)
        cmd = [nvcc, "-cubin", f"-arch={arch}", *opts, "-o", str(out), str(src)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise TilexError(f"internal compiler error: nvcc failed to compile the generated CUDA "
                             f"for {arch}; {_BUG}\ncommand: {' '.join(cmd)}\n"
                             f"nvcc output:\n{(res.stdout + res.stderr).strip()}")
        return out.read_bytes()


def compile_cubin(source: str, arch: str | None = None, options: tuple = (),
                  cache_dir: str | os.PathLike | None | bool = None, *,
                  backend: str = "nvrtc") -> bytes:
    """Compile CUDA C++ `source` to a cubin for `arch`, through the on-disk cache.

    arch: e.g. "sm_90a"; default: the current device's (`default_arch()`).
    options: extra compiler options, appended to the defaults ("--std=c++17",
    "-default-device" for NVRTC).
    cache_dir: cache directory; None uses `cache.default_cache_dir()`, False disables.
    backend: "nvrtc" (CuPy's bindings) or "nvcc".
    """
    if backend not in ("nvrtc", "nvcc"):
        raise ValueError(f"backend must be 'nvrtc' or 'nvcc', got {backend!r}")
    if arch is None:
        arch = default_arch()
    defaults = DEFAULT_OPTIONS if backend == "nvrtc" else NVCC_DEFAULT_OPTIONS
    opts = tuple(defaults) + tuple(o for o in options if o not in defaults)
    if backend == "nvrtc":
        def build() -> bytes:
            return compile_with_nvrtc(source, arch, opts)
    else:
        def build() -> bytes:
            return compile_with_nvcc(source, arch, opts)
    if cache_dir is False:
        return build()
    if cache_dir is None or cache_dir is True:
        cache_dir = cache.default_cache_dir()
    key = ("cubin", source, "\0".join(opts), arch, backend, toolkit_version(backend), TILEX_VERSION)
    return cache.get_or_build(key, build, cache_dir, validate=_not_a_cubin)


def _not_a_cubin(payload: bytes) -> str | None:
    """Why a cached payload is not a cubin (an ELF image), or None."""
    return None if payload[:4] == b"\x7fELF" else f"the payload is not a cubin (starts {payload[:8]!r}, not ELF)"
