"""Whose is a CUDA kernel a profiler saw: tilex's generated, tilex's library, a copy, or torch's.

Issue 19 asks that every CUDA kernel of a compiled forward be tilex's and for the share of time in generated
vs library kernels; torch.profiler gives kernel names only. A tilex kernel is an `extern "C" __global__`
function under its `.tile` name (cuda_names.py), so the names classify exactly:

  generated  `fused_<10 hex digits>` (tilegen.py: named after its text) and cachegen.py's templates
             (`cache_write`, `masked_attention`, `copy_into`)
  library    a kernel declared in stdlib_kernels/*.tile (a specialized variant may add a suffix)
  copy       the driver's memcpy / memset activities (not kernels of anyone)
  torch      anything else (an eager fallback's kernel, cuBLAS, a torch fill)
"""
from __future__ import annotations

import functools
import re

GENERATED = re.compile(r"fused_[0-9a-f]{10}\b")
CACHEGEN = ("cache_write", "masked_attention", "copy_into", "attention_mask_table", "attention_q_rows")
KINDS = ("generated", "library", "copy", "torch")


@functools.lru_cache(maxsize=1)
def library_names() -> tuple:
    """Every kernel declared in the library's .tile files, longest first (so a prefix test finds the right one)."""
    from ..stdlib import _kernels

    names = set()
    for f in _kernels._kernel_dir().glob("*.tile"):
        names.update(re.findall(r"^\s*kernel\s+([A-Za-z_]\w*)", f.read_text(encoding="utf-8"), re.M))
    return tuple(sorted(names, key=lambda n: (-len(n), n)))


def kind(name: str) -> str:
    """The kind of the CUDA activity `name` (a profiler's kernel or memcpy name)."""
    base = re.sub(r"^void\s+", "", name.strip())
    if GENERATED.match(base) or base.split("(")[0] in CACHEGEN:
        return "generated"
    low = base.lower()
    if low.startswith(("memcpy", "memset")) or "memcpy" in low.split("(")[0]:
        return "copy"
    ident = re.match(r"[A-Za-z_]\w*", base)
    if ident is not None and any(ident.group(0) == n or ident.group(0).startswith(n + "_")
                                 for n in library_names()):
        return "library"
    return "torch"


def shares(table: dict) -> dict:
    """{kind: (microseconds, share of the total)} of a {kernel name: microseconds} table."""
    total = sum(table.values()) or 1.0
    out = {k: 0.0 for k in KINDS}
    for name, us in table.items():
        out[kind(name)] += us
    return {k: (round(v, 1), round(v / total, 4)) for k, v in out.items()}


def foreign(names) -> list:
    """The names among `names` that are torch's kernels (not tilex's, not a copy)."""
    return sorted(n for n in names if kind(n) == "torch")


def profile_kernels(fn, calls: int = 3) -> dict:
    """{CUDA activity name: (launches per call, microseconds per call)} of `calls` calls of `fn` under
    torch.profiler (after one call outside it, so nothing compiles inside); synchronizes."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    table: dict = {}
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        c, t = table.get(ev.name, (0, 0.0))
        table[ev.name] = (c + 1, t + ev.device_time_total)
    return {k: (c / calls, t / calls) for k, (c, t) in table.items()}


def summary(table: dict, top: int = 12) -> dict:
    """A profile_kernels table as JSON-ready facts: kernel time and launches per call, the share per kind,
    the torch kernels seen, the `top` kernels by time (name cut at its first '(' or '<')."""
    us = {k: t for k, (_, t) in table.items()}
    rows = sorted(table.items(), key=lambda kv: -kv[1][1])[:top]
    return {"kernel_us": round(sum(us.values()), 1), "launches": round(sum(c for c, _ in table.values()), 1),
            "share": {k: v[1] for k, v in shares(us).items()}, "torch_kernels": foreign(table),
            "top": [(re.split(r"[(<]", k)[0][:60], round(c, 1), round(t, 1)) for k, (c, t) in rows]}
