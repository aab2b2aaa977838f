"""The graph cache: lowered graphs keyed by a fingerprint, under `<cache dir>/graphs/`.

The fingerprint covers the ATen graph's code, each placeholder's shape, stride and dtype (the
guarded facts), the tilex version, the backend's record format and the target arch. A record
(`graphs/<fingerprint>.json`) lists the generated kernels a graph launched with their compile-time
parameters; kernel binaries stay in the cubin cache beside it (`tilex.runtime.cache`, keyed by
source), so a process that finds a record translates those kernels up front and NVRTC reuses every
binary. `Program.cache` says hit or miss and how many kernels the record named (the report shows it).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

FORMAT = 1


def fingerprint(gm, arch: str) -> str:
    from ..version import __version__
    from .fusion import tensor_meta

    h = hashlib.sha256(f"tilex-backend-graph\0{FORMAT}\0{__version__}\0{arch}\0".encode())
    h.update(gm.code.encode())
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        m = tensor_meta(n)
        facts = (str(n.meta.get("val")) if m is None else
                 f"{tuple(map(str, m.shape))} {tuple(map(str, m.stride()))} {m.dtype} {m.device.type}")
        h.update(f"{n.name}: {facts}\0".encode())
    return h.hexdigest()


def graphs_dir() -> Path:
    from ..runtime.cache import default_cache_dir

    return default_cache_dir() / "graphs"


def load(fp: str) -> dict | None:
    """The record of fingerprint `fp`, or None (missing or unreadable: a miss)."""
    try:
        rec = json.loads((graphs_dir() / f"{fp}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if rec.get("format") == FORMAT else None


def store(fp: str, launched: set) -> None:
    """Write the record: the (kernel name, source, defines) a graph launched. Errors are ignored
    (a cache that cannot be written costs a rebuild, never a failure)."""
    rec = {"format": FORMAT, "kernels": [{"name": n, "source": s, "defines": dict(d)} for n, s, d in sorted(launched)]}
    d = graphs_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{fp}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(rec, indent=1), encoding="utf-8")
        os.replace(tmp, d / f"{fp}.json")
    except OSError:
        pass


def prewarm(rec: dict, sources: set) -> int:
    """Translate the record's kernels that this program generates; how many there were."""
    from . import kernels

    n = 0
    for k in rec.get("kernels", ()):
        if k["source"] in sources:
            kernels.module(k["source"], tuple(sorted(k["defines"].items())))
            n += 1
    return n
