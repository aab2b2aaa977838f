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
@pytest.fixture(autouse=True)
def _fresh_choices():
    """Tests change ENABLED and constants through monkeypatch: the memoized choices must not outlive them."""
    P.reset()
    yield
    P.reset()


MEASURED_FLASH = {  # session 20 (bench_prefill20.py at 79f46bd), the tiling prefill_config gives each
    (128, 32, 8, 128, 128): 0.1691, (16, 28, 4, 1000, 128): 0.3286, (32, 8, 4, 512, 256): 0.1592,
    (4, 40, 8, 4096, 128): 1.4190, (1, 8, 4, 4096, 256): 0.1340, (8, 14, 2, 2048, 64): 0.1658,
    (1, 32, 8, 16384, 128): 4.0491,
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
    assert (short is not None) == (arch == "sm_90a" and layout == "bhsd" and s <= 128 and 64 <= d <= 128)
    if short:
        assert s <= short["BN"] and short["BK"] == 64 and short["PROGRAMS"] == 132
    kind, cfg, cost = P.choose_prefill(sh, 132, arch)
    assert P.ENABLED[kind] and cost["us"] > 0


def test_choice_follows_the_model():
    """Only measured winners are enabled (today: flash, and whole at S <= 64, tests/test_attention_prefill_whole.py);
    the short kernel's fitted cost reproduces its two measurements and loses to flash there, as measured."""
    for sh in (P.Shape(128, 32, 8, 128, 128), P.Shape(1, 32, 8, 65, 64), P.Shape(16, 28, 4, 1000, 128),
               P.Shape(32, 8, 4, 128, 256), P.Shape(4, 8, 4, 128, 128, True, "bhsd", "f16")):
        assert P.choose_prefill(sh)[0] == "flash"
    assert P.choose_prefill(P.Shape(1, 32, 8, 50, 64))[0] == "whole"
    assert P.choose_prefill(P.Shape(128, 32, 8, 128, 128), arch="sm_86")[0] == "flash"
    sh = P.Shape(128, 32, 8, 128, 128)
    short = P.prefill_cost("short", dict(P.short_config(128, 128), PROGRAMS=132), sh)
    assert abs(short["us"] / 1e3 / 0.259 - 1) <= 0.10 and short["us"] >= sh.bytes() / P.BANDWIDTH * 1e6
    sh2 = P.Shape(64, 28, 4, 100, 128)
    assert abs(P.prefill_cost("short", dict(P.short_config(100, 128), PROGRAMS=132), sh2)["us"] / 1e3 / 0.1005 - 1) <= 0.10
    flash = P.prefill_cost("flash", P.prefill_config(128, 128), sh)
    assert flash["us"] < short["us"]
    text = P.explain(sh)
    assert text.count("\n") == 2 and "* flash" in text and text.count("(not enabled)") == 2


def test_an_enabled_kernel_is_chosen_where_cheaper(monkeypatch):
    """The choice is the model's minimum over enabled kernels: enabling the short kernel with a cheaper
    per-tile cost picks it for the shapes it takes, and only those."""
    monkeypatch.setitem(P.ENABLED, "short", True)
    monkeypatch.setattr(P, "SHORT_EXPOSED_US", 1.0)
    P.reset()
    assert P.choose_prefill(P.Shape(128, 32, 8, 128, 128))[0] == "short"
    assert P.choose_prefill(P.Shape(128, 32, 8, 128, 128, True, "bshd"))[0] == "flash"
    assert P.choose_prefill(P.Shape(128, 32, 8, 129, 128))[0] == "flash"


def test_the_wrapper_launches_the_models_choice(monkeypatch):
    from tilex.stdlib import _launch as L

    seen = []
    real = L.run
    monkeypatch.setattr(L, "run", lambda mod, name, *a, **k: (seen.append(name), real(mod, name, *a, **k))[1])
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal(sh, dtype=np.float32).astype(np.float16)
               for sh in ((1, 4, 40, 16), (1, 2, 40, 16), (1, 2, 40, 16)))
    stdlib.attention_prefill(q, k, v)                                      # the model: flash
    t = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # noqa: E731
    stdlib.attention_prefill(t(q), t(k), t(v), layout="bshd")              # token-major: flash
    stdlib.attention_prefill(q, k, v, config=dict(BM=16, BN=16, WARPS=4))  # a config naming no kernel: flash
    monkeypatch.setitem(P.ENABLED, "short", True)
    monkeypatch.setitem(P.ENABLED, "whole", False)  # (preferred where it is a candidate, S <= 64)
    monkeypatch.setattr(P, "SHORT_EXPOSED_US", 0.0)
    P.reset()
    q, k, v = (np.zeros((1, h, 40, 64), np.float16) for h in (4, 2, 2))
    stdlib.attention_prefill(q, k, v)                                      # short, once enabled and cheaper
    assert seen == ["attention_prefill", "attention_prefill", "attention_prefill", "attention_prefill_short"]
