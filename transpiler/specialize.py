"""Launch-time specialization: the facts a kernel's translation asked for and `where` did not give, inferred
from the actual arguments, so that each call runs a variant compiled with the facts its arguments satisfy.

The passes record what they could have used (`Facts.wanted`, e.g. `K % 8 == 0` for the row pitch of a
tensor TMA would read). A fact `SYM % D == 0` holds for a call when the bound size of SYM is a multiple of D
and every tensor whose innermost dimension is SYM has a 16-byte aligned base address (what TMA and 16-byte
vector accesses need besides the pitch). A variant is translated with the facts that hold added as `where`
constraints (`Options.assume`), so its launch checks them again: a variant is never used for arguments that
violate its facts. `Specializer` (what `tilex.compile` gives for such kernels) picks and caches the variants;
with TILEX_AUTOTUNE=1 the first call of a bucket times the model's best few configurations on the GPU first.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from .spec import KernelSpec, ParamKind

ALIGN = 16  # bytes: TMA's base-address rule, and a 16-byte vector access's
AUTOTUNE_ENV = "TILEX_AUTOTUNE"  # "1": time the model's best few configurations at a bucket's first call
AUTOTUNE_TOP = 6


def data_pointer(x: Any) -> int | None:
    """The device (or host) address of an array argument, or None when it has none we can read."""
    try:
        get = getattr(x, "data_ptr", None)  # torch
        if get is not None:
            return int(get())
        ptr = getattr(getattr(x, "data", None), "ptr", None)  # CuPy: MemoryPointer.ptr (offset included)
        if isinstance(ptr, int):
            return ptr
        cai = getattr(x, "__cuda_array_interface__", None)  # CuPy and others
        if isinstance(cai, dict):
            return int(cai["data"][0])
        iface = getattr(x, "__array_interface__", None)  # NumPy
        if isinstance(iface, dict):
            return int(iface["data"][0])
    except Exception:  # noqa: BLE001 - an object we cannot read assumes nothing
        return None
    return None


def bind_sizes(spec: KernelSpec, args: Sequence[Any], kwargs: Mapping[str, Any]):
    """(symbol sizes, {tensor: address}) from the tensor arguments' shapes, or None when the arguments do not
    even match the parameters (the kernel's own binding then reports the error)."""
    sizes: dict[str, int] = {}
    ptrs: dict[str, int | None] = {}
    if len(args) > len(spec.params):
        return None
    for i, p in enumerate(spec.params):
        if p.kind != ParamKind.TENSOR:
            continue
        x = args[i] if i < len(args) else kwargs.get(p.name)
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) != len(p.dims):
            return None
        for d, n in zip(p.dims, shape):
            if isinstance(d, str):
                n = int(n)
                if sizes.setdefault(d, n) != n:
                    return None
        ptrs[p.name] = data_pointer(x)
    if any(s not in sizes for s in spec.symbols):
        return None
    return sizes, ptrs


def facts_that_hold(spec: KernelSpec, wanted: Mapping[str, int], sizes: Mapping[str, int],
                    ptrs: Mapping[str, int | None]) -> tuple[tuple[str, int], ...]:
    """The wanted facts `(SYM, D)` these arguments satisfy: SYM % D == 0 and every tensor whose innermost
    dimension is SYM starts at a 16-byte aligned address. Sorted by symbol."""
    out = []
    for sym, d in sorted(wanted.items()):
        n = sizes.get(sym)
        if n is None or n % d:
            continue
        users = [p.name for p in spec.params if p.kind == ParamKind.TENSOR and p.dims and p.dims[-1] == sym]
        if all(ptrs.get(u) is not None and ptrs[u] % ALIGN == 0 for u in users):
            out.append((sym, int(d)))
    return tuple(out)


def launch_choice(source: str, file: str, kernel: str, sizes: Mapping[str, int], arch: str,
                  defines: Mapping[str, Any], auto: bool, holds, wanted: Mapping[str, int] | None = None,
                  cache_dir=None):
    """What a launch at `sizes` compiles: (the autoconfig Choice, or None without `auto` parameters; the launch
    facts; the checked kernel, or the CompileError of that configuration). `holds(wanted)` gives the facts
    `(SYM, D)` that hold among the wanted ones `{SYM: D}`; the configuration is chosen with them, and the loop
    is repeated with what the chosen configuration's own translation wants, up to 4 times. `defines` fixes
    compile-time parameters. The Specializer and `tilex explain --shape` both ask this."""
    from .autoconfig import choose, translated

    wanted = dict(wanted or {})
    choice, facts, k = None, (), None
    for _ in range(4):
        facts = holds(wanted)
        if auto:
            choice = choose(source, file, kernel, sizes, arch, defines, facts, cache_dir=cache_dir)
        k = translated(source, file, kernel, {**defines, **(choice.defines if choice else {})}, arch, facts)
        more = {s: d for s, d in (getattr(getattr(k, "facts", None), "wanted", {}) or {}).items()
                if s not in wanted}
        if not more:
            break
        wanted.update(more)
    return choice, facts, k


class Specializer:
    """A kernel of a `tilex.compile` module whose translation can use launch facts or whose compile-time
    parameters tilex chooses: each call binds the sizes, picks (once per sizes and pointer alignment) the
    configuration (`tilex.autoconfig.choose`) and the facts that hold, and launches that variant's Kernel
    (which checks every argument, its `where` constraints and the assumed facts)."""

    MAX_PLANS = 4096

    def __init__(self, module, name: str, base_kernel):
        self.module = module
        self.name = name
        self.base = base_kernel  # the nominal translation's Kernel: reports bad arguments
        self.spec = base_kernel.spec
        k = module.translation.program.kernel(name)
        self.wanted = dict(getattr(k.facts, "wanted", {}) or {})
        self.auto = [c.name for c in k.cparams if c.auto and c.name not in module.defines]
        self._tensors = tuple((i, p.name) for i, p in enumerate(self.spec.params) if p.kind == ParamKind.TENSOR)
        self._plans: dict[tuple, Any] = {}

    def __repr__(self) -> str:
        return f"<tilex specializing kernel {self.name}: facts tried {self.wanted or 'none'}, chosen {self.auto or 'none'}>"

    def _key(self, args, kwargs) -> tuple | None:
        """The tensor arguments' shapes and whether each address is 16-byte aligned: what a variant depends on."""
        key = []
        n = len(args)
        try:
            for i, name in self._tensors:
                x = args[i] if i < n else kwargs[name]
                key.append(tuple(x.shape))
                ptr = data_pointer(x)
                key.append(ptr is not None and ptr % ALIGN == 0)
        except (KeyError, AttributeError, TypeError):
            return None
        return tuple(key)

    def variant_for(self, *args, **kwargs):
        """The runtime Kernel these arguments launch (the nominal one when they do not bind). After the first
        call with these shapes and alignments: one tuple and one dict lookup."""
        key = self._key(args, kwargs)
        kern = self._plans.get(key) if key is not None else None
        if kern is None:
            bound = bind_sizes(self.spec, args, kwargs)
            if bound is None:
                return self.base  # its binding reports what is wrong
            kern = self._plan(*bound)
            if len(self._plans) >= self.MAX_PLANS:
                self._plans.clear()
            self._plans[key] = kern
        return kern

    def choice(self, sizes: Mapping[str, int], ptrs: Mapping[str, int | None]):
        """(chosen defines, facts) for these sizes (`launch_choice`, the facts checked against `ptrs` too)."""
        m = self.module
        program = m.translation.program
        choice, facts, _ = launch_choice(program.source, program.file, self.name, sizes, m.arch_for_choice,
                                         m.defines, bool(self.auto),
                                         lambda wanted: facts_that_hold(self.spec, wanted, sizes, ptrs),
                                         self.wanted, m.cache_dir)
        return (choice.defines if choice is not None else {}), facts

    def _plan(self, sizes, ptrs):
        defines, facts = self.choice(sizes, ptrs)
        if self.auto and os.environ.get(AUTOTUNE_ENV) == "1":
            defines = self.tune_first(sizes, facts, defines)
        return self.module.variant(self.name, defines, facts)

    def tune_first(self, sizes, facts, defines) -> dict:
        """Opt-in tune-on-first-call (TILEX_AUTOTUNE=1): time the model's best AUTOTUNE_TOP configurations
        on the GPU (`tilex.tune.tune`, which stores the winner for this bucket), unless one is stored."""
        from . import autoconfig as AC
        from . import tune as T

        m = self.module
        source = m.translation.program.source
        from .dtype_params import changed_dtypes

        stored = AC._tuned(source, self.name, sizes, m.arch_for_choice, m.cache_dir,
                           changed_dtypes(m.translation.program.kernel(self.name), m.defines))
        if stored is not None and set(self.auto) <= set(stored):
            return {n: stored[n] for n in self.auto}
        choice = AC.choose(source, m.translation.program.file, self.name, sizes, m.arch_for_choice, m.defines,
                           facts, tuned=False, cache_dir=m.cache_dir)
        top = [c.defines for c in choice.candidates if c.estimate is not None][:AUTOTUNE_TOP]
        try:
            result = T.tune(source, self.name, sizes, defines=m.defines, candidates=top, cache_dir=m.cache_dir)
        except Exception as e:  # noqa: BLE001 - timing is a refinement: the model's choice stands
            import warnings

            warnings.warn(f"tilex: tune-on-first-call of {self.name} failed ({e}); using the model's choice",
                          stacklevel=3)
            return defines
        best = result.best
        return {n: best.defines[n] for n in self.auto} if best is not None else defines

    def __call__(self, *args, stream: Any = None, **kwargs):
        return self.variant_for(*args, **kwargs)(*args, stream=stream, **kwargs)

    def bind(self, *args, **kwargs):
        return self.variant_for(*args, **kwargs).bind(*args, **kwargs)

    def bench(self, *args, warmup: int = 10, rep: int = 100, stream: Any = None, **kwargs) -> float:
        return self.variant_for(*args, **kwargs).bench(*args, warmup=warmup, rep=rep, stream=stream, **kwargs)
