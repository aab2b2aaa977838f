"""attention_plan: the prefill cost model and the kernel choice it makes (CPU only).

The model's constants are fitted to H200 measurements of the flash kernel; these tests pin that the fit still
reproduces them (within 15%), that every candidate can take its shape, and that the wrapper launches what the
model chose.
"""
from __future__ import annotations

import numpy as np
import pytest

from tilex import stdlib
from tilex.stdlib import attention_plan as P

# (B, Hq, Hkv, S, D) -> ms measured on the H200 with the flash kernel's default tiling (CUDA-graph medians,
# benchmarks/RESULTS.md session 16 and bench_shapes at dc00841)
MEASURED_FLASH = {
    (128, 32, 8, 128, 128): 0.205, (4, 12, 2, 4096, 128): 0.424, (16, 28, 4, 1000, 128): 0.357,
    (2, 64, 8, 8192, 128): 4.234, (32, 8, 4, 512, 256): 0.182, (1, 8, 4, 4096, 256): 0.143,
    (8, 14, 2, 2048, 64): 0.188, (4, 40, 8, 4096, 128): 1.473,
}


@pytest.mark.parametrize("shape,ms", MEASURED_FLASH.items(), ids=lambda v: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*v)
                         if isinstance(v, tuple) else str(v))
def test_flash_model_reproduces_measurements(shape, ms):
    sh = P.Shape(*shape)
    cost = P.prefill_cost("flash", P.prefill_config(sh.d, sh.s), sh)
    assert abs(cost["us"] / 1e3 / ms - 1) <= 0.15, (cost, ms)


def test_resident_blocks():
    assert P.resident(99344, 127, 256) == 2          # flash BM=128 D=128 (ptxas: 127 registers)
    assert P.resident(50192, 123, 128) == 4          # flash BM=64 BN=32 D=128
    assert P.resident(196608, 239, 256) == 1         # flash D=256
    assert P.resident(300000, 32, 32) == 1           # never 0


@pytest.mark.parametrize("s", [1, 63, 64, 65, 128, 129, 1000])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_86"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_candidates_take_their_shape(s, layout, arch, d):
    sh = P.Shape(2, 8, 2, s, d, True, layout)
    kinds = {k: c for k, c in P.candidates(sh, 132, arch)}
    assert "flash" in kinds
    short = kinds.get("short")
    assert (short is not None) == (arch == "sm_90a" and layout == "bhsd" and s <= 128 and d <= 128)
    if short:
        assert s <= short["BN"] and short["BK"] <= d and short["PROGRAMS"] == 132
    kind, cfg, cost = P.choose_prefill(sh, 132, arch)
    assert P.ENABLED[kind] and cost["us"] > 0


def test_choice_follows_the_model():
    """Short head-major sequences on sm_90a go to the persistent kernel (predicted ~2x: the flash programs'
    fixed chain dominates at 1-2 key blocks); long ones, token-major ones and other targets stay on flash."""
    assert P.choose_prefill(P.Shape(128, 32, 8, 128, 128))[0] == "short"
    assert P.choose_prefill(P.Shape(1, 32, 8, 50, 64))[0] == "short"
    assert P.choose_prefill(P.Shape(128, 32, 8, 128, 128, True, "bshd"))[0] == "flash"
    assert P.choose_prefill(P.Shape(128, 32, 8, 128, 128), arch="sm_86")[0] == "flash"
    assert P.choose_prefill(P.Shape(16, 28, 4, 1000, 128))[0] == "flash"
    assert P.choose_prefill(P.Shape(32, 8, 4, 128, 256))[0] == "flash"
    assert P.choose_prefill(P.Shape(4, 8, 4, 128, 128, True, "bhsd", "f16"))[0] == "short"
    assert P.choose_prefill(P.Shape(4, 8, 4, 128, 128, True, "bhsd", "f32"))[0] == "flash"   # no f32 wgmma
    sh = P.Shape(128, 32, 8, 128, 128)
    short = P.prefill_cost("short", dict(P.short_config(128, 128), PROGRAMS=132), sh)
    assert short["us"] >= sh.bytes() / P.BANDWIDTH * 1e6
    text = P.explain(sh)
    assert text.count("\n") == 2 and "* short" in text and "(not enabled)" in text


def test_the_wrapper_launches_the_models_choice(monkeypatch):
    from tilex.stdlib import _launch as L

    seen = []
    real = L.run
    monkeypatch.setattr(L, "run", lambda mod, name, *a, **k: (seen.append(name), real(mod, name, *a, **k))[1])
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal(sh, dtype=np.float32).astype(np.float16)
               for sh in ((1, 4, 40, 16), (1, 2, 40, 16), (1, 2, 40, 16)))
    stdlib.attention_prefill(q, k, v)                                      # S <= 128, head-major: short
    t = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # noqa: E731
    stdlib.attention_prefill(t(q), t(k), t(v), layout="bshd")              # token-major: flash
    stdlib.attention_prefill(q, k, v, config=dict(BM=16, BN=16, WARPS=4))  # a config naming no kernel: flash
    assert seen == ["attention_prefill_short", "attention_prefill", "attention_prefill"]
