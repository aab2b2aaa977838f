"""Compile-time parameters tilex chooses: every configuration of a kernel's search space is translated and
scored at a shape bucket, and the fastest the model predicts is chosen.

A kernel leaves a parameter to tilex with `<BM: int = auto>` (the space is implied by the parameter's role,
`autoconfig_space.IMPLIED`) or `<BM: int in (64, 128, 256)>` (declared). `choose(source, kernel, shapes)`
translates each candidate once (passes only, cached per source digest, kernel, defines, arch and launch facts:
`translated`), reads what the translation decided (tensor-core strategy, threads, shared memory: the memory
pass's own budget, registers) and scores it with the resource model of `autoconfig_model` (`estimate`) at the
model bucket of the sizes (`autoconfig_space.model_bucket`). A configuration `tilex tune` timed and stored for
that (source, kernel, shape bucket, arch, toolkit) wins over the model. The model and its constants are
documented in docs/language.md ("Compile-time parameters tilex chooses").
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from . import ast as A
from .autoconfig_model import (  # noqa: F401  (the model's names, read as autoconfig.X too)
    DRAM_BW, REGS_SM, SMS, Estimate, Work, estimate, program_work)
from .autoconfig_space import IMPLIED, auto_params, bucket_of, declared_space, model_bucket, role  # noqa: F401
from .diagnostics import CompileError
from .dtype_params import changed_dtypes

NOMINAL_SIZE = 4096  # the size of every symbol when no shapes are known (`tilex translate`, module.cuda)


# ---------------------------------------------------------------- translating candidates (cached)
_PROGRAMS: dict[tuple, Any] = {}
_MAX_PROGRAMS = 4096


@functools.lru_cache(maxsize=64)  # a few sources, asked per call
def digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def translated(source: str, file: str, kernel: str, defines: Mapping[str, Any], arch: str,
               assume: tuple = (), src_digest: str | None = None):
    """The checked IR kernel of one candidate, or the CompileError that rejects it (both cached)."""
    from .pipeline import Options, compile_program

    key = (src_digest or digest(source), file, kernel, tuple(sorted(defines.items())), arch, tuple(assume))
    hit = _PROGRAMS.get(key)
    if hit is None:
        try:
            program = compile_program(source, file, Options(defines=dict(defines), arch=arch, kernel=kernel,
                                                            assume=tuple(assume)))
            hit = program.kernel(kernel)
        except CompileError as e:
            hit = e
        if len(_PROGRAMS) >= _MAX_PROGRAMS:
            _PROGRAMS.clear()
        _PROGRAMS[key] = hit
    return hit


# ---------------------------------------------------------------- choosing
@dataclass
class Candidate:
    defines: dict
    status: str  # "chosen" | "ok" | "rejected"
    reason: str = ""
    estimate: Estimate | None = None

    def as_dict(self) -> dict:
        d = {"defines": self.defines, "status": self.status}
        if self.reason:
            d["reason"] = self.reason
        if self.estimate is not None:
            d.update(self.estimate.as_dict())
        return d


@dataclass
class Choice:
    kernel: str
    shapes: dict
    bucket: dict
    arch: str
    defines: dict  # the chosen auto parameters
    source: str  # "model" | "tuned" | "fixed" (no auto parameter left to choose)
    candidates: list = field(default_factory=list)  # ranked: chosen first, then ok by time, then rejected
    space: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"kernel": self.kernel, "shapes": self.shapes, "bucket": self.bucket, "arch": self.arch,
                "chosen": self.defines, "by": self.source, "space": {k: list(v) for k, v in self.space.items()},
                "candidates": [c.as_dict() for c in self.candidates]}


_CHOICES: dict[tuple, Choice] = {}
_MAX_CHOICES = 4096


def _first_line(e: CompileError) -> str:
    lines = [ln for ln in e.message.strip().splitlines() if ln.strip()]
    return lines[0][:300] if lines else "compile error"


def choose(source: str, file: str, kernel: str, shapes: Mapping[str, int], arch: str = "sm_90a",
           defines: Mapping[str, Any] | None = None, assume: tuple = (), tuned: bool = True,
           cache_dir=None, space: Mapping[str, Sequence] | None = None) -> Choice:
    """The auto parameters of `kernel` for `shapes` (every symbol): a `tilex tune` winner stored for this
    bucket if there is one (with `tuned`), else the configuration the model predicts fastest at the model
    bucket of `shapes`. `defines` fixes parameters (not searched); `assume` are launch facts (sym, divisor).
    `space` searches these candidates instead of the declared ones (any parameters: a wrapper choosing the
    tiles of a kernel whose parameters have defaults, as tilex.stdlib.linear does).
    Cached per (source digest, kernel, bucket, arch, defines, facts, space)."""
    src_digest = digest(source)
    fixed = dict(defines or {})
    bucket = bucket_of(shapes)
    given = tuple((n, tuple(v)) for n, v in space.items()) if space is not None else None
    key = (src_digest, file, kernel, tuple(bucket.items()), arch, tuple(sorted(fixed.items())), tuple(assume), tuned,
           given)
    hit = _CHOICES.get(key)
    if hit is not None:
        return hit
    kdecl = _parsed(source, file, src_digest).kernel(kernel)
    space = {n: tuple(v) for n, v in (dict(given) if given is not None else declared_space(kdecl)).items()
             if n not in fixed}
    if tuned and space:
        stored = _tuned(source, kernel, shapes, arch, cache_dir, changed_dtypes(kdecl, fixed))
        if stored is not None and set(space) <= set(stored):
            choice = Choice(kernel, dict(shapes), bucket, arch, {n: stored[n] for n in space}, "tuned", [], space)
            return _remember(key, choice)
    names = list(space)
    cands: list[Candidate] = []
    for values in itertools.product(*(space[n] for n in names)):
        cfg = dict(zip(names, values))
        cands.append(_evaluate(source, file, kernel, {**fixed, **cfg}, cfg, bucket, arch, assume, src_digest))
    # fastest first; among equals (within 0.1%) the one with more slack under the DRAM floor, then the least work
    # (FLOPs of all programs: a 128-row tile over 64 rows ties in time where memory binds, but wastes half its math),
    # then fewer resources
    ok = sorted((c for c in cands if c.estimate is not None),
                key=lambda c: (round(math.log(max(c.estimate.time_us, 1e-6)) * 1000),
                               round(c.estimate.work_us, 3), c.estimate.work.flops * c.estimate.programs,
                               c.estimate.smem_bytes, c.estimate.threads))
    bad = [c for c in cands if c.estimate is None]
    if not ok:
        reasons = "; ".join(f"{_cfg_text(c.defines)}: {c.reason}" for c in bad[:4])
        raise CompileError(f"kernel '{kernel}': no configuration of its search space compiles ({reasons})",
                           kdecl.span)
    ok[0].status = "chosen"
    choice = Choice(kernel, dict(shapes), bucket, arch, dict(ok[0].defines), "model" if names else "fixed",
                    ok + bad, space)
    return _remember(key, choice)


@functools.lru_cache(maxsize=64)
def _parsed(source: str, file: str, src_digest: str):
    from .parser import parse

    return parse(source, file)


def _remember(key, choice):
    if len(_CHOICES) >= _MAX_CHOICES:
        _CHOICES.clear()
    _CHOICES[key] = choice
    return choice


def _cfg_text(cfg) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.items()) or "(defaults)"


def _evaluate(source, file, kernel, defines, cfg, bucket, arch, assume, src_digest) -> Candidate:
    from .inputs import tensor_bytes
    from .launchspec import make_spec
    from .runtime.args import eval_grid

    k = translated(source, file, kernel, defines, arch, assume, src_digest)
    if isinstance(k, CompileError):
        return Candidate(cfg, "rejected", _first_line(k))
    spec = make_spec(k)
    symbols = {s: bucket.get(s, NOMINAL_SIZE) for s in spec.symbols}
    try:
        grid = eval_grid(spec, symbols)
    except Exception as e:  # a grid beyond CUDA's limits at these sizes
        return Candidate(cfg, "rejected", str(e).splitlines()[0])
    est = estimate(k, spec.threads, spec.smem_bytes, grid, symbols, float(tensor_bytes(spec, symbols)))
    if est.regs > 255:
        return Candidate(cfg, "rejected", f"~{est.regs} registers per thread (the accumulators' share + 32): more "
                                          "than 255, the accumulators would spill", None)
    if est.regs * est.threads > REGS_SM:
        return Candidate(cfg, "rejected", f"{est.threads} threads x ~{est.regs} registers (the accumulators' share + "
                                          f"32) exceed the {REGS_SM} registers of an SM", None)
    return Candidate(cfg, "ok", "", est)


def _tuned(source, kernel, shapes, arch, cache_dir, dtypes=None):
    try:
        from .tune import best

        return best(source, kernel, shapes, arch, cache_dir=cache_dir, dtypes=dtypes)
    except Exception:  # an unreadable store never stops a launch (it warns)
        return None


def nominal_defines(program: A.Program, options) -> dict[str, dict]:
    """{kernel: chosen auto parameters} at NOMINAL_SIZE for every symbol: what a translation without shapes
    (`tilex translate`, `module.cuda`) uses for parameters left to tilex."""
    out = {}
    for k in program.kernels:
        if not any(c.auto and c.name not in options.defines for c in k.cparams):
            continue
        shapes = {}
        for p in k.params:
            for d in p.type.dims or ():
                if isinstance(d, A.Name) and d.id not in {c.name for c in k.cparams}:
                    shapes[d.id] = NOMINAL_SIZE
        fixed = {n: v for n, v in options.defines.items() if n in {c.name for c in k.cparams}}
        out[k.name] = choose(program.source, program.file, k.name, shapes, options.arch, fixed,
                             tuple(options.assume), tuned=False).defines
    return out
