"""Dtype parameters bound at launch: a kernel `k<T: dtype = bf16>(x: T[N], ...)` of `tilex.compile` whose T was
not given runs the specialization for the dtypes of the arrays passed (each translated and built once, cached).

`DtypeBinder` reads, per call, the dtype of every argument whose parameter is written with a dtype parameter
(`x: T[N]`), checks that the arguments bound to one parameter agree (a `LaunchError` naming both), and
launches the kernel of a `Module` translated with those dtypes as compile-time parameters (`-D T=f16`). A
dtype parameter no array argument names keeps its default. The child module is an ordinary one: it checks
every argument again and specializes on sizes and facts as any other (`tilex.specialize`).
"""
from __future__ import annotations

from typing import Any

from .diagnostics import LaunchError
from .dtype_params import free_dtype_params
from .runtime.arrays import describe_array

_MISSING = object()


class DtypeBinder:
    """A kernel of a `tilex.compile` module with dtype parameters left to the arguments (see the module doc)."""

    MAX_CHILDREN = 64

    def __init__(self, module, name: str, base_kernel):
        self.module = module
        self.name = name
        self.base = base_kernel  # the nominal translation's kernel (the defaults): reports unbindable calls
        self.spec = base_kernel.spec
        k = module.translation.program.kernel(name)
        self.free = free_dtype_params(k, module.defines)
        self.defaults = {c.name: c.default for c in k.cparams if c.name in self.free}
        # (position, parameter name, dtype parameter) of every parameter written with a free dtype parameter
        self.uses = tuple((i, p.name, p.type.param) for i, p in enumerate(k.params)
                          if p.type.param in self.free and p.type.dims is not None)
        self._by_key: dict[tuple, Any] = {}
        self._children: dict[tuple, Any] = {}

    def __repr__(self) -> str:
        return f"<tilex kernel {self.name}: dtype parameters {', '.join(self.free)} bound from the arguments>"

    def binding(self, args: tuple, kwargs: dict) -> dict[str, str]:
        """{dtype parameter: dtype name} for these arguments (defaults where no array names one)."""
        got: dict[str, tuple[str, str]] = {}
        n = len(args)
        for i, pname, tp in self.uses:
            x = args[i] if i < n else kwargs.get(pname, _MISSING)
            info = describe_array(x) if x is not _MISSING else None
            if info is None or info.dtype is None:  # not an array, or a dtype tilex lacks: the kernel's checks say so
                continue
            prior = got.setdefault(tp, (info.dtype, pname))
            if prior[0] != info.dtype:
                raise LaunchError(f"{self.name}(): dtype parameter {tp} is bound to {prior[0]} by '{prior[1]}' "
                                  f"but '{pname}' is {info.dtype_text}; arguments written with {tp} must have "
                                  "one dtype")
        return {tp: got[tp][0] if tp in got else str(self.defaults[tp]) for tp in self.free}

    def _key(self, args: tuple, kwargs: dict) -> tuple | None:
        n = len(args)
        try:
            return tuple(getattr(args[i] if i < n else kwargs[p], "dtype", None) for i, p, _ in self.uses)
        except KeyError:
            return None

    def module_for(self, args: tuple, kwargs: dict):
        """The Module translated with the dtypes these arguments bind (cached per binding)."""
        binding = self.binding(args, kwargs)
        key = tuple(sorted(binding.items()))
        child = self._children.get(key)
        if child is None:
            from .pipeline import Options
            from .translate import translate

            m = self.module
            program = m.translation.program
            defines = {**m.defines, **binding}
            # the file's defines were checked against the whole file when it was compiled; the translation of
            # this one kernel takes those of its own compile-time parameters (-D BM=... of another kernel is no error)
            own = {cp.name for k in program.kernels if k.name == self.name for cp in k.cparams}
            defines = {n: v for n, v in defines.items() if n in own}
            t = translate(program.source, program.file, Options(defines=defines, arch=m.arch_for_choice, kernel=self.name))
            child = type(m)(t, m._arch, m._cache_dir, defines=defines, specialize=m.specialize)
            if len(self._children) >= self.MAX_CHILDREN:
                self._children.clear()
            self._children[key] = child
        return child

    def variant_for(self, *args, **kwargs):
        """The kernel these arguments launch; after the first call of a tuple of argument dtypes, one lookup."""
        key = self._key(args, kwargs)
        kern = self._by_key.get(key) if key is not None else None
        if kern is None:
            kern = self.module_for(args, kwargs).kernel(self.name)
            if key is not None:
                if len(self._by_key) >= self.MAX_CHILDREN:
                    self._by_key.clear()
                self._by_key[key] = kern
        return kern

    def __call__(self, *args, stream: Any = None, **kwargs):
        return self.variant_for(*args, **kwargs)(*args, stream=stream, **kwargs)

    def bind(self, *args, **kwargs):
        return self.variant_for(*args, **kwargs).bind(*args, **kwargs)

    def replay(self, args: tuple, kwargs: dict, stream: Any = None, one_kind: bool = False) -> bool:
        kern = self.variant_for(*args, **kwargs)
        replay = getattr(kern, "replay", None)
        return bool(replay and replay(args, kwargs, stream=stream, one_kind=one_kind))

    def bench(self, *args, warmup: int = 10, rep: int = 100, stream: Any = None, **kwargs) -> float:
        return self.variant_for(*args, **kwargs).bench(*args, warmup=warmup, rep=rep, stream=stream, **kwargs)
