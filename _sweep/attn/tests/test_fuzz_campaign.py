"""The bounded CI slice of the fuzz campaign (tests/fuzz_campaign.py): 3,000 seeded inputs.

Every input must be compiled or diagnosed: no crash, no hang, no nvcc failure after a passing
check (a sample is built with nvcc -cubin when nvcc is on PATH) and no interpreter crash (a
sample runs on small random inputs). The long run (>= 10^5 inputs) is recorded in docs/internals.md.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_campaign as F  # noqa: E402


def test_inputs_are_reproducible():
    files = F.corpus()
    assert len(files) >= 60 and any(p.startswith("stdlib_kernels/") for p, _ in files)
    for i in (0, 1, 2, 3, 4, 5, 997):
        assert F.make_input(7, i, files) == F.make_input(7, i, files)
    assert F.make_input(7, 1, files) != F.make_input(8, 1, files)
    assert {F.make_input(0, i, files)[0] for i in range(len(F.KINDS))} == {"mutate", "generate", "soup", "bytes"}


def test_generated_kernels_mostly_check():
    """The grammar-built kernels must reach codegen, not stop at the parser (else they test nothing)."""
    files = F.corpus()
    outcomes = [F.examine(F.make_input(3, i, files)[1], False, False, 0)[0][0]
                for i in range(1, 6 * 40, 6)]  # 40 inputs of kind "generate"
    assert outcomes.count("ok") >= 20, outcomes


def test_the_oracle_flags_a_crash_and_a_badly_formed_diagnostic(monkeypatch):
    import tilex.pipeline

    def boom(*a, **k):
        raise KeyError("boom")

    monkeypatch.setattr(tilex.pipeline, "compile_program", boom)
    assert F.examine("kernel", False, False, 0)[0][0] == "crash"


def test_hang_detection_reads_the_workers_cpu_time():
    pool = F._Pool()
    try:
        assert pool.run((0, "kernel", False, False, 0), 30)[0][0] == "diagnosed"
        if Path("/proc/self/stat").exists():
            assert isinstance(pool._cpu_seconds(), float)
    finally:
        pool.close()


def test_ci_slice():
    res = F.campaign(3000, seed=0, nvcc_every=150, interp_every=25, timeout=60)
    c = res["counts"]
    assert sum(c.get(k, 0) for k in ("ok", "diagnosed", "crash", "hang")) == 3000
    failures = {k: res["examples"].get(k) for k in F.FAILURES if c.get(k)}
    assert not failures, failures
    assert c.get("ok", 0) > 500 and c.get("diagnosed", 0) > 1000  # both sides of the oracle are exercised
    assert c.get("interp-ok", 0) > 10
    if c.get("nvcc-skipped") is None:
        assert c.get("nvcc-ok", 0) >= 5
