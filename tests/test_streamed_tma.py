"""Streamed wgmma rings filled by TMA (sm_90a): plan_streams' choice (StreamTile.tma_box, tma_obstacle),
the generated forms (mbarriers at kernel start, one thread's boxes with expect_tx, every thread's parity
wait, no cp.async), the fallbacks to cp.async (mixed loops, pitches not known to be 16-byte multiples,
gathers, other targets), explain's lines, the KernelSpec's N-D maps and the host-side map geometry and
checks without a driver. Numbers are checked on the GPU by tests/test_stdlib_attention_gpu.py."""
from __future__ import annotations

import re

import numpy as np
import pytest

from test_plan_matmul import loops
from tilex.diagnostics import LaunchError
from tilex.pipeline import Options
from tilex.runtime import BoundArgs, tma
from tilex.runtime import launch as launch_mod
from tilex.spec import KernelSpec, ParamSpec, TmaMap
from tilex.stdlib import _launch as L
from tilex.translate import translate

PREFILL = L.source("attention_prefill")

# k's row pitch is N elements: TMA needs it provably a multiple of 16 bytes (`where N % 8 == 0`)
TOY = """
kernel f<BM: int = 128, BN: int = 64, D: int = 64, WARPS: int = 8>(q: bf16[S, D], k: bf16[S, N], v: bf16[S, D],
                                                                    o: out f32[S, D])
    WHERE
    grid (cdiv(S, BM),)
{
    m0 = program_id(0) * BM
    qt = q[m0 : m0 + BM, 0 : D]
    acc = zeros(f32[BM, D])
    for n0 in pipeline(0, S, BN, stages = 2) {
        kt = k[n0 : n0 + BN, 0 : D]
        vt = v[n0 : n0 + BN, 0 : D]
        s = qt @ kt.T
        acc = acc + s.to(bf16) @ vt
    }
    o[m0 : m0 + BM, 0 : D] = acc
}
"""


def _compile(src, arch="sm_90a", **defines):
    t = translate(src, "f.tile", Options(arch=arch, defines=defines), host=True)
    k = t.program.kernels[0]
    return [f for f in loops(k) if f.pipelined], k, t


def _body(cuda: str) -> str:
    return cuda[cuda.index('extern "C" __global__'):]


@pytest.mark.parametrize("defines", [dict(D=128), dict(D=128, BN=128), dict(D=64), dict(D=64, BN=128),
                                     dict(D=128, BM=64, WARPS=4), dict(D=128, CAUSAL=False)])
def test_attention_prefill_rings_are_filled_by_tma(defines):
    fs, k, t = _compile(PREFILL, **defines)
    bn, d = defines.get("BN", 64), defines["D"]
    for f in fs:
        assert [(x.name, x.tma_box, x.tma_why) for x in f.stream] == [("kt", (64, 1, bn, 1), ""), ("vt", (64, 1, bn, 1), "")]
    assert k.info.mbar_count == 2 and k.info.mbar_offset % 8 == 0
    # one N-D map per tensor, shared by the two loops, after the symbols
    assert t.specs["attention_prefill"].tma == (TmaMap("tx_map0", "k", bn, 64, (64, 1, bn, 1)),
                                               TmaMap("tx_map1", "v", bn, 64, (64, 1, bn, 1)))
    body = _body(t.cuda)
    assert "const __grid_constant__ tilex_tmap tx_map0" in body and "const __grid_constant__ tilex_tmap tx_map1" in body
    # mbarriers once at kernel start, one per stage
    assert "for (int tx_i = 0; tx_i < 2; ++tx_i) tilex_mbar_init(tx_bars + tx_i, 1);" in body
    assert body.count("tilex_mbar_init(") == 1 and "tilex_mbar_fence_init();" in body
    # thread 0 expects the bytes of both tiles and issues one 4-D box per 64-column atom of each
    assert f"tilex_mbar_expect_tx(tx_bars + (tx_stage ^ 1), {2 * bn * d * 2});" in body
    atoms = d // 64
    # per loop: the prologue copy and the in-loop copy, each k and v
    assert body.count("tilex_tma_box(") == 2 * 2 * 2 * atoms
    assert re.search(r"tilex_tma_box\(\(tilex_smem \+ \d+ \+ \(tx_stage \^ 1\) \* \d+\) \+ 0, &tx_map0, \(int\)\(0\), "
                     r"\(int\)\(hk\), tx_r, \(int\)\(kb\), tx_bars \+ \(tx_stage \^ 1\)\);", body)
    if atoms == 2:
        assert f"+ {bn * 128}, &tx_map0, (int)(0) + 64, (int)(hk), tx_r, (int)(kb)" in body
    assert "if (threadIdx.x == 0 && tx_cur + tx_step < tx_hi) {" in body
    # every thread waits on its stage's parity and flips it
    assert body.count("tilex_mbar_wait(tx_bars + tx_stage, (tx_phase >> tx_stage) & 1u);") == 2
    assert body.count("tx_phase ^= 1u << tx_stage;") == 2
    # no cp.async left: the rings are TMA's, the resident q keeps its proxy fence
    assert "tilex_tile_to_smem" not in body and "tilex_cp_async" not in body
    assert body.count("tilex_fence_async_smem();") == 1
    # one barrier per iteration with 2 stages (after the body), one before each loop
    loop1 = body[body.index("for (long long tx_cur"):body.index("f.tile:56")]
    assert loop1.count("__syncthreads();") == 1


def test_three_stages_wait_then_barrier_then_copy():
    fs, k, t = _compile(PREFILL, D=128, STAGES=3)
    assert all(x.stages == 3 and x.tma_box for f in fs for x in f.stream) and k.info.mbar_count == 3
    body = _body(t.cuda)
    i = body.index("tilex_mbar_wait(tx_bars + tx_stage")
    seg = body[i:i + 1200]
    assert seg.index("__syncthreads();") < seg.index("tilex_mbar_expect_tx(tx_bars + ((tx_stage == 0 ? 2 : tx_stage - 1))")
    assert "for (int tx_i = 0; tx_i < 3; ++tx_i)" in body


def test_host_launcher_encodes_nd_maps():
    _, _, t = _compile(PREFILL, D=128)
    assert "static inline cudaError_t tilex_encode_tmap_nd(" in t.host
    assert "const long long dims[4] = {(long long)BK, (long long)S, (long long)HKV, (long long)128};" in t.host
    assert "const cuuint32_t box[4] = {64, 1, 64, 1};  // innermost first" in t.host
    assert "tilex_encode_tmap_nd(&tx_map1, v, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, 4, dims, box)" in t.host
    assert "tx_map0, tx_map1);" in t.host


def test_pitch_must_be_known_16_byte_multiple():
    fs, k, t = _compile(TOY.replace("WHERE", ""))
    assert fs[0].mma.strategy == "wgmma"
    assert [x.tma_box for x in fs[0].stream] == [(), ()]  # mixed: v qualifies, k does not; both by cp.async
    assert fs[0].stream[0].tma_why == ("the row pitch of 'k' is not known to be a multiple of 16 bytes "
                                       "(add `where N % 8 == 0`)")
    assert "tilex_tma_box(" not in t.cuda and "tilex_tile_to_smem_sw128<" in t.cuda and k.info.mbar_count == 0
    assert t.specs["f"].tma == ()
    fs, k, t = _compile(TOY.replace("WHERE", "where N % 8 == 0"))
    assert [x.tma_box for x in fs[0].stream] == [(64, 64), (64, 64)]  # 2-D maps: (64 columns, 64 rows)
    assert t.specs["f"].tma == (TmaMap("tx_map0", "k", 64, 64, (64, 64)), TmaMap("tx_map1", "v", 64, 64, (64, 64)))
    assert "tilex_tma_box((tilex_smem + " in t.cuda and "tilex_tile_to_smem" not in _body(t.cuda)
    assert "const int tx_r = (S > 0 && N > 0) ? (int)(n0) : -64;" in t.cuda


def test_64_bit_index_keeps_cp_async():
    src = TOY.replace("WHERE", "where N % 8 == 0").replace("kt = k[n0 : n0 + BN, 0 : D]",
                                                           "kt = k[n0.to(i64) : n0.to(i64) + BN, 0 : D]")
    try:
        fs, _, t = _compile(src)
    except Exception as e:  # pragma: no cover - the language may not take i64 slice starts
        pytest.skip(f"i64 slice starts: {e}")
    if not fs[0].stream or fs[0].mma.strategy != "wgmma":
        pytest.skip("not a streamed wgmma loop")
    assert [x.tma_box for x in fs[0].stream] == [(), ()]
    assert "TMA coordinates are 32-bit" in fs[0].stream[0].tma_why


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89"])
def test_other_targets_keep_cp_async(arch):
    fs, k, t = _compile(PREFILL, arch=arch, D=64, BM=64, WARPS=4)
    assert all(not x.tma_box and not x.tma_why for f in fs for x in f.stream)
    assert "tilex_tma_box" not in t.cuda and "tilex_mbar" not in t.cuda and k.info.mbar_count == 0


def test_gathered_decode_keeps_cp_async():
    t = translate(L.source("attention_decode"), "attention_decode.tile", Options(arch="sm_90a"))
    assert "tilex_tma_box" not in t.cuda and "tilex_mbar" not in t.cuda


def test_explain_says_by_tma(tmp_path):
    from typer.testing import CliRunner

    from tilex.cli import app

    f = tmp_path / "attention_prefill.tile"
    f.write_text(PREFILL)
    out = CliRunner().invoke(app, ["explain", str(f), "-D", "D=128"]).output
    assert "kt (128-byte swizzled), vt (128-byte swizzled) by TMA, 2 stages" in out
    g = tmp_path / "f.tile"
    g.write_text(TOY.replace("WHERE", ""))
    out = CliRunner().invoke(app, ["explain", str(g)]).output
    assert ("by cp.async (not TMA: the row pitch of 'k' is not known to be a multiple of 16 bytes (add `where N % 8 "
            "== 0`))") in out.replace("\n", " ").replace("  ", " ") or "by cp.async (not TMA: the row pitch" in out


# ---------------------------------------------------------------- host side, no driver

def test_map_geometry_mirrors_the_tensor():
    # k: [BK, S, HKV, D] bf16 -> dims innermost first, byte strides of all but the innermost
    assert tma.geometry((3, 1000, 4, 128), 2, (64, 1, 64, 1)) == (
        (128, 4, 1000, 3), (256, 1024, 1024000), (64, 1, 64, 1))
    assert tma.geometry((77, 64), 2, (64, 128)) == ((64, 77), (128,), (64, 128))
    # an empty dim is encoded as 1 (the kernel then sends every box outside the map)
    assert tma.geometry((2, 0, 4, 64), 2, (64, 1, 64, 1))[0] == (64, 4, 1, 2)
    with pytest.raises(ValueError):
        tma.geometry((1, 2, 3, 4, 5, 6), 2, (1,) * 6)


def test_map_obstacles():
    assert tma.nd_obstacle("k", 0x1000, "bf16", (2, 100, 4, 128), (64, 1, 64, 1)) is None
    why = tma.nd_obstacle("k", 0x1002, "bf16", (2, 100, 4, 128), (64, 1, 64, 1))
    assert "argument 'k'" in why and "16-byte aligned address (got 0x1002)" in why
    why = tma.nd_obstacle("k", 0x1000, "bf16", (100, 12), (64, 64))
    assert "multiples of 16" in why and "got 24" in why


def test_kernel_arguments_encode_nd_maps(monkeypatch):
    spec = KernelSpec("f", (ParamSpec("k", "tensor", "bf16", ("B", "S", "H", 128)),), ("B", "S", "H"), (), ("B",),
                      256, 0, tma=(TmaMap("tx_map0", "k", 64, 64, (64, 1, 64, 1)),))
    calls = []
    monkeypatch.setattr(tma, "encode_nd", lambda *a: calls.append(a) or np.void(bytes(128)))
    monkeypatch.setattr(launch_mod, "_pointer", lambda x, kind=None: np.uint64(x))
    bound = BoundArgs({"B": 2, "S": 300, "H": 4}, {"k": 0x10000}, {}, (2, 1, 1))
    args = launch_mod.kernel_arguments(spec, bound)
    assert calls == [(0x10000, "bf16", (2, 300, 4, 128), (64, 1, 64, 1))] and len(args[-1].tobytes()) == 128
    # an empty tensor: a stand-in address (never read)
    calls.clear()
    launch_mod.kernel_arguments(spec, BoundArgs({"B": 2, "S": 0, "H": 4}, {"k": 0}, {}, (2, 1, 1)))
    assert calls == [(256, "bf16", (2, 0, 4, 128), (64, 1, 64, 1))]
    with pytest.raises(LaunchError, match="16-byte aligned address"):
        launch_mod.kernel_arguments(spec, BoundArgs({"B": 2, "S": 300, "H": 4}, {"k": 0x10008}, {}, (2, 1, 1)))
