"""The backend's fingerprinted cache, under the cache directory (`$TILEX_CACHE_DIR`, ~/.cache/tilex):

    graphs/<fingerprint>.json    one record per lowered graph: the generated kernels it launched
                                 (name, .tile source, compile-time parameters), its step summary
    kernels/<key>.tlxc           each kernel's translation (the checked IR, CUDA source and launch specs),
                                 keyed by source, options and the compiler's own hash (tilex.translation_cache;
                                 the stdlib's kernels too)
    kernels/cubins/<key>.tlxc    their cubins (NVRTC, through tilex.runtime.cache)
    profiles/<fingerprint>.json  with profile=True: each step's calls and seconds after the first call
    tuning/choices-<hash>.tlxc   the configuration model's choices (GEMM tiles per shape bucket; choices.py)
    reports/<fingerprint>.json   the report's data (report.describe), for `tilex report`

The fingerprint is a sha256 over the graph's canonical text (ops, arguments, constants' shapes,
dtypes and bytes, each value's shape with its symbols and dtype), each input's guarded shape,
stride, dtype and device kind, the tilex version, the record format and the arch ("interp"
without a GPU). A process that finds a graph's record loads its kernels' translations up front, so
its first call translates and compiles nothing: `attach` logs "tilex backend: graph 3f2a.. cached,
14 kernels reused, 0 built" after that call (`Program.cache`: fingerprint, hit, reused, built).
Entries use tilex.runtime.cache's format (checksummed, written atomically); a damaged entry is
rebuilt. A translation is a pickle: the cache directory is trusted like the cubins in it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

FORMAT = 2
log = logging.getLogger("tilex.backend")

# process-wide: (source, defines) -> "built" | "reused", for the kernels this process got through `module`
ORIGIN: dict = {}
STATS = {"translated": 0, "loaded": 0}


# ------------------------------------------------------------------ fingerprints
def canonical_text(gm) -> str:
    """The graph as text that names nothing process-specific: every node as `%i = op target(args)`
    with its value's shape, dtype; get_attr constants with their shape, dtype and a hash of their bytes."""
    import torch
    from torch.fx.node import map_arg

    index = {}
    lines = []
    for i, n in enumerate(gm.graph.nodes):
        index[n] = f"%{i}"
        args = map_arg((n.args, n.kwargs), lambda a: index[a])
        v = n.meta.get("val")
        facts = (f"{tuple(map(str, v.shape))} {v.dtype}" if isinstance(v, torch.Tensor) else
                 type(v).__name__ if v is not None else "")
        if n.op == "get_attr":
            t = _attr(gm, n.target)
            if isinstance(t, torch.Tensor):
                c = t.detach().cpu().contiguous()
                raw = c.reshape(-1).view(torch.uint8)
                facts += f" {tuple(c.shape)} {c.dtype} {hashlib.sha256(raw.numpy().tobytes()).hexdigest()[:16]}"
        target = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
        if n.op == "call_function":
            target = str(n.target)
        lines.append(f"{index[n]} = {n.op} {target}{args!r} : {facts}")
    return "\n".join(lines)


def _attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj


def fingerprint(gm, arch: str) -> str:
    from ..version import __version__
    from .fusion import tensor_meta

    h = hashlib.sha256(f"tilex-backend-graph\0{FORMAT}\0{__version__}\0{arch}\0".encode())
    h.update(canonical_text(gm).encode())
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        m = tensor_meta(n)
        facts = (str(n.meta.get("val")) if m is None else
                 f"{tuple(map(str, m.shape))} {tuple(map(str, m.stride()))} {m.dtype} {m.device.type}")
        h.update(f"\0{facts}".encode())
    return h.hexdigest()


# ------------------------------------------------------------------ directories
def root() -> Path:
    from ..runtime.cache import default_cache_dir

    return default_cache_dir()


def graphs_dir() -> Path:
    return root() / "graphs"


def kernels_dir() -> Path:
    return root() / "kernels"


def profiles_dir() -> Path:
    return root() / "profiles"


def _write_json(path: Path, data: dict) -> None:
    """Atomically; errors ignored (a cache that cannot be written costs a rebuild, never a failure)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def _read_json(path: Path) -> dict | None:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("format") == FORMAT else None


# ------------------------------------------------------------------ graph records
def load(fp: str) -> dict | None:
    """The record of fingerprint `fp`, or None (missing, unreadable or another format: a miss)."""
    return _read_json(graphs_dir() / f"{fp}.json")


def store(fp: str, launched: set, summary: str = "") -> None:
    """Write the record: the (kernel name, source, defines) a graph launched."""
    rec = {"format": FORMAT, "summary": summary,
           "kernels": [{"name": n, "source": s, "defines": dict(d)} for n, s, d in sorted(launched)]}
    _write_json(graphs_dir() / f"{fp}.json", rec)


def store_profile(fp: str, rows: list) -> None:
    """rows: per step {"label", "kind", "calls", "seconds"} of a profiled run (profiles/<fp>.json)."""
    _write_json(profiles_dir() / f"{fp}.json", {"format": FORMAT, "steps": rows})


def load_profile(fp: str) -> dict | None:
    return _read_json(profiles_dir() / f"{fp}.json")


def prewarm(rec: dict, sources: set) -> int:
    """Load (or translate) the record's kernels that this program generates; how many there were."""
    n = 0
    for k in rec.get("kernels", ()):
        if k["source"] in sources:
            from . import kernels

            kernels.module(k["source"], tuple(sorted(k["defines"].items())))
            n += 1
    return n


# ------------------------------------------------------------------ kernel translations
def _arch() -> str:
    try:
        from ..runtime.nvrtc import default_arch

        return default_arch()
    except Exception:  # no GPU: the target only matters when launching
        return "sm_90a"


def module(source: str, defines: tuple):
    """tilex.compile(source, **defines) with its translation cached in kernels/ (tilex.translation_cache)
    and its cubins in kernels/cubins/ (kernels.module calls this once per process per configuration)."""
    from ..api import Module
    from ..pipeline import Options
    from ..translation_cache import kernels_dir as tdir, translate

    t, built = translate(source, "<tilex.backend>", Options(defines=dict(defines), arch=_arch()))
    ORIGIN[(source, tuple(defines))] = "built" if built else "reused"
    STATS["translated" if built else "loaded"] += 1
    return Module(t, _arch(), tdir() / "cubins", defines=dict(defines), specialize=True)


def _cubins() -> int:
    try:
        return sum(1 for _ in (kernels_dir() / "cubins").glob("*.tlxc"))
    except OSError:
        return 0


# ------------------------------------------------------------------ a program's cache life
def attach(prog, fgm, arch: str, chain) -> None:
    """Look the graph up (fingerprint, record, prewarm); after the first call, count what that call
    reused and built, log it, and write the record on a miss. `chain(a, b)` composes callbacks."""
    from . import choices

    import time

    t0 = time.perf_counter()
    fp = fingerprint(fgm, arch)
    t1 = time.perf_counter()
    rec = load(fp)
    n_choices = choices.load()  # the model's earlier choices (tuning/): prewarm and call 1 evaluate none again
    sources = {s.kernel.source for s in prog.steps if s.kind == "generated"} | {
        text for s in prog.steps if s.kind == "library" for _, text in s.match.sources}  # fused GEMMs
    cubins0 = _cubins()
    reused = prewarm(rec, sources) if rec is not None else 0
    # fingerprint_s: hashing the graph (its constants' bytes too); load_s: the record, the stored choices and the
    # record's kernel translations read back (both inside build_stats["lower_s"])
    prog.cache = {"fingerprint": fp, "hit": rec is not None, "reused": reused, "choices_loaded": n_choices,
                  "fingerprint_s": round(t1 - t0, 4), "load_s": round(time.perf_counter() - t1, 4)}

    def after_first_call():
        kinds = [ORIGIN.get((s, d)) for _, s, d in prog.launched]
        new_cubins = max(0, _cubins() - cubins0)
        stats = {"kernels": len(kinds), "reused": kinds.count("reused"), "built": kinds.count("built"),
                 "cubins_built": new_cubins}
        prog.cache.update(stats={**stats})
        log.info("tilex backend: graph %s.. %s, %d kernels reused, %d built%s", fp[:8],
                 "cached" if rec is not None else "not cached", stats["reused"], stats["built"],
                 f" ({new_cubins} cubins compiled)" if new_cubins else "")
        if rec is None or {k["source"] for k in rec.get("kernels", ())} != {s for _, s, _ in prog.launched}:
            store(fp, prog.launched, prog.summary())
        choices.store()
        if getattr(prog, "profile", False):
            store_profile(fp, [{"label": s.label, "kind": s.kind, "calls": s.calls, "seconds": s.seconds}
                               for s in prog.steps])
        try:  # the report's data, for `tilex report` over the cache
            from . import report

            report.save(prog)
        except Exception as e:  # a report must never fail a forward
            log.info("tilex backend: graph %s..: report data not kept (%s)", fp[:8], e)
    prog.after_first_call = chain(prog.after_first_call, after_first_call)
