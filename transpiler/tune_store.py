"""The store of tuned configurations (`$TILEX_CACHE_DIR/tuned.json`, `TuneStore`) and its cheap reader `best()`."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Mapping

from .runtime.cache import default_cache_dir
from .source import is_source_text, read_source
from .tune_space import bucket_text

STORE_NAME = "tuned.json"
STORE_FORMAT = "tilex-tuned-configs"
STORE_VERSION = 1


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


def tuned_kernel(kernel: str, dtypes: Mapping[str, str] | None = None) -> str:
    """A kernel's name in the store: with the dtype parameters it was tuned at where they are not the defaults
    (`linear<T=f16>`; `dtype_binding.changed_dtypes`), so that each dtype of one source has its own entries."""
    return kernel if not dtypes else f"{kernel}<{', '.join(f'{k}={v}' for k, v in sorted(dtypes.items()))}>"


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
         cache_dir: str | os.PathLike | None = None, dtypes: Mapping[str, str] | None = None) -> dict | None:
    """The stored best compile-time parameters for `kernel` of this source at the bucket of
    `shapes` (every symbol of the kernel) on `arch`, or None when it was not tuned. `dtypes`: the dtype
    parameters the kernel is compiled with where they differ from their defaults (`tuned_kernel`).

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
    kernel = tuned_kernel(kernel, dtypes)
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
