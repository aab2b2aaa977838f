"""tilex: a compiler for tile-level GPU kernels.

    import tilex
    mod = tilex.compile("examples/rmsnorm.tile", BLOCK=1024)
    mod.rmsnorm(x, w, y, eps=1e-6)        # CuPy arrays or torch CUDA tensors
"""

import sys as _sys
import types as _types

from .version import __version__  # noqa: F401  (tilex.__version__)


def compile(path_or_source, arch=None, cache_dir=None, **defines):  # noqa: A001
    """Translate a .tile file (or source) and return a Module of launchable kernels."""
    from .api import compile as _compile

    return _compile(path_or_source, arch=arch, cache_dir=cache_dir, **defines)


def tuned_defines(path_or_source, kernel, shapes, arch=None, cache_dir=None):
    """The compile-time parameters `tilex tune` stored for this kernel, shape bucket and arch ({} if none)."""
    from .api import tuned_defines as _tuned_defines

    return _tuned_defines(path_or_source, kernel, shapes, arch=arch, cache_dir=cache_dir)


def translate(source, file="<string>", options=None, host=False):
    """Translate .tile source text to CUDA C++; returns a Translation (`from tilex.translate import Translation`)."""
    from .translate import translate as _translate

    return _translate(source, file, options, host)


class _Package(_types.ModuleType):
    """The tilex package. `tilex.translate` stays the function above: importing the
    submodule of the same name (`from tilex.translate import translate`, done by
    tilex.api and others) would otherwise rebind the attribute to the module, and
    `tilex.translate(src, file)` would fail with "'module' object is not callable".
    The submodule is still importable and lives in sys.modules["tilex.translate"]."""

    def __setattr__(self, name, value):
        if name == "translate" and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
