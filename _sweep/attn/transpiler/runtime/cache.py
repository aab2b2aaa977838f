"""On-disk cache of compiled artifacts (cubins), safe across processes.

Each entry is one file named by a sha256 key over its inputs. The file holds a header
(magic bytes, format version, sha256 of the payload, payload length) and the payload.
Entries are written to a temporary file in the cache directory and moved into place
with `os.replace`, so readers never see half a file and two processes that build the
same entry at once both succeed (the last rename wins; both wrote the same bytes).

A corrupt or stale entry is reported with a `CacheWarning`, removed and rebuilt. A cache
directory that cannot be created or written is reported the same way and compilation
carries on without caching. The environment is read only in `default_cache_dir()`.
"""
from __future__ import annotations

import functools
import hashlib
import os
import struct
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Iterable

from ..diagnostics import CacheError

MAGIC = b"TILEXBIN"
FORMAT_VERSION = 1
# magic, format version, sha256(payload), payload length
_HEADER = struct.Struct("<8sI32sQ")
SUFFIX = ".tlxc"


class CacheWarning(UserWarning):
    """A cache entry or directory that could not be used; tilex carried on without it."""


def default_cache_dir() -> Path:
    """The cache directory: `$TILEX_CACHE_DIR` if set and non-empty, else ~/.cache/tilex."""
    return _cache_dir_for(os.environ.get("TILEX_CACHE_DIR"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=16)
def _cache_dir_for(env: str | None, home: str | None) -> Path:
    """default_cache_dir() for these values of $TILEX_CACHE_DIR and $HOME (`~` is $HOME)."""
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "tilex"


def cache_key(key_parts: Iterable[str | bytes]) -> str:
    """Hex sha256 over the parts; each part is type-tagged and length-prefixed, so
    ("ab", "c") and ("a", "bc") give different keys."""
    h = hashlib.sha256(b"tilex-cache-key\0")
    for part in key_parts:
        if isinstance(part, str):
            tag, data = b"s", part.encode("utf-8")
        elif isinstance(part, (bytes, bytearray)):
            tag, data = b"b", bytes(part)
        else:
            raise TypeError(f"cache key parts must be str or bytes, got {type(part).__name__}")
        h.update(tag + struct.pack("<Q", len(data)) + data)
    return h.hexdigest()


def entry_path(cache_dir: str | os.PathLike, key: str) -> Path:
    """Where the entry for `key` lives inside `cache_dir`."""
    return Path(cache_dir) / (key + SUFFIX)


def encode_entry(payload: bytes) -> bytes:
    """Header + payload, as stored on disk."""
    return _HEADER.pack(MAGIC, FORMAT_VERSION, hashlib.sha256(payload).digest(), len(payload)) + payload


def decode_entry(data: bytes) -> bytes:
    """The payload of an entry's bytes; CacheError if the entry is damaged or stale."""
    if len(data) < _HEADER.size:
        raise CacheError(f"truncated header ({len(data)} bytes, need {_HEADER.size})")
    magic, version, digest, length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CacheError(f"bad magic bytes {magic!r}")
    if version != FORMAT_VERSION:
        raise CacheError(f"format version {version}, expected {FORMAT_VERSION}")
    payload = data[_HEADER.size:]
    if len(payload) != length:
        raise CacheError(f"payload is {len(payload)} bytes, header says {length} (truncated?)")
    if hashlib.sha256(payload).digest() != digest:
        raise CacheError("payload sha256 does not match the header")
    return payload


def read_entry(path: str | os.PathLike) -> bytes:
    """Read and verify one entry; FileNotFoundError if absent, CacheError if damaged."""
    with open(path, "rb") as f:
        data = f.read()
    return decode_entry(data)


def write_entry(path: str | os.PathLike, payload: bytes) -> None:
    """Write an entry atomically: temporary file in the same directory, then os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-" + path.name[:16], suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(encode_entry(payload))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _warn(message: str) -> None:
    warnings.warn(message, CacheWarning, stacklevel=3)


def get_or_build(key_parts: tuple[str | bytes, ...], build: Callable[[], bytes],
                 cache_dir: str | os.PathLike | None,
                 validate: Callable[[bytes], str | None] | None = None) -> bytes:
    """The cached payload for `key_parts`, or `build()`'s result, stored for next time.

    `cache_dir=None` disables caching. Damaged entries are removed and rebuilt; an
    unusable cache directory only costs the caching, never the build. `validate(payload)`
    says why an intact entry's payload is unusable (e.g. not a cubin), or None: such an
    entry is treated as damaged.
    """
    if cache_dir is None:
        return _checked_build(build)
    path = entry_path(cache_dir, cache_key(key_parts))
    try:
        payload = read_entry(path)
        why = validate(payload) if validate is not None else None
        if why is None:
            return payload
        raise CacheError(why)
    except (FileNotFoundError, NotADirectoryError):  # a miss; write_entry reports bad dirs
        pass
    except CacheError as e:
        _warn(f"tilex cache: corrupt entry {path} ({e}); removing it and rebuilding")
        try:
            os.unlink(path)
        except OSError:
            pass
    except OSError as e:
        _warn(f"tilex cache: cannot read {path} ({e}); rebuilding without the cache")
    payload = _checked_build(build)
    try:
        write_entry(path, payload)
    except OSError as e:
        _warn(f"tilex cache: cannot write to cache directory {Path(cache_dir)} ({e}); "
              "continuing without caching (set TILEX_CACHE_DIR to a writable directory)")
    return payload


def _checked_build(build: Callable[[], bytes]) -> bytes:
    payload = build()
    if not isinstance(payload, (bytes, bytearray)):
        raise TypeError(f"cache build function returned {type(payload).__name__}, expected bytes")
    return bytes(payload)
