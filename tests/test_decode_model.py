"""attention_decode's launch model (transpiler/stdlib/decode_model.py): its fit, its resources, its choices.

CPU: the model against the H200 measurements it was fitted to (within 10%), residency from shared memory and
registers, the register table against ptxas (nvcc tier), and properties of the plans over the grid's decode
family (bench_shapes.py): every plan builds, stays within MAX_SPLITS, avoids the combine where one wave of
unsplit programs is as fast, splits long contexts at small batches.
"""
from __future__ import annotations

import itertools
import re
import shutil
import subprocess

import pytest

import tilex.stdlib  # noqa: F401 - loads the attention module
from tilex.stdlib import attention as A
from tilex.stdlib import decode_model as DM

BF = dict(BN=64, WARPS=4, STAGES=2)
S1 = dict(BN=64, WARPS=4, STAGES=1)
WIDE = dict(BN=128, WARPS=8, STAGES=2)

# (b, hq, hkv, d, ctx, tile, splits, measured ms): H200 CUDA-graph medians the constants were fitted to
FITTED = [
    (16, 12, 2, 128, 32768, BF, 8, 0.1417),
    (16, 40, 8, 128, 4096, BF, 2, 0.0747),
    (16, 40, 8, 128, 1024, BF, 2, 0.0250),
    (256, 64, 8, 128, 128, BF, 1, 0.0550),
    (256, 64, 8, 128, 128, S1, 1, 0.0491),
    (1, 32, 8, 128, 128, WIDE, 1, 0.0045),
    (4, 28, 4, 128, 1000, BF, 16, 0.0081),
    (1, 8, 4, 256, 4096, S1, 64, 0.0121),
    (16, 40, 8, 128, 4096, WIDE, 2, 0.0916),
    (64, 14, 2, 64, 2048, BF, 4, 0.0258),
]
# (shape, the fastest (splits, tiles) bench_attention_decode measured there): the plan must pick it
# (session 19's sweep; session 20's, at eea1021, for B16 ctx32k and B1 ctx4k D256: decode_model.MEASURED)
MEASURED_BEST = [
    ((16, 12, 2, 128, 32768), 16, S1), ((16, 40, 8, 128, 4096), 2, BF), ((256, 64, 8, 128, 128), 1, S1),
    ((1, 32, 8, 128, 128), 1, WIDE), ((16, 40, 8, 128, 1024), 2, BF), ((64, 14, 2, 64, 2048), 4, BF),
    ((1, 8, 4, 256, 4096), 33, BF),
]


def _shape(b, hq, hkv, d, ctx, bs=16):
    return DM.Shape(b, hkv, hq // hkv, d, -(-ctx // bs), bs)


def _smem(hq, hkv, d, tile, bs=16, dt="bf16"):
    return A._split_smem(dt, bs, d, max(16, 1 << max(0, hq // hkv - 1).bit_length()), tuple(sorted(tile.items())))


@pytest.mark.parametrize("case", FITTED, ids=lambda c: f"B{c[0]}_Hq{c[1]}_Hkv{c[2]}_D{c[3]}_ctx{c[4]}")
def test_model_reproduces_its_measurements(case):
    b, hq, hkv, d, ctx, tile, ns, ms = case
    us, _ = DM.estimate(_shape(b, hq, hkv, d, ctx), tile, ns, _smem(hq, hkv, d, tile))
    assert abs(us / 1e3 - ms) <= 0.1 * ms, (us, ms)


@pytest.mark.parametrize("shape,splits,tile", MEASURED_BEST, ids=lambda x: str(x))
def test_plan_picks_the_measured_best(shape, splits, tile):
    b, hq, hkv, d, ctx = shape
    pl = A.decode_plan(b, hq, hkv, d, -(-ctx // 16), 16)
    assert pl.splits == splits and {k: pl.config[k] for k in tile} == tile, pl


def test_residency_from_shared_memory_registers_threads():
    assert DM.resident(78336, 80, 128) == 2                      # 64 keys, 2 stages, D = 128: the ring binds
    assert DM.resident(27136, 127, 128) == 4                     # STAGES = 1: 128 registers x 4 warps bind
    assert DM.resident(147968, 64, 256) == 1                     # 128 keys: one block's ring
    assert DM.resident(1000, 32, 128) == 16                      # 2048 threads
    assert DM.resident(10 ** 6, 255, 1024) == 1                  # never 0
    assert DM.resident(_smem(40, 8, 128, BF), DM.regs(BF, 128), 128) == 2


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("tile,d", [(dict(BN=bn, WARPS=w, STAGES=st), d) for (bn, w, st), d in
                                    itertools.product(DM.REGS, (64, 128, 256)) if not (bn == 128 and d == 256)
                                    and (d == 128 or dict(BN=bn, WARPS=w, STAGES=st) in DM.TILES)],
                         ids=str)   # the plan's TILES at every head size, the tiles bench_attention_decode sweeps
#                                     at D=128 (each case is a ~10-20 s nvcc build: the CPU suite's time)
def test_register_table_matches_ptxas(tile, d, tmp_path):
    """REGS against ptxas for the kernel the wrapper builds: the same residency (the count itself may move a few)."""
    from tilex.stdlib import _launch as L

    mod = L.load("attention_decode", kernel="attention_decode_split", T="bf16", BS=16, D=d, GP=16, DIRECT=False,
                 **tile)
    src = tmp_path / "k.cu"
    src.write_text(mod.cuda)
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    got = int(re.search(r"Used (\d+) registers", r.stderr).group(1))
    smem = int(mod.specs["attention_decode_split"].smem_bytes)
    threads = 32 * tile["WARPS"]
    assert DM.resident(smem, got, threads) == DM.resident(smem, DM.regs(tile, d), threads), (got, DM.regs(tile, d))


def test_combine_and_waves_in_the_estimate():
    sh = _shape(16, 40, 8, 128, 4096)
    smem = _smem(40, 8, 128, BF)
    one, _ = DM.estimate(sh, BF, 1, smem)
    two, _ = DM.estimate(sh, BF, 2, smem)
    assert two < one                                              # 128 programs on 264 slots: a share each is slow
    short = _shape(1, 32, 8, 128, 128)
    a, _ = DM.estimate(short, BF, 1, smem)
    b, _ = DM.estimate(short, BF, 2, smem)
    assert b > a                                                  # the second launch costs more than it saves
    many = _shape(256, 64, 8, 128, 128)                           # 2048 programs: rounds of resident * SMs
    r2, _ = DM.estimate(many, BF, 1, smem)
    assert r2 >= 7 * DM.T0_US


# the grid's decode family: bench_shapes.DECODE x the configs' heads
GRID = [(b, ctx, hq, hkv, d) for (b, ctx), (hq, hkv, d) in itertools.product(
    ((1, 128), (1, 4096), (1, 32768), (4, 1000), (16, 4096), (16, 32768), (64, 2048), (256, 128), (256, 1024),
     (256, 4096)),
    ((32, 8, 128), (64, 8, 128), (14, 2, 64), (12, 2, 128), (16, 2, 128), (28, 4, 128), (40, 8, 128), (8, 4, 256),
     (16, 8, 256)))]


@pytest.mark.parametrize("b,ctx,hq,hkv,d", GRID, ids=lambda x: str(x))
def test_grid_plans_are_sound(b, ctx, hq, hkv, d):
    maxb = -(-ctx // 16)
    pl = A.decode_plan(b, hq, hkv, d, maxb, 16)
    assert 1 <= pl.splits <= min(DM.MAX_SPLITS, maxb)
    tile = {k: pl.config[k] for k in ("BN", "WARPS", "STAGES")}
    assert tile in DM.candidates(_shape(b, hq, hkv, d, ctx))
    assert _smem(hq, hkv, d, tile) is not None                     # it builds
    assert pl.config["STATIC"] is (pl.splits == 1 and maxb * 16 <= DM.STATIC_TOKENS)
    if _shape(b, hq, hkv, d, ctx) in DM.MEASURED:                 # a measured plan, not the model's
        return
    # no other candidate the model knows is predicted faster
    for t in DM.candidates(_shape(b, hq, hkv, d, ctx)):
        smem = _smem(hq, hkv, d, t)
        for ns in range(1, min(DM.MAX_SPLITS, maxb) + 1):
            assert DM.estimate(_shape(b, hq, hkv, d, ctx), t, ns, smem)[0] >= pl.us - 1e-6
    if b * hkv >= 2 * 132:                                         # two waves of unsplit programs already
        assert pl.splits == 1
    if b == 1 and ctx >= 4096:                                    # Hkv programs alone would leave most SMs idle
        assert pl.splits >= 8


def test_fixed_split_count_chooses_tiles_only():
    pl = A.decode_plan(16, 40, 8, 128, 256, 16, splits=7)
    assert pl.splits == 7 and not pl.config["STATIC"]
    with pytest.raises(ValueError, match="num_splits"):
        import numpy as np

        q = np.zeros((1, 2, 16), np.float32)
        kc = np.zeros((2, 16, 1, 16), np.float32)
        tilex.stdlib.attention_decode(q, kc, kc, np.zeros((1, 2), np.int32), np.ones(1, np.int32), num_splits=2000)


def test_q_streamed_kernel_is_behind_an_off_switch(monkeypatch):
    """QS_STATIC is off (the _qs kernel was never timed on a GPU): no plan runs it; on, STATIC plans do, and the
    wrapper then loads attention_decode_split_qs (config QS=True does so whatever the switch)."""
    import numpy as np

    from tilex.stdlib import _launch as L

    assert DM.QS_STATIC is False
    for b, ctx, hq, hkv, d in GRID:
        assert not A.decode_plan(b, hq, hkv, d, -(-ctx // 16), 16).qs
    A.decode_plan.cache_clear()
    monkeypatch.setattr(DM, "QS_STATIC", True)
    try:
        short, wide = A.decode_plan(1, 32, 8, 128, 8, 16), A.decode_plan(16, 12, 2, 128, 2048, 16)
        assert short.config["STATIC"] and short.qs and not wide.qs
        seen, real = [], L.load
        monkeypatch.setattr(L, "load", lambda name, **kw: (seen.append(kw.get("kernel")), real(name, **kw))[1])
        rng = np.random.default_rng(3)
        q = rng.standard_normal((2, 4, 16)).astype(np.float32)
        kc = rng.standard_normal((4, 16, 2, 16)).astype(np.float32)
        table, lens = np.array([[0, 1], [2, 3]], np.int32), np.array([20, 7], np.int32)
        tilex.stdlib.attention_decode(q, kc, kc, table, lens)
        assert "attention_decode_split_qs" in seen
    finally:
        A.decode_plan.cache_clear()


def test_measured_plans_are_sound_and_only_for_their_gpu():
    """decode_model.MEASURED: each plan is one the model could run (a candidate tile that builds, a split count in
    range) and is taken for its exact shape on a 132-SM GPU only; elsewhere, and for a neighbouring shape, the
    model decides."""
    for sh, (ns, tile) in DM.MEASURED.items():
        assert tile in DM.candidates(sh) and 1 <= ns <= min(DM.MAX_SPLITS, sh.maxb)
        hq = sh.hkv * sh.g
        assert _smem(hq, sh.hkv, sh.d, tile) is not None
        pl = A.decode_plan(sh.b, hq, sh.hkv, sh.d, sh.maxb, sh.bs)
        assert pl.splits == ns and {k: pl.config[k] for k in tile} == tile
        other = A.decode_plan(sh.b, hq, sh.hkv, sh.d, sh.maxb, sh.bs, "bf16", 114)
        model = DM.choose(sh, lambda t: _smem(hq, sh.hkv, sh.d, t), 114)
        assert (other.splits, other.config) == (model.splits, model.config)
        wider = A.decode_plan(sh.b, hq, sh.hkv, sh.d, sh.maxb + 1, sh.bs)
        wsh = DM.Shape(sh.b, sh.hkv, sh.g, sh.d, sh.maxb + 1, sh.bs)
        assert (wider.splits, wider.config) == (lambda p: (p.splits, p.config))(
            DM.choose(wsh, lambda t: _smem(hq, sh.hkv, sh.d, t), 132))
        assert wsh not in DM.MEASURED
