"""benchmarks/bench_shapes.py on the CPU: the grid covers what issue 17 asks for, and the summary math."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_shapes as B  # noqa: E402


def test_full_grid_covers_every_family_config_and_token_count():
    cases = B.grid("full")
    assert {c.family for c in cases} == set(B.FAMILIES)
    lin = [c for c in cases if c.family == "linear"]
    assert {c.size["M"] for c in lin} == set(B.TOKENS)
    # every projection of every config appears (qkv of Qwen2.5-14B: (40 + 2 * 8) * 128 = 7168 outputs)
    assert any(c.size == dict(M=511, K=5120, N=7168) for c in lin)
    assert any(c.size == dict(M=1, K=5120, N=152064) for c in lin)  # lm_head at decode
    assert not any(c.size["N"] == 152064 and c.size["M"] > 4096 for c in lin)
    heads = {c.size["D"] for c in cases if c.family == "attention_prefill"}
    assert heads == {64, 128, 256}
    dec = [c for c in cases if c.family == "attention_decode"]
    assert {c.size["B"] for c in dec} >= {1, 16, 256} and max(c.size["ctx"] for c in dec) == 32768
    assert any(t % 2 for t in B.TOKENS if t > 1)  # non-powers of two are in
    assert len({(c.family, c.sizes) for c in cases}) == len(cases)  # no duplicates


def test_quick_grid_is_a_subset_and_every_case_fits_the_memory_cap():
    full = {(c.family, c.sizes) for c in B.grid("full")}
    quick = B.grid("quick")
    assert quick and {(c.family, c.sizes) for c in quick} <= full
    assert {c.family for c in quick} == set(B.FAMILIES)
    assert all(3 * B.bytes_moved(c) <= B.MAX_BYTES for c in B.grid("full"))


def test_bytes_and_flops():
    c = B.Case("linear", "x", (("M", 2), ("K", 3), ("N", 5)))
    assert B.bytes_moved(c) == 2 * (6 + 15 + 10) and B.flops(c) == 60
    r = B.Case("rms_norm", "x", (("T", 4), ("N", 8)))
    assert B.bytes_moved(r) == 2 * (2 * 32 + 8) and B.flops(r) == 0


def test_summary_geomean_min_and_copy_fraction():
    rows = [dict(family="rms_norm", case="T=1 N=8", ratio=2.0, eager_ratio=1.0, bytes=1 << 20, tilex_ms=1.0),
            dict(family="rms_norm", case="T=2 N=8", ratio=0.5, eager_ratio=4.0, bytes=128 << 20, tilex_ms=0.1),
            dict(family="rms_norm", case="T=3 N=8", error="boom", bytes=1, tilex_ms=None),
            dict(family="linear", case="M=1", ratio=1.0, eager_ratio=1.0, bytes=1 << 30, tilex_ms=1.0)]
    s = {e["family"]: e for e in B.summarize(rows, copy_gbs=4000.0)}
    e = s["rms_norm"]
    assert e["cases"] == 2 and e["errors"] == 1
    assert math.isclose(e["geomean"], 1.0) and e["min"] == 0.5 and e["worst"] == "T=2 N=8"
    assert math.isclose(e["eager_geomean"], 2.0)
    want = (128 << 20) / 1e-4 / 1e9 / 4000.0  # only the >= 64 MB shape counts
    assert math.isclose(e["min_copy_fraction"], want)
    assert "min_copy_fraction" not in s["linear"]  # not a memory-bound family
    lines = B.summary_lines(B.summarize(rows, 4000.0))
    assert lines[0].startswith("family") and any(ln.startswith("rms_norm") and "(1 failed)" in ln for ln in lines)


def test_unknown_family_and_grid_are_errors():
    with pytest.raises(ValueError, match="unknown family 'nope'"):
        B.grid("quick", ["nope"])
    with pytest.raises(ValueError, match="quick or full"):
        B.grid("huge")


def test_list_runs_without_a_gpu():
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_shapes.py"), "--list",
                        "--families", "rms_norm,attention_decode"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1].endswith("cases")
    assert "attention_decode" in p.stdout and "linear " not in p.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_shapes.py"), "--list",
                          "--families", "bogus"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown family 'bogus'" in bad.stderr
