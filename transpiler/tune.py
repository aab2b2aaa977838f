"""Autotuning: search the compile-time parameters of one kernel at one shape, remember the best.

    tilex tune examples/matmul.tile --shape M=4096,N=4096,K=4096 --space BM=64,128 --space BN=64,128

The search space is the cartesian product of candidate values per compile-time parameter:
`--space NAME=V1,V2,...` (`space=` here) where given, else a default derived from the
declared default (`default_space`), and a single value for parameters fixed with `-D`.
Every candidate is translated (a CompileError, e.g. a shared-memory budget exceeded, marks
it *skipped* with the reason), built, launched once on random inputs and compared with the
reference (the interpreter for small shapes, else the first candidate that ran: the
declared defaults when they are in the space), then timed with CUDA events (median of
`rep` launches after `warmup_ms` of warm-up, L2 flushed before each timed launch).

Parameters left to tilex (`= auto`, `in (...)`) are searched over their declared or implied space.
Candidates are translated with the launch facts the shapes allow (as `tilex.compile` specializes).
The best configuration is stored in `$TILEX_CACHE_DIR/tuned.json` (`TuneStore`), keyed by
(sha256 of the .tile source, kernel name, shape bucket, arch, CUDA toolkit); `best()` and
`tilex.tuned_defines()` read it back. The shape bucket rounds each symbol up to a power of
two (`bucket`), so M=4096, N=13824, K=5120 is tuned once for M=4096, N=16384, K=8192.

The GPU work sits behind a small `Runner` interface (`CupyRunner` on a GPU); tests inject
a fake one to exercise the search, the checks and the ranking on the CPU.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import statistics
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from .diagnostics import CompileError
from .source import read_source
# the parts of `tilex tune` in modules of their own, re-exported: tilex.tune is what callers import
from .tune_results import Candidate, TuneResult, rank, render_table  # noqa: F401
from .tune_space import (STAGE_BOUNDS, SIZE_BOUNDS, WARP_BOUNDS, TuneError, bucket, bucket_text,  # noqa: F401
                         config_text, configurations, default_candidates, parse_space, search_space)
from .tune_store import (STORE_FORMAT, STORE_NAME, STORE_VERSION, TuneStore, _warn, best,  # noqa: F401
                         source_sha256, store_key, toolkit)
from . import tune_store as _store


def __getattr__(name: str):
    if name == "WRITES":  # TuneStore.put's counter lives in tune_store; `tune.WRITES` reads it as it is now
        return _store.WRITES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# the interpreter serves as the reference when the problem is at most this big
INTERP_MAX_ELEMENTS = 1 << 22
INTERP_MAX_PROGRAMS = 4096


# ---------------------------------------------------------------- runners
class Runner(Protocol):
    """What the search needs from a device. `CupyRunner` is the real one."""

    arch: str

    def setup(self, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, Any], out_names: Sequence[str]) -> None:
        """Receive the (host) inputs once; outputs start from `arrays[name]` on every run."""

    def build(self, spec: Any, cuda: str) -> Any:
        """Compile and load one candidate; raise to skip it."""

    def run(self, built: Any) -> dict[str, np.ndarray]:
        """Reset the outputs, launch once, return the outputs on the host."""

    def time(self, built: Any) -> float:
        """Median milliseconds of one launch."""


class CupyRunner:
    """Builds with NVRTC (the cubin cache applies), launches with CuPy, times with CUDA events:
    warm-up for `warmup_ms`, then `rep` launches, each after a 256 MiB memset that flushes L2."""

    FLUSH_BYTES = 256 << 20

    def __init__(self, arch: str | None = None, warmup_ms: float = 25.0, rep: int = 100, flush_l2: bool = True):
        import cupy  # noqa: F401  (fails early without CuPy)

        from .runtime.nvrtc import default_arch

        self.arch = arch or default_arch()
        self.warmup_ms = float(warmup_ms)
        self.rep = max(1, int(rep))
        self.flush_l2 = flush_l2
        self._flush = None

    def setup(self, arrays, scalars, out_names):
        import cupy

        self.host = dict(arrays)
        self.dev = {n: cupy.asarray(a) for n, a in arrays.items()}
        self.scalars = dict(scalars)
        self.out_names = list(out_names)
        if self.flush_l2:
            self._flush = cupy.empty(self.FLUSH_BYTES, dtype=cupy.uint8)

    def build(self, spec, cuda):
        from .runtime import Kernel

        k = Kernel(spec, cuda, arch=self.arch)
        k.cubin_for(self.arch)  # compile now: a failure skips this candidate
        prepared = k._prepare(k.bind(**self.dev, **self.scalars), None)
        if prepared is None:
            raise TuneError("the grid is empty at this shape")
        launch, device, stream = prepared
        return launch, stream

    def run(self, built):
        import cupy

        launch, stream = built
        for n in self.out_names:
            self.dev[n].set(self.host[n])
        launch()
        cupy.cuda.get_current_stream().synchronize()
        if stream is not None:
            stream.synchronize()
        return {n: cupy.asnumpy(self.dev[n]) for n in self.out_names}

    def time(self, built):
        import cupy

        launch, stream = built
        s = stream if stream is not None else cupy.cuda.get_current_stream()
        # estimate one launch, then warm up for warmup_ms
        e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
        e0.record(s)
        for _ in range(3):
            launch()
        e1.record(s)
        e1.synchronize()
        est = max(cupy.cuda.get_elapsed_time(e0, e1) / 3, 1e-3)
        for _ in range(int(min(max(self.warmup_ms / est, 1), 10000))):
            launch()
        events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(self.rep)]
        with s:
            for start, end in events:
                if self._flush is not None:
                    self._flush.fill(0)
                start.record(s)
                launch()
                end.record(s)
        events[-1][1].synchronize()
        return float(statistics.median(cupy.cuda.get_elapsed_time(a, b) for a, b in events))


# ---------------------------------------------------------------- the search
def _first_line(e: BaseException) -> str:
    text = e.message if isinstance(e, CompileError) else str(e)
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return (lines[0] if lines else type(e).__name__)[:300]


def _programs(spec, symbols) -> int:
    from .runtime.args import eval_expr

    return math.prod(int(eval_expr(g, symbols)) for g in spec.grid)


def tune(path_or_source: str | os.PathLike, kernel: str | None, shapes: Mapping[str, int], *,
         space: Mapping[str, Sequence] | None = None, defines: Mapping[str, Any] | None = None,
         runner: Runner | None = None, arch: str | None = None, warmup_ms: float = 25.0, rep: int = 100,
         reference: str = "auto", seed: int = 0, store: bool = True,
         cache_dir: str | os.PathLike | None = None,
         progress: Callable[[str], None] | None = None, args: Mapping[str, str] | None = None,
         candidates: Sequence[Mapping[str, Any]] | None = None) -> TuneResult:
    """Try every configuration of the search space for `kernel` at `shapes`; return them
    ranked and (with `store`) record the fastest correct one for `best()`.

    `reference`: "interp" (compare with the NumPy interpreter), "first" (with the first
    candidate that ran), or "auto" (interp when the problem is small). `runner` defaults to
    a `CupyRunner(arch, warmup_ms, rep)`. `args`: scalar parameter values as text (`--arg`), for
    scalars without a declared default. `candidates`: time exactly these configurations (each a
    value for every searched parameter, e.g. the model's best few) instead of the whole space.
    """
    from . import harness as H
    from .pipeline import Options, compile_program
    from .translate import translate
    from .version import __version__

    say = progress or (lambda msg: None)
    if reference not in ("auto", "interp", "first"):
        raise TuneError(f"reference must be auto, interp or first, got {reference!r}")
    source, file = read_source(path_or_source, "tilex.tune.tune()")
    parsed = compile_program(source, file, Options(kernel=kernel), stop_after="parse")
    kernel = H.pick_kernel([k.name for k in parsed.kernels], file, kernel, error=TuneError)
    kdecl = parsed.kernel(kernel)
    fixed = dict(defines or {})
    sp = search_space(kdecl.cparams, space, fixed, kernel=kdecl)
    declared = {c.name: c.default for c in kdecl.cparams if c.default is not None}
    configs = configurations(sp, {**declared, **fixed})
    if candidates is not None:
        configs = [{**{n: v[0] for n, v in sp.items()}, **dict(c), **fixed} for c in candidates]
    if runner is None:
        runner = CupyRunner(arch, warmup_ms=warmup_ms, rep=rep)
    arch = runner.arch
    n = len(configs)
    say(f"tuning {kernel} ({file}) at {', '.join(f'{k}={v}' for k, v in shapes.items())} on {arch}: "
        f"{n} configuration{'s' if n != 1 else ''}")

    candidates: list[Candidate] = []
    facts = None
    symbols = None
    first_spec = None
    prob = None
    ref_outputs: dict[str, np.ndarray] | None = None
    ref_mode = reference
    nbytes = flop = None
    width = len(str(n))
    for i, cfg in enumerate(configs, 1):
        cand = Candidate(dict(cfg))
        candidates.append(cand)
        tag = f"[{i:>{width}}/{n}] {config_text(cfg)}"
        try:
            if facts is None:  # launch facts these shapes allow (fresh inputs are aligned), as tilex.compile infers
                facts = _shape_facts(source, file, kernel, dict(cfg), arch, shapes)
            t = translate(source, file, Options(defines=dict(cfg), arch=arch, kernel=kernel, assume=facts))
        except CompileError as e:
            cand.status, cand.reason = "skipped", _first_line(e)
            say(f"{tag}: skipped: {cand.reason}")
            continue
        spec = t.specs[kernel]
        cand.threads, cand.smem_bytes = spec.threads, spec.smem_bytes
        if first_spec is None:  # inputs and the reference come from the first config that compiles
            first_spec = spec
            prob = H.problem(spec, shapes, seed, args=args)
            symbols = prob.symbols
            nbytes, flop = H.work(t.program.kernel(kernel), spec, symbols)
            if ref_mode == "auto":
                small = prob.elements <= INTERP_MAX_ELEMENTS and _programs(spec, symbols) <= INTERP_MAX_PROGRAMS
                ref_mode = "interp" if small else "first"
            if ref_mode == "interp":
                say("running the interpreter for the reference output ...")
                ref_outputs = H.reference(t.program, kernel, prob)
            runner.setup(prob.arrays, prob.scalars, list(prob.outputs))
        elif spec.params != first_spec.params or spec.symbols != first_spec.symbols:
            cand.status, cand.reason = "skipped", "its parameters differ from the first configuration's"
            say(f"{tag}: skipped: {cand.reason}")
            continue
        try:
            built = runner.build(spec, t.cuda)
        except Exception as e:  # NVRTC errors, too much shared memory for this device, ...
            cand.status, cand.reason = "skipped", "build failed: " + _first_line(e)
            say(f"{tag}: skipped: {cand.reason}")
            continue
        try:
            got = runner.run(built)
        except Exception as e:
            cand.status, cand.reason = "failed", "launch failed: " + _first_line(e)
            say(f"{tag}: FAILED: {cand.reason}")
            continue
        if ref_outputs is None:
            ref_outputs = {o: np.asarray(got[o]) for o in prob.outputs}
            cand.reference = True
            cand.rel_err = 0.0
        else:
            worst = None
            for o, r in H.compare_outputs(got, ref_outputs, prob).items():
                cand.rel_err = max(cand.rel_err or 0.0, r["rel_err"])
                if not r["ok"] and worst is None:
                    worst = f"output '{o}' differs from the {('interpreter' if ref_mode == 'interp' else 'reference')}" \
                            f" (rel err {r['rel_err']:.3g} > tol {r['tol']:.3g})" if r["tol"] else \
                            f"output '{o}' differs from the reference (exact match required)"
            if worst is not None:
                cand.status, cand.reason = "wrong", worst
                say(f"{tag}: WRONG: {worst}")
                continue
        try:
            cand.time_ms = float(runner.time(built))
        except Exception as e:
            cand.status, cand.reason = "failed", "timing failed: " + _first_line(e)
            say(f"{tag}: FAILED: {cand.reason}")
            continue
        cand.status = "ok"
        say(f"{tag}: {cand.time_ms:.4f} ms" + (" (reference)" if cand.reference else ""))

    if symbols is None:
        symbols = dict(shapes)
    result = TuneResult(kernel=kernel, file=file, shapes=dict(symbols), arch=arch,
                        source_sha256=source_sha256(source), space=sp, candidates=rank(candidates),
                        reference=ref_mode if ref_mode != "auto" else "first", nbytes=nbytes, flop=flop,
                        default={**declared, **fixed})
    b = result.best
    if store and b is not None:
        st = TuneStore(cache_dir)
        d = result.default_candidate()
        record = {"kernel": kernel, "source_sha256": result.source_sha256, "file": file,
                  "bucket": result.bucket, "arch": arch, "shapes": result.shapes,
                  "defines": dict(b.defines), "time_ms": b.time_ms,
                  "default_time_ms": d.time_ms if d else None,
                  "tilex_version": __version__, "toolkit": toolkit(), "facts": [list(f) for f in (facts or ())],
                  "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        try:
            from .dtype_params import changed_dtypes
            from .tune_store import tuned_kernel

            dtypes = changed_dtypes(kdecl, fixed)  # their values are in the key, not the record's defines
            record["defines"] = {n: v for n, v in record["defines"].items() if n not in dtypes}
            st.put(store_key(result.source_sha256, tuned_kernel(kernel, dtypes), result.shapes, arch), record)
            result.stored = str(st.path)
        except OSError as e:
            _warn(f"tilex cache: cannot write {st.path} ({e}); the tuned configuration was not stored")
    return result


def _shape_facts(source, file, kernel, cfg, arch, shapes) -> tuple:
    """The facts the translation wants (`Facts.wanted`) that `shapes` satisfy (pointers of fresh inputs are aligned)."""
    from .pipeline import Options, compile_program

    k = compile_program(source, file, Options(defines=cfg, arch=arch, kernel=kernel)).kernel(kernel)
    wanted = getattr(k.facts, "wanted", {}) or {}
    return tuple((s, d) for s, d in sorted(wanted.items()) if s in shapes and int(shapes[s]) % d == 0)
