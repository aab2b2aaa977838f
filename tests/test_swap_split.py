"""stdlib/swap_split.py: the K split of swapped decode GEMMs against the H200 sweep it was fitted to
(tests/data/sweep_decode_h200.json, session 25): at each swept shape the model's S, timed at its best tile, is
within 5% of the best swapped candidate measured, and never slower than not splitting."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tilex.stdlib import swap_split
from tilex.stdlib.linear import _swap_config

DATA = json.loads((Path(__file__).parent / "data" / "sweep_decode_h200.json").read_text())
SWAP_ROWS = [r for r in DATA["rows"] if r["shape"][0] <= 16 and -(-r["shape"][2] // 64) <= 132]


@pytest.mark.parametrize("row", SWAP_ROWS, ids=lambda r: "x".join(map(str, r["shape"])))
def test_the_split_the_model_picks_is_within_5_percent_of_the_best_measured(row):
    m, k, n = row["shape"]
    s = swap_split.shares(n, k, _swap_config(n)["BN"], 132)
    by_s: dict[int, float] = {}
    for c in row["results"]:
        by_s[c["S"]] = min(by_s.get(c["S"], float("inf")), c["ms"])
    best = min(by_s.values())
    assert s in by_s, f"S={s} was not measured at {row['shape']}: {sorted(by_s)}"
    assert by_s[s] <= 1.05 * best, f"S={s}: {by_s[s]:.4f} ms, best {best:.4f} ms ({by_s})"
    assert by_s[s] <= by_s[1] * 1.02


def test_a_long_row_of_tiles_is_not_split():
    # the lm_head (152064 rows) and a gate/up sized GEMV fill the SMs: one pass, no partial sums
    assert swap_split.shares(152064, 3584, 128, 132) == 1
    assert swap_split.shares(18944, 3584, 128, 132) == 1


def test_every_share_keeps_enough_of_k():
    for n, k in ((64, 896), (128, 1024), (512, 3584)):
        s = swap_split.shares(n, k, 64, 132)
        assert s == 1 or k // s >= swap_split.MIN_SHARE_K


@pytest.mark.parametrize("bias", [False, True])
def test_linear_takes_the_split_path_and_matches_numpy_in_the_interpreter(bias, monkeypatch):
    """The wrapper at a k/v-projection shape (M=1, K=3584, N=512: S = 8 asked, 7 shares of 512 columns hold K), the
    decode paths let through for NumPy arrays (the GPU-only gate of _use_swap opened), so the interpreter runs the
    kernels the GPU would: linear_swap_splitk into 7 partials, then splitk_sum(_bias); against float64 NumPy."""
    import numpy as np

    import tilex.stdlib as S
    from tilex.stdlib import _launch as L
    import importlib

    lin = importlib.import_module("tilex.stdlib.linear")

    monkeypatch.setattr(lin, "_use_swap", lambda m, k, gpu: 0 < m <= lin._SWAP_ROWS and k % 8 == 0)
    ran, real = [], L.run
    monkeypatch.setattr(L, "run", lambda mod, name, *a, **kw: (ran.append((name, tuple(a[-1].shape))),
                                                               real(mod, name, *a, **kw))[1])
    rng = np.random.default_rng(41)
    x = rng.standard_normal((1, 3584)).astype(np.float32)
    w = (rng.standard_normal((512, 3584)) / 60).astype(np.float32)
    b = rng.standard_normal(512).astype(np.float32) if bias else None
    y = S.linear(x, w, b)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + (0 if b is None else b)
    assert [n for n, _ in ran] == ["linear_swap_splitk", "splitk_sum_bias" if bias else "splitk_sum"]
    assert ran[0][1] == (7, 1, 512)
    assert np.abs(y - ref).max() / np.abs(ref).max() < 1e-5
