"""The configuration model's choices, kept across processes (the cache's `tuning/` folder).

tilex.stdlib.linear picks a GEMM's kernel and tiles per shape with `tilex.autoconfig.choose(..., tuned=False)`,
which translates every candidate of its search space (the passes, ~20 ms each) and scores it: on the first
forward of a process, ~150 translations for a transformer's handful of GEMM shapes (seconds: issue 19's warm
start). The choice is a pure function of its key (the source's digest, kernel, shape bucket, arch, fixed
defines, launch facts, space) and of the compiler (the model's constants are in its files), so the backend
keeps the choices it saw made in

    tuning/choices-<compiler hash[:16]>.tlxc    {key: Choice} (a pickle, tilex.runtime.cache's checksummed format)

and puts them back into `autoconfig`'s in-process table before a graph's first call: a warm process
evaluates no candidate it evaluated before. A changed compiler file changes the hash (a new file; the old one
is never read). Only model choices are kept (`tuned=False`): a `tilex tune` winner is always looked up afresh.
A damaged or unreadable file is ignored (a `CacheWarning`) and rewritten; errors writing it are ignored.
`TILEX_TRANSLATION_CACHE=0` turns this off with the translation cache.
"""
from __future__ import annotations

import pickle
import warnings
from pathlib import Path

STATS = {"loaded": 0, "stored": 0}  # this process: choices put back from disk, choices written
_LOADED: set = set()  # the keys this process read from (or wrote to) the file


def path() -> Path:
    from ..translation_cache import compiler_hash
    from .cache import root

    return root() / "tuning" / f"choices-{compiler_hash()[:16]}.tlxc"


def _table() -> dict:
    from .. import autoconfig

    return autoconfig._CHOICES


def _keep(key) -> bool:
    # choose's key: (digest, file, kernel, bucket, arch, defines, assume, tuned, space); a tuned lookup is not kept
    return isinstance(key, tuple) and len(key) == 9 and key[7] is False


def _read(p: Path) -> dict:
    from ..runtime.cache import CacheError, CacheWarning, read_entry

    try:
        data = pickle.loads(read_entry(p))
    except FileNotFoundError:
        return {}
    except (OSError, CacheError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError) as e:
        warnings.warn(f"tilex backend: configuration choices {p.name} unreadable ({e}); rebuilt", CacheWarning,
                      stacklevel=3)
        return {}
    return data if isinstance(data, dict) else {}


def load() -> int:
    """Put the stored choices into autoconfig's table (those not there yet); how many."""
    from ..translation_cache import enabled

    if not enabled():
        return 0
    table = _table()
    n = 0
    for key, choice in _read(path()).items():
        _LOADED.add(key)
        if key not in table:
            table[key] = choice
            n += 1
    STATS["loaded"] += n
    return n


def store() -> int:
    """Merge this process's new model choices into the file (read, add, write atomically); how many were new."""
    from ..runtime.cache import write_entry
    from ..translation_cache import enabled

    if not enabled():
        return 0
    new = {k: v for k, v in list(_table().items()) if _keep(k) and k not in _LOADED}  # a snapshot: another
    #                                             thread may add a choice meanwhile
    if not new:
        return 0
    p = path()
    merged = _read(p)
    merged.update(new)
    try:
        write_entry(p, pickle.dumps(merged, protocol=pickle.HIGHEST_PROTOCOL))
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        return 0
    _LOADED.update(merged)
    STATS["stored"] += len(new)
    return len(new)
