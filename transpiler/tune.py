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

import contextlib
import datetime as _dt
import functools
import hashlib
import itertools
import json
import math
import os
import statistics
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np

from .diagnostics import CompileError, TilexError
from .runtime.cache import default_cache_dir
from .source import is_source_text, read_source

STORE_NAME = "tuned.json"
STORE_FORMAT = "tilex-tuned-configs"
STORE_VERSION = 1

# default-space bounds: sizes are powers of two in [1, 4096]; stages in [1, 8]; warps in [1, 32]
SIZE_BOUNDS = (1, 4096)
STAGE_BOUNDS = (1, 8)
WARP_BOUNDS = (1, 32)

# the interpreter serves as the reference when the problem is at most this big
INTERP_MAX_ELEMENTS = 1 << 22
INTERP_MAX_PROGRAMS = 4096


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


# ---------------------------------------------------------------- the store
def source_sha256(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=None)
def toolkit() -> str:
    """The CUDA toolkit that builds the kernels (NVRTC's version, `nvrtc-12.8`), or `none` without CuPy."""
    try:
        from .runtime.nvrtc import toolkit_version

        return toolkit_version()
    except Exception:  # no CuPy / NVRTC here: nothing tuned on a GPU applies anyway
        return "none"


def store_key(source_digest: str, kernel: str, shapes: Mapping[str, int], arch: str,
              toolkit_id: str | None = None) -> str:
    """`KERNEL|SHA256|BUCKET|ARCH|TOOLKIT`, e.g. `matmul|3f2a...|K=8192,M=4096,N=16384|sm_90a|nvrtc-13.0`
    (TOOLKIT: `toolkit()` unless given)."""
    return f"{kernel}|{source_digest}|{bucket_text(shapes)}|{arch}|{toolkit_id or toolkit()}"


def _warn(message: str) -> None:
    from .runtime.cache import CacheWarning

    warnings.warn(message, CacheWarning, stacklevel=3)


def _valid_defines(d: Any) -> bool:
    return isinstance(d, dict) and all(isinstance(k, str) and isinstance(v, (int, float, bool))
                                       for k, v in d.items())


class TuneStore:
    """Tuned configurations, one JSON file in the cache directory:

        {"format": "tilex-tuned-configs", "version": 1,
         "entries": {"KERNEL|SHA256|BUCKET|ARCH": {"kernel": ..., "source_sha256": ...,
                     "bucket": {...}, "arch": ..., "defines": {...}, "time_ms": ...,
                     "shapes": {...}, "default_time_ms": ..., "tilex_version": ..., "date": ...}}}

    Writes are atomic (temporary file, fsync, `os.replace`) under an advisory lock, so
    concurrent tuners never leave half a file. A file that cannot be parsed, or an entry
    that is malformed, is reported with a `CacheWarning` and ignored (the next `put`
    rewrites the file).
    """

    def __init__(self, cache_dir: str | os.PathLike | None = None):
        if cache_dir is None:
            cache_dir = default_cache_dir()
        self.dir = Path(cache_dir)
        self.path = self.dir / STORE_NAME

    def load(self) -> dict[str, dict]:
        """All valid entries ({} when the file is missing, unreadable or corrupt)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as e:
            _warn(f"tilex cache: cannot read tuned configurations {self.path} ({e}); ignoring them")
            return {}
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            _warn(f"tilex cache: corrupt tuned-configuration file {self.path} ({e}); ignoring it "
                  "(the next `tilex tune` rewrites it)")
            return {}
        if not isinstance(data, dict) or data.get("format") != STORE_FORMAT \
                or not isinstance(data.get("entries"), dict):
            _warn(f"tilex cache: {self.path} is not a tilex tuned-configuration file; ignoring it")
            return {}
        if data.get("version") != STORE_VERSION:
            _warn(f"tilex cache: {self.path} has format version {data.get('version')!r}, "
                  f"expected {STORE_VERSION}; ignoring it")
            return {}
        entries = {}
        for key, rec in data["entries"].items():
            if isinstance(rec, dict) and _valid_defines(rec.get("defines")):
                entries[key] = rec
            else:
                _warn(f"tilex cache: malformed entry {key!r} in {self.path}; ignoring it")
        return entries

    def get(self, key: str) -> dict | None:
        return self.load().get(key)

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        """Add or replace one entry (read, modify, atomic write, under a lock)."""
        if not _valid_defines(record.get("defines")):
            raise ValueError("a tuned record needs 'defines': {name: int | float | bool}")
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._lock():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a corrupt file is simply replaced
                entries = self.load()
            entries[key] = dict(record)
            data = {"format": STORE_FORMAT, "version": STORE_VERSION,
                    "entries": dict(sorted(entries.items()))}
            _atomic_write(self.path, json.dumps(data, indent=1, sort_keys=False) + "\n")
        global WRITES
        WRITES += 1

    @contextlib.contextmanager
    def _lock(self):
        try:
            import fcntl
        except ImportError:  # not POSIX: atomic replace only
            yield
            return
        with open(self.dir / (STORE_NAME + ".lock"), "a+") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-" + path.name, suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


_DIGESTS: dict[tuple, str] = {}


def _digest_of(path_or_source: str) -> str:
    """sha256 of the source, memoized per file (device, inode, mtime, size) or per text, so
    wrappers can ask per call."""
    if isinstance(path_or_source, os.PathLike):
        path_or_source = os.fspath(path_or_source)
    st = None
    if not is_source_text(path_or_source):
        try:
            st = os.stat(path_or_source)
        except (OSError, ValueError):  # no such file: nothing was tuned for it
            pass
    if st is not None:
        memo = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)  # this file, as it is now
        hit = _DIGESTS.get(memo)
        if hit is None:
            hit = _DIGESTS[memo] = source_sha256(read_source(path_or_source, "tilex.tune.best()")[0])
        return hit
    return _text_digest(path_or_source)


@functools.lru_cache(maxsize=64)  # a few stdlib sources, asked per call
def _text_digest(text: str) -> str:
    return source_sha256(text)


WRITES = 0  # TuneStore.put calls in this process: memos of looked-up configurations key on it
_LOADED: dict[tuple, dict] = {}  # (store path, mtime, size) -> its entries: the store last read
_FOUND: dict[tuple, dict | None] = {}  # (digest, kernel, shapes, arch) -> the entry's defines, in that store
_MAX_FOUND = 4096


def best(path_or_source: str, kernel: str, shapes: Mapping[str, int], arch: str,
         cache_dir: str | os.PathLike | None = None) -> dict | None:
    """The stored best compile-time parameters for `kernel` of this source at the bucket of
    `shapes` (every symbol of the kernel) on `arch`, or None when it was not tuned.

    Cheap enough for wrappers to ask on every call: one `os.stat` of the store (plus one of
    the source when given a path); the file is read again only when it changed."""
    if cache_dir is None:
        cache_dir = default_cache_dir()
    path = os.path.join(cache_dir, STORE_NAME)  # TuneStore(cache_dir).path, without building Paths per call
    try:
        st = os.stat(path)
    except OSError:
        return None
    memo = (path, st.st_mtime_ns, st.st_size)
    entries = _LOADED.get(memo)
    if entries is None:
        entries = TuneStore(cache_dir).load()
        _LOADED.clear()
        _FOUND.clear()
        _LOADED[memo] = entries
    digest = _digest_of(path_or_source)
    found_key = (digest, kernel, tuple(shapes.items()), arch)
    if found_key in _FOUND:
        defines = _FOUND[found_key]
    else:
        rec = entries.get(store_key(digest, kernel, shapes, arch))
        defines = rec["defines"] if rec is not None else None
        if len(_FOUND) >= _MAX_FOUND:
            _FOUND.clear()
        _FOUND[found_key] = defines
    return dict(defines) if defines is not None else None


# ---------------------------------------------------------------- candidates and results
@dataclass
class Candidate:
    """One configuration and what happened to it."""

    defines: dict
    status: str = "pending"  # "ok", "skipped" (did not compile/build), "wrong", "failed" (launch)
    reason: str | None = None
    time_ms: float | None = None
    rel_err: float | None = None
    threads: int | None = None
    smem_bytes: int | None = None
    reference: bool = False  # this candidate's output was the reference

    def as_dict(self) -> dict:
        return {"defines": dict(self.defines), "status": self.status, "reason": self.reason,
                "time_ms": self.time_ms, "rel_err": self.rel_err, "threads": self.threads,
                "smem_bytes": self.smem_bytes, "reference": self.reference}


@dataclass
class TuneResult:
    kernel: str
    file: str
    shapes: dict
    arch: str
    source_sha256: str
    space: dict
    candidates: list[Candidate]  # ranked: ok by time, then wrong, failed, skipped
    reference: str  # "interp" or "first"
    nbytes: int | None = None
    flop: float | None = None
    stored: str | None = None  # path of the store, when the best was stored
    default: dict = field(default_factory=dict)  # the declared defaults

    @property
    def bucket(self) -> dict:
        return bucket(self.shapes)

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates and self.candidates[0].status == "ok" else None

    def default_candidate(self) -> Candidate | None:
        for c in self.candidates:
            if c.status == "ok" and all(c.defines.get(k) == v for k, v in self.default.items() if k in c.defines):
                return c
        return None

    def as_dict(self) -> dict:
        b = self.best
        d = self.default_candidate()
        return {"kernel": self.kernel, "file": self.file, "shapes": self.shapes, "bucket": self.bucket,
                "arch": self.arch, "source_sha256": self.source_sha256, "space": self.space,
                "reference": self.reference, "bytes": self.nbytes, "flop": self.flop,
                "best": b.as_dict() if b else None,
                "default_time_ms": d.time_ms if d else None,
                "stored": self.stored,
                "candidates": [c.as_dict() for c in self.candidates],
                "ok": b is not None}


_ORDER = {"ok": 0, "wrong": 1, "failed": 2, "skipped": 3, "pending": 4}


def rank(candidates: Iterable[Candidate]) -> list[Candidate]:
    """ok candidates fastest first, then wrong, failed and skipped (each in search order)."""
    indexed = list(enumerate(candidates))
    indexed.sort(key=lambda ic: (_ORDER.get(ic[1].status, 9),
                                 ic[1].time_ms if ic[1].status == "ok" and ic[1].time_ms is not None else math.inf,
                                 ic[0]))
    return [c for _, c in indexed]


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
            st.put(store_key(result.source_sha256, kernel, result.shapes, arch), record)
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


# ---------------------------------------------------------------- report
def _fmt_num(v: float | None, spec: str) -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, spec)


def render_table(result: TuneResult):
    """A Rich table of the candidates, fastest first; failed and skipped ones last with the reason."""
    from rich.table import Table

    names = list(result.space)
    tuned = [n for n in names if len(result.space[n]) > 1] or names
    d = result.default_candidate()
    table = Table(show_header=True, header_style="bold")
    table.add_column("#", justify="right")
    for n in tuned:
        table.add_column(n, justify="right")
    for col in ("time ms", "TFLOP/s" if result.flop else "GB/s", "vs default", "threads", "smem", "status"):
        table.add_column(col, justify="left" if col == "status" else "right", overflow="fold")
    rank_no = 0
    for c in result.candidates:
        if c.status == "ok":
            rank_no += 1
        ms = c.time_ms if c.status == "ok" else None
        if ms and result.flop:
            rate = _fmt_num(result.flop / (ms * 1e-3) / 1e12, ".1f")
        elif ms and result.nbytes:
            rate = _fmt_num(result.nbytes / (ms * 1e-3) / 1e9, ".0f")
        else:
            rate = "-"
        speed = _fmt_num(d.time_ms / ms, ".2f") + "x" if (ms and d and d.time_ms) else "-"
        status = c.status + (" (reference)" if c.reference else "") + (f": {c.reason}" if c.reason else "")
        table.add_row(str(rank_no) if c.status == "ok" else "-", *(str(c.defines.get(n)) for n in tuned),
                      _fmt_num(ms, ".4f"), rate, speed, _fmt_num(c.threads, "d") if c.threads else "-",
                      _fmt_num(c.smem_bytes, "d") if c.smem_bytes is not None else "-", status)
    return table
