"""`tilex.compile`: translate a .tile file (or source text) and get launchable kernels."""
from __future__ import annotations

from .dtype_params import free_dtype_params
from .pipeline import Options
from .source import read_source
from .targets import DEFAULT_ARCH, resolve_arch, target
from .translate import Translation, translate


class Module:
    """The kernels of one translated .tile file, each callable with CuPy arrays or torch CUDA tensors.

    `module.rmsnorm(x, w, y, eps=1e-6)` binds symbols from the shapes, checks dtypes, shapes,
    devices, contiguity and `where` constraints, then launches through CuPy. `module.cuda`
    is the generated source (parameters left to tilex at its nominal sizes);
    `module.interp(name, *numpy_args)` runs the NumPy interpreter.

    A kernel with parameters left to tilex (`= auto`, `in (...)`), or (with `specialize`, what
    `tilex.compile` passes) one whose translation wants facts `where` does not give, is a
    `tilex.specialize.Specializer`: each call picks the configuration for the sizes' bucket and
    the variant compiled with the launch facts the arguments satisfy (each translated and built once).
    A kernel whose dtype parameters (`<T: dtype = bf16>`) `defines` does not set is a
    `tilex.dtype_binding.DtypeBinder`: each call runs the translation for its arrays' dtypes.
    """

    def __init__(self, translation: Translation, arch: str | None = None, cache_dir=None,
                 defines: dict | None = None, specialize: bool = False):
        self.translation = translation
        self.cuda = translation.cuda
        self.specs = translation.specs
        self._arch = arch
        self._cache_dir = cache_dir
        self.cache_dir = cache_dir
        self.defines = dict(defines or {})
        self.specialize = specialize
        self.arch_for_choice = arch or DEFAULT_ARCH
        self.target = target(self.arch_for_choice)  # what the translation was compiled for (targets.Target)
        self._kernels = {}
        self._variants = {}

    def kernel(self, name: str):
        if name not in self.specs:
            raise AttributeError(f"no kernel named '{name}' (this module has: {', '.join(self.specs)})")
        if name not in self._kernels:
            from .runtime import Kernel

            base = Kernel(self.specs[name], self.cuda, arch=self._arch, cache_dir=self._cache_dir)
            k = self.translation.program.kernel(name)
            if free_dtype_params(k, self.defines):  # <T: dtype = ...> not given: bound from each call's arrays
                from .dtype_binding import DtypeBinder

                self._kernels[name] = DtypeBinder(self, name, base)
                return self._kernels[name]
            auto = any(c.auto and c.name not in self.defines for c in k.cparams)
            wants = bool(getattr(k.facts, "wanted", None))
            if auto or (self.specialize and wants):
                from .specialize import Specializer

                base = Specializer(self, name, base)
            self._kernels[name] = base
        return self._kernels[name]

    def variant(self, name: str, defines: dict, facts: tuple):
        """The runtime Kernel of `name` translated with the chosen `defines` and launch `facts` (cached)."""
        key = (name, tuple(sorted(defines.items())), tuple(facts))
        hit = self._variants.get(key)
        if hit is None:
            from .runtime import Kernel

            program = self.translation.program
            t = translate(program.source, program.file,
                          Options(defines={**self.defines, **defines}, arch=self.arch_for_choice, kernel=name,
                                  assume=tuple(facts)))
            hit = self._variants[key] = Kernel(t.specs[name], t.cuda, arch=self._arch, cache_dir=self._cache_dir)
        return hit

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self.kernel(name)

    def interp(self, name: str, *args, **kwargs):
        from .diagnostics import LaunchError
        from .interp import launch

        if name not in self.specs:
            raise LaunchError(f"no kernel named '{name}' (this module has: {', '.join(self.specs)})")

        k = self.translation.program.kernel(name)
        if free_dtype_params(k, self.defines):  # the specialization for these arrays' dtypes
            return self.kernel(name).module_for(args, kwargs).interp(name, *args, **kwargs)
        return launch(self.translation.program, name, *args, **kwargs)


def compile(path_or_source: str, arch: str | None = None, cache_dir=None, **defines) -> Module:  # noqa: A001
    """Translate a .tile file path (or source text) with compile-time parameters `defines`.

    A str with no newline and no '{' (or an os.PathLike) is a path; anything else is source text."""
    source, file = read_source(path_or_source)
    arch = resolve_arch(arch)
    return Module(translate(source, file, Options(defines=dict(defines), arch=arch)), arch, cache_dir,
                  defines=dict(defines), specialize=True)


def tuned_defines(path_or_source: str, kernel: str, shapes: dict, arch: str | None = None,
                  cache_dir=None, dtypes: dict | None = None) -> dict:
    """The compile-time parameters `tilex tune` stored for `kernel` of this .tile file (path or
    source text) at the shape bucket of `shapes` (every symbol, e.g. {"M": 16, "N": 13824,
    "K": 5120}) on `arch` (default: the current GPU's); {} when nothing was tuned (or there is
    no GPU to name the arch). Wrappers merge it under explicit defines:
    `tilex.compile(path, **{**tilex.tuned_defines(path, "linear", shapes), **user_defines})`. `dtypes`: the
    kernel's dtype parameters where they are not the defaults (`{"T": "f16"}`): each dtype is tuned on its own."""
    from .tune import best

    if arch is None:
        try:
            from .runtime.nvrtc import default_arch

            arch = default_arch()
        except Exception:  # no CuPy or no GPU: nothing tuned applies
            return {}
    return best(path_or_source, kernel, shapes, arch, cache_dir=cache_dir, dtypes=dtypes) or {}
