"""tilex.stdlib.linear's stream-K path on the CPU: the wrapper's launch of linear_streamk run in the interpreter
(NumPy arrays taken for GPU ones), the prediction that weighs it, and the tile-counter buffers (torch CPU)."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
lin = importlib.import_module("tilex.stdlib.linear")


@pytest.fixture(autouse=True)
def _streamk_on(monkeypatch):
    monkeypatch.setattr(lin, "_STREAMK", True)


def _interp_run(monkeypatch, programs: int, tiles: dict):
    """linear() on NumPy arrays takes its GPU path (kind_of says torch; path_choice says streamk with `tiles`), each
    launch runs in the interpreter, and the tile counters are one NumPy buffer (returned)."""
    L = lin.L
    ran = []
    counters = np.zeros(4096, np.int32)

    def run(mod, name, *args, **kw):
        ran.append((name, mod, args))
        mod.interp(name, *args, **kw)

    monkeypatch.setattr(L, "run", run)
    monkeypatch.setattr(L, "kind_of", lambda *a: "torch")
    monkeypatch.setattr(L, "sm_count", lambda x: programs)
    monkeypatch.setattr(lin, "path_choice", lambda *a: ("streamk", dict(tiles), 1, {}))
    monkeypatch.setattr(lin, "_counters", lambda like, n: counters)
    return ran, counters


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("m,k,n,programs", [(50, 72, 40, 3), (33, 40, 16, 7), (100, 200, 24, 4)])
def test_wrapper_runs_linear_streamk(monkeypatch, m, k, n, programs, bias):
    tiles = dict(BM=16, BN=16, BK=16, STAGES=2)
    ran, counters = _interp_run(monkeypatch, programs, tiles)
    rng = np.random.default_rng(m + n + k)
    x, w, b = (rng.standard_normal(t).astype(np.float32) for t in ((m, k), (n, k), (n,)))
    ref = x.astype(np.float64) @ w.astype(np.float64).T + (b.astype(np.float64) if bias else 0)
    for _ in range(2):  # the same counters twice: zeros again after each launch
        y = lin.linear(x, w, b if bias else None)
        assert float(np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max()) <= 1e-5
        assert not counters.any()
    (name, mod, args), _ = ran
    assert name == "linear_streamk"
    part, count = args[3], args[4]
    assert part.shape == (2 * programs, 16, 16) and part.dtype == np.float32 and count is counters
    assert mod.defines.get("PROGRAMS") == programs and bool(mod.defines.get("BIAS", False)) == bias


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("m,k,n,s", [(50, 72, 40, 3), (33, 40, 16, 4)])
def test_wrapper_runs_linear_splitk_last(monkeypatch, m, k, n, s, bias):
    """With _SPLIT_LAST, the split-K path is one launch of linear_splitk_last (S shares, the counters)."""
    tiles = dict(BM=16, BN=16, BK=16, STAGES=2)
    ran, counters = _interp_run(monkeypatch, 5, tiles)
    monkeypatch.setattr(lin, "path_choice", lambda *a: ("splitk", dict(tiles), s, {}))
    monkeypatch.setattr(lin, "_SPLIT_LAST", True)
    rng = np.random.default_rng(m + n + k + s)
    x, w, b = (rng.standard_normal(t).astype(np.float32) for t in ((m, k), (n, k), (n,)))
    ref = x.astype(np.float64) @ w.astype(np.float64).T + (b.astype(np.float64) if bias else 0)
    for _ in range(2):
        y = lin.linear(x, w, b if bias else None)
        assert float(np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max()) <= 1e-5
        assert not counters.any()
    (name, mod, args), _ = ran
    assert name == "linear_splitk_last" and args[3].shape == (s, m, n) and args[4] is counters
    assert bool(mod.defines.get("BIAS", False)) == bias


def test_streamk_prediction_counts_a_fraction_of_a_round():
    """864 tiles of 128x128 (M=256 N=55296) on 132 SMs: 6.55 rounds of the persistent kernel's 7, plus the fixup;
    a shape whose tiles fill whole rounds pays no fixup; few tiles over a long K: the operands' bytes bound it."""
    per = dict(BM=128, BN=128)
    t = lin._streamk_us(256, 55296, 5120, per, 700.0)
    assert t == pytest.approx(700.0 / 7 * 864 / 132 + lin.STREAMK_FIXUP_US)
    assert lin._streamk_us(128, 132 * 128, 4096, per, 100.0) == pytest.approx(100.0)  # 132 tiles: one round
    # from a 128x256 prediction: the same time per 128 columns of a round (80 tiles of 128x256 -> 160 of 128x128)
    assert lin._streamk_us(511, 5120, 13824, dict(BM=128, BN=256), 140.0) == pytest.approx(
        140.0 / 2 * 160 / 132 + lin.STREAMK_FIXUP_US)
    m, k, n = 100, 14336, 3584  # 28 tiles: the weights' 102.8 MB at STREAMK_GBS
    assert lin._streamk_us(m, n, k, per, 75.0) == pytest.approx(
        2 * (m * k + n * k + m * n) / (lin.STREAMK_GBS * 1e3) + lin.STREAMK_FIXUP_US)


def test_counters_are_zeros_per_device_and_grow(monkeypatch):
    """One zeroed buffer per device, at least as long as asked; a longer ask replaces it and keeps the old one alive
    (a CUDA graph captured with it still points at it)."""
    monkeypatch.setattr(lin, "_COUNTERS", {})
    monkeypatch.setattr(lin, "_OLD_COUNTERS", [])
    monkeypatch.setattr(lin.L, "kind_of", lambda *a: "torch")  # a CPU tensor standing in for a CUDA one
    x = torch.zeros(2, 2)
    a = lin._counters(x, 10)
    assert a.dtype == torch.int32 and a.shape[0] >= 10 and not a.any()
    assert lin._counters(x, 100) is a
    b = lin._counters(x, a.shape[0] + 1)
    assert b.shape[0] > a.shape[0] and not b.any() and lin._OLD_COUNTERS == [a]
    assert lin._counters(x, 5) is b


@pytest.fixture
def fp(monkeypatch, tmp_cache_dir):
    """The fast path's CPU stand-ins (tests/fastpath_stand_ins.py: a stand-in torch and driver), as test_fastpath.py."""
    import fastpath_stand_ins as SI

    ns = SI.install(monkeypatch)
    ns.mode = "python"  # a call with kept counters replays in Python (the C side refuses such an entry)
    monkeypatch.setattr(lin.L, "CFAST", False)
    monkeypatch.setattr(lin.L, "FASTPATH", True)
    monkeypatch.setattr(lin.L, "POISON", False)
    lin.L.clear_fastpath()
    yield ns
    lin.L.clear_fastpath()
    lin.L._torch_dtypes.cache_clear()


@pytest.mark.parametrize("bias", [False, True])
def test_fast_path_replays_the_streamk_launch(fp, monkeypatch, bias):
    """A stream-K call is memoized (its tile counters are `L.kept`: the replay passes the same buffer) and the replay
    launches exactly what the full wrapper launches."""
    from test_fastpath import compare

    monkeypatch.setattr(lin, "_COUNTERS", {})
    monkeypatch.setattr(lin, "path_choice", lambda *a: ("streamk", dict(BM=128, BN=128, BK=64, STAGES=4), 1, {}))

    def make():
        args = (fp.tensor((300, 128)), fp.tensor((256, 128)))
        return args + (fp.tensor((256,)),) if bias else args

    fast = compare(fp, lin.linear, make)  # asserts the second call was a fast-path hit
    assert "linear_streamk" in str(fast[1]) and len(fast[1]) == 1


@pytest.mark.parametrize("m,k,n,deep", [(256, 5120, 55296, True), (256, 5120, 5120, True), (100, 896, 9728, False),
                                        (4096, 2048, 2560, False), (511, 2048, 2560, False)])
def test_two_rows_of_tiles_take_six_stages(monkeypatch, m, k, n, deep):
    """128 < M <= 256: the persistent path's 128x128 tiles with DEEP_STAGES (H200: 0.83-0.85 -> 0.88-0.89x cuBLAS at
    M=256 in two sessions); one row of tiles or many keep the model's 4, as does everything with _DEEP_ROWS off."""
    monkeypatch.setattr(lin, "_STREAMK", False)
    on = lin.path_choice("linear", "bf16", m, n, k)
    monkeypatch.setattr(lin, "_DEEP_ROWS", False)
    off = lin.path_choice("linear", "bf16", m, n, k)
    if deep:
        assert on[0] == off[0] == "persistent" and on[1] == dict(off[1], STAGES=lin.DEEP_STAGES)
        assert off[1] == dict(BM=128, BN=128, BK=64, STAGES=4)
    else:
        assert on[:3] == off[:3]
