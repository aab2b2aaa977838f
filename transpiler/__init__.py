"""tilex: a compiler for tile-level GPU kernels.

    import tilex
    mod = tilex.compile("examples/rmsnorm.tile", BLOCK=1024)
    mod.rmsnorm(x, w, y, eps=1e-6)        # CuPy arrays or torch CUDA tensors
"""

__version__ = "0.1.0"


def compile(path_or_source, arch=None, cache_dir=None, **defines):  # noqa: A001
    """Translate a .tile file (or source) and return a Module of launchable kernels."""
    from .api import compile as _compile

    return _compile(path_or_source, arch=arch, cache_dir=cache_dir, **defines)


def tuned_defines(path_or_source, kernel, shapes, arch=None, cache_dir=None):
    """The compile-time parameters `tilex tune` stored for this kernel, shape bucket and arch ({} if none)."""
    from .api import tuned_defines as _tuned_defines

    return _tuned_defines(path_or_source, kernel, shapes, arch=arch, cache_dir=cache_dir)


def translate(source, file="<string>", options=None, host=False):
    """Translate .tile source text to CUDA C++ (see tilex.translate.Translation)."""
    from .translate import translate as _translate

    return _translate(source, file, options, host)
