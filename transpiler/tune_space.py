"""The search space of `tilex tune`: shape buckets, each parameter's default candidates, `--space`, configurations."""
from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

from .diagnostics import TilexError

# default-space bounds: sizes are powers of two in [1, 4096]; stages in [1, 8]; warps in [1, 32]
SIZE_BOUNDS = (1, 4096)
STAGE_BOUNDS = (1, 8)
WARP_BOUNDS = (1, 32)


class TuneError(TilexError):
    """A tuning request that cannot run: unknown parameter, bad space, no kernel, ..."""


# ---------------------------------------------------------------- shapes and spaces
def _pow2_ceil(n: int) -> int:
    n = int(n)
    return n if n <= 1 else 1 << (n - 1).bit_length()


def bucket(shapes: Mapping[str, int]) -> dict[str, int]:
    """Each symbol rounded up to a power of two (0 and 1 stay): the key under which a tuned
    configuration is stored. {"M": 4096, "N": 13824, "K": 5120} -> {"K": 8192, "M": 4096, "N": 16384}."""
    return {name: _pow2_ceil(shapes[name]) for name in sorted(shapes)}


def bucket_text(shapes: Mapping[str, int]) -> str:
    """`K=8192,M=4096,N=16384`: the bucket of `shapes`, sorted by symbol name."""
    return ",".join(f"{k}={v}" for k, v in bucket(shapes).items())


def _is_pow2(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def default_candidates(name: str, kind: str, default: Any) -> list:
    """Candidate values of one compile-time parameter when no --space names it.

    int parameters with a power-of-two default: half, the default and double, within
    `SIZE_BOUNDS` (`WARP_BOUNDS` for a `warps` parameter or WARPS). Parameters whose name contains STAGE: default
    - 1, default, default + 1 within `STAGE_BOUNDS`. Everything else (floats, bools, ints
    that are not powers of two): just the default.
    """
    if default is None:
        return []
    if kind not in ("int", "warps", "min_blocks") or isinstance(default, bool):
        return [default]
    d = int(default)
    if "STAGE" in name.upper():
        lo, hi = STAGE_BOUNDS
        return [v for v in (d - 1, d, d + 1) if lo <= v <= hi] or [d]
    if not _is_pow2(d):
        return [d]
    lo, hi = WARP_BOUNDS if name.upper() == "WARPS" or kind == "warps" else SIZE_BOUNDS
    out = [v for v in (d // 2, d, d * 2) if lo <= v <= hi and _is_pow2(v)]
    return sorted(set(out)) if d in out else [d]


def parse_space(items: Sequence[str] | None) -> dict[str, list]:
    """`--space BM=64,128 --space STAGES=3,4` -> {"BM": [64, 128], "STAGES": [3, 4]}."""
    from .inputs import InputError, parse_literal, split_assignment

    out: dict[str, list] = {}
    for item in items or ():
        name, text = split_assignment(item, "--space")
        values = []
        for part in text.split(","):
            if not part.strip():
                continue
            try:
                v = parse_literal(part)
            except InputError as e:
                raise TuneError(f"--space {item}: {e}") from None
            if v not in values:
                values.append(v)
        if not values:
            raise TuneError(f"--space {item}: no values")
        out[name] = values
    return out


def search_space(cparams: Sequence[Any], space: Mapping[str, Sequence] | None = None,
                 fixed: Mapping[str, Any] | None = None, kernel: Any = None) -> dict[str, list]:
    """{parameter: candidate values} for a kernel's compile-time parameters (`A.CParam`s).

    `fixed` (-D) pins a parameter to one value; `space` (--space) gives the candidates of
    the parameters it names; parameters left to tilex (`= auto`, `in (...)`) get their declared
    or implied space (`tilex.autoconfig.declared_space` of the parsed `kernel`); the rest get
    `default_candidates`. Values are checked against the declared kinds; a parameter without a
    default must be fixed or given a space.
    """
    declared = {}
    if kernel is not None and any(getattr(c, "auto", False) for c in cparams):
        from .autoconfig import declared_space

        declared = declared_space(kernel)
    space = dict(space or {})
    fixed = dict(fixed or {})
    by_name = {c.name: c for c in cparams}
    for name in list(space) + list(fixed):
        if name not in by_name:
            has = ", ".join(by_name) or "none"
            raise TuneError(f"'{name}' is not a compile-time parameter of this kernel (it has: {has})")
    both = sorted(set(space) & set(fixed))
    if both:
        raise TuneError(f"'{both[0]}' is given both with -D and with --space")
    out: dict[str, list] = {}
    for c in cparams:
        if c.name in fixed:
            values = [fixed[c.name]]
        elif c.name in space:
            values = list(space[c.name])
        elif c.name in declared:
            values = list(declared[c.name])
        else:
            values = default_candidates(c.name, c.kind, c.default)
            if not values:
                raise TuneError(f"compile-time parameter '{c.name}' has no default: "
                                f"pass -D {c.name}=VALUE or --space {c.name}=V1,V2")
        for v in values:
            _check_kind(c, v)
        out[c.name] = values
    return out


def _check_kind(c: Any, v: Any) -> None:
    ok = {"int": isinstance(v, int) and not isinstance(v, bool),
          "float": isinstance(v, (int, float)) and not isinstance(v, bool),
          "bool": isinstance(v, bool)}.get(getattr(c.kind, "value_kind", c.kind), True)
    if not ok:
        raise TuneError(f"{c.name}={v!r}: '{c.name}' is declared {c.kind}")


def configurations(space: Mapping[str, Sequence], defaults: Mapping[str, Any] | None = None) -> list[dict]:
    """The cartesian product of `space`, the declared-defaults configuration first when it
    is part of it (so it serves as the reference and the baseline)."""
    names = list(space)
    configs = [dict(zip(names, values)) for values in itertools.product(*(space[n] for n in names))]
    defaults = dict(defaults or {})
    if defaults:
        first = [c for c in configs if all(c[n] == defaults.get(n, c[n]) for n in names)]
        if len(first) >= 1:
            configs.remove(first[0])
            configs.insert(0, first[0])
    return configs


def config_text(config: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items()) or "(no parameters)"
