"""Translations (`tilex.translate`'s result: checked IR, CUDA source, launch specs) cached on disk.

A process that loads a kernel another process already translated unpickles it (a millisecond)
instead of parsing and running the passes again (0.1-1 s a kernel): the warm start of the
torch.compile backend and of the stdlib. Entries live in `<cache dir>/kernels/` in
tilex.runtime.cache's checksummed format, keyed by the source text, its file name, the options
(defines, arch, kernel, assumed facts), the names and texts of the files it imports (tilex.imports) and a
hash of the compiler itself (every .py, .lark, .j2
and .cuh file of the installed tilex), so a changed compiler never reuses an old translation.
`TILEX_TRANSLATION_CACHE=0` turns it off. The cache directory is trusted like the cubins in it
(an entry is a pickle).
"""
from __future__ import annotations

import functools
import hashlib
import os
import pickle
from pathlib import Path

STATS = {"translated": 0, "loaded": 0}   # this process: translations built / loaded from the cache


@functools.lru_cache(maxsize=1)
def compiler_hash() -> str:
    """sha256 over the relative path and bytes of the compiler's own files (tilex, its grammar, templates)."""
    import importlib

    h = hashlib.sha256(b"tilex-compiler\0")
    for pkg in ("tilex", "tilex.grammar", "tilex.templates"):
        for base in map(Path, importlib.import_module(pkg).__path__):
            for f in sorted(base.rglob("*")):
                if f.suffix in (".py", ".lark", ".j2", ".cuh") and "__pycache__" not in f.parts:
                    h.update(f"{pkg}/{f.relative_to(base).as_posix()}\0".encode())
                    h.update(f.read_bytes())
    return h.hexdigest()


def kernels_dir() -> Path:
    from .runtime.cache import default_cache_dir

    return default_cache_dir() / "kernels"


def enabled() -> bool:
    return os.environ.get("TILEX_TRANSLATION_CACHE", "1") not in ("0", "", "false", "no")


def translate(source: str, file: str, options) -> tuple:
    """(tilex.translate.translate(source, file, options), whether it was built here rather than loaded)."""
    from .translate import translate as do_translate

    if not enabled():
        STATS["translated"] += 1
        return do_translate(source, file, options), True
    from .imports import import_digest
    from .runtime.cache import get_or_build

    built = []

    def build() -> bytes:
        t = do_translate(source, file, options)
        built.append(t)
        try:
            return pickle.dumps(t, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise _NotPicklable from e

    key = ("translation", source, file, options.key(), compiler_hash(), import_digest(source, file))
    try:
        t = pickle.loads(get_or_build(key, build, kernels_dir()))
    except _NotPicklable:
        t = built[-1]  # used, not cached
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        t = built[-1] if built else do_translate(source, file, options)  # unreadable: afresh, not cached
        built.append(t)
    STATS["translated" if built else "loaded"] += 1
    return t, bool(built)


class _NotPicklable(Exception):
    pass
