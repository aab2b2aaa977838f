"""The library's kernel files: find stdlib_kernels/<name>.tile, read it, and compile it for the current target,
memoized per (name, kernel, compile-time parameters).

The files are dtype-generic through dtype parameters (`kernel rms_norm<T: dtype = bf16, ...>(x: T[M, N], ...)`):
`load("rms_norm", T="f16")` compiles them with `T` set as any other compile-time parameter (`-D T=f16`), so a
file is an ordinary `.tile` file whose defaults are the variant `tilex translate stdlib_kernels/rms_norm.tile`
compiles. The library always sets every dtype parameter (those not given keep their defaults): its modules never
bind dtypes from the arguments (`tilex.dtype_binding`), so a launch is the plain kernel the fast path replays.
"""
from __future__ import annotations

import functools
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent.parent.parent / "stdlib_kernels"


@functools.lru_cache(maxsize=None)
def _kernel_dir() -> Path:
    """The installed tilex.stdlib_kernels package (wheel or editable), else stdlib_kernels/
    next to the source tree (found once per process)."""
    try:
        import tilex.stdlib_kernels as pkg

        d = Path(pkg.__file__).resolve().parent
        if (d / "rms_norm.tile").is_file():
            return d
    except ImportError:  # pragma: no cover - a source tree without the package mapping
        pass
    return KERNEL_DIR


@functools.lru_cache(maxsize=None)
def kernel_path(name: str) -> Path:
    """stdlib_kernels/<name>.tile (ValueError when there is no such file); found once per name."""
    p = _kernel_dir() / f"{name}.tile"
    if not p.is_file():
        raise ValueError(f"no stdlib kernel file {name}.tile in {_kernel_dir()}")
    return p


@functools.lru_cache(maxsize=None)
def source(name: str) -> str:
    """The text of stdlib_kernels/<name>.tile, read once per process like the modules `load` compiles from it."""
    return kernel_path(name).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def _load(name: str, kernel: str | None, items: tuple):
    from ..api import Module
    from ..ast import CParamKind
    from ..pipeline import Options
    from ..translation_cache import translate

    path = kernel_path(name)
    defines = dict(items)
    try:
        from ..runtime.nvrtc import default_arch

        arch = default_arch()
    except Exception:  # no GPU: the target only matters when launching
        arch = "sm_90a"
    t = translate(source(name), str(path), Options(defines=defines, arch=arch, kernel=kernel))[0]
    dtypes = {c.name: c.default for k in t.program.kernels for c in k.cparams if c.kind == CParamKind.DTYPE}
    return Module(t, arch, defines={**dtypes, **defines})


@functools.lru_cache(maxsize=None)
def _declared(name: str) -> dict:
    """{kernel: its parse} of stdlib_kernels/<name>.tile (parsed once)."""
    from ..parser import parse

    return {k.name: k for k in parse(source(name), str(kernel_path(name))).kernels}


def changed_dtypes(name: str, kernel: str, **dtypes) -> dict[str, str]:
    """The dtype parameters among `dtypes` that are not `kernel`'s defaults (the tuned store's key)."""
    from ..dtype_params import changed_dtypes as changed

    return changed(_declared(name)[kernel], dtypes)


def load(name: str, kernel: str | None = None, **defines):
    """Compile stdlib_kernels/<name>.tile for the current target, memoized per (name, defines).

    `defines` are its compile-time parameters, dtype parameters included (`T="f16"`). `kernel=` restricts the
    module to one kernel of the file (less to compile).
    """
    return _load(name, kernel, tuple(sorted(defines.items())))
