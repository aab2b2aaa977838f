"""What `tilex tune` found: each candidate's outcome (`Candidate`), the ranked `TuneResult`, its table."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

from .tune_space import bucket

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
