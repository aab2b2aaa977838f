"""The flash kernel's tiling rules (attention_plan.prefill_config, session 20) and the wrapper's use of them.

Measured on the H200 (benchmarks/bench_prefill20.py at 79f46bd): 64 x 32 / 4 warps at D = 128, S <= 128 (B128 S128
Hq32: 0.1691 ms against 128 x 64's 0.1794) and 64 x 64 / 4 warps at D = 64 (B8 S2048 Hq14: 0.1658 against 0.1833);
each rule extends only as far as its measured shape (longer D = 64 sequences keep 128 x 64). CPU: the rules'
boundaries, the launch configuration the wrapper builds from them, and the interpreter's result at those tilings
against float64 NumPy. GPU: tests/test_attention_prefill_tilings_gpu.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from tilex import stdlib
from tilex.stdlib import attention as A
from tilex.stdlib import attention_plan as P


@pytest.mark.parametrize("d,s,want", [
    (128, 1, (64, 64, 4)), (128, 64, (64, 64, 4)), (128, 65, (64, 32, 4)), (128, 128, (64, 32, 4)),
    (128, 129, (128, 64, 8)), (128, 4096, (128, 64, 8)),
    (64, 65, (64, 64, 4)), (64, 2048, (64, 64, 4)), (64, 2049, (128, 64, 8)), (64, 16384, (128, 64, 8)),
    (256, 128, (128, 64, 8)), (256, 4096, (128, 64, 8)), (32, 100, (128, 64, 8)), (16, 1000, (128, 64, 8)),
])
def test_prefill_config_rules(d, s, want):
    c = P.prefill_config(d, s)
    assert (c["BM"], c["BN"], c["WARPS"]) == want


def test_the_default_launch_uses_the_rules():
    """Where flash is the choice, the wrapper launches prefill_config's tiling."""
    for b, hq, hkv, s, d in ((128, 32, 8, 128, 128), (8, 14, 2, 2048, 64), (4, 40, 8, 4096, 128), (2, 8, 2, 100, 64)):
        kind, cfg = A.prefill_launch_config(b, hq, hkv, s, d, True, "bhsd", "bf16", None, 132, "sm_90a")
        assert kind == "flash" and cfg == dict(P.prefill_config(d, s), KERNEL="flash")


def _ref(q, k, v, causal):
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    sc = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1])
    if causal:
        n = q.shape[2]
        sc = np.where(np.tril(np.ones((n, n), bool)), sc, -np.inf)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("b,hq,hkv,s,d", [(1, 2, 1, 100, 128), (1, 2, 2, 65, 128), (1, 4, 2, 130, 64)])
def test_rule_tilings_in_the_interpreter(b, hq, hkv, s, d, causal):
    """The default at the rules' tilings (64 x 32 at D128 S 65-128, 64 x 64 at D64) against float64."""
    rng = np.random.default_rng(s + d)
    q = rng.standard_normal((b, hq, s, d), dtype=np.float32)
    k, v = (rng.standard_normal((b, hkv, s, d), dtype=np.float32) for _ in range(2))
    out = stdlib.attention_prefill(q, k, v, causal=causal)
    ref = _ref(q, k, v, causal)
    assert np.max(np.abs(out - ref)) / np.max(np.abs(ref)) <= 1e-5
