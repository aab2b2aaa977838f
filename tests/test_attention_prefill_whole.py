"""The whole-sequence prefill kernel (stdlib_kernels/attention_prefill_whole.tile, KERNEL="whole") and the compiler
feature it needs: a tile a wgmma `pipeline` loop streams, read as the *left* operand of a product (`qt @ kt.T`),
is kept in the loop's 128-byte swizzled ring (filled by TMA) and wgmma reads A from there by descriptor.

CPU tier: the interpreter against float64 NumPy (odd S, one token, GQA, both layouts, causal and not, programs
walking several tiles, f16/f32); the generated CUDA (three TMA maps, A from the ring, no register load of q) and
the mma.sync fallback of other targets; nvcc builds; the cost model. GPU tests: tests/test_attention_prefill_whole_gpu.py.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import tilex
from tilex import stdlib
from tilex.cli import app
from tilex.pipeline import Options
from tilex.stdlib import attention_plan as P
from tilex.types import DType, numpy_dtype

ROOT = Path(__file__).resolve().parents[1]
WHOLE = ROOT / "stdlib_kernels" / "attention_prefill_whole.tile"
BF16 = numpy_dtype(DType.BF16)
DTYPES = {"bf16": BF16, "f16": np.float16, "f32": np.float32}
TOL = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}


def _rand(rng, shape, dt):
    return rng.standard_normal(shape, dtype=np.float32).astype(DTYPES[dt])


def _rel(out, ref):
    out = np.asarray(out, dtype=np.float64)
    assert np.isfinite(out).all(), "output has NaN/inf"
    return float(np.max(np.abs(out - ref)) / max(np.max(np.abs(ref)), 1e-30))


def ref_attention(q, k, v, causal, scale):
    """float64: q [B, Hq, S, D], k, v [B, Hkv, S, D]."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if causal:
        n = q.shape[2]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(axis=-1, keepdims=True)) @ v


CASES = [
    # B, Hq, Hkv, S, D, config (small tiles keep the interpreter quick; PROGRAMS < tiles: programs walk several)
    (1, 1, 1, 1, 64, dict(BM=16, BN=16, PROGRAMS=1)),     # one token
    (2, 4, 1, 13, 64, dict(BM=16, BN=16, PROGRAMS=3)),    # G = 4, S not a multiple of 8, 8 tiles over 3 programs
    (1, 6, 2, 32, 32, dict(BM=32, BN=32, PROGRAMS=4)),    # G = 3, S = BM = BN
    (3, 2, 2, 20, 64, dict(BM=32, BN=64, PROGRAMS=2)),    # G = 1, BN > BM, keys past S masked
    (1, 2, 1, 77, 64, None),                              # the default tiling (128 rows), S = 77
]


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c[:5]))
def test_whole_kernel_vs_float64(case, causal, layout):
    b, hq, hkv, s, d, cfg = case
    rng = np.random.default_rng()
    q, k, v = _rand(rng, (b, hq, s, d), "bf16"), _rand(rng, (b, hkv, s, d), "bf16"), _rand(rng, (b, hkv, s, d), "bf16")
    ref = ref_attention(q, k, v, causal, d ** -0.5)
    config = dict(cfg or {}, KERNEL="whole")
    if layout == "bshd":
        tok = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # noqa: E731
        out = np.full((b, s, hq, d), np.nan, BF16)
        o = stdlib.attention_prefill(tok(q), tok(k), tok(v), causal=causal, out=out, config=config, layout="bshd")
        assert o is out
        o = tok(o)
    else:
        out = np.full((b, hq, s, d), np.nan, BF16)
        o = stdlib.attention_prefill(q, k, v, causal=causal, out=out, config=config)
        assert o is out
    assert _rel(o, ref) <= TOL["bf16"]


@pytest.mark.parametrize("dt", ["f16", "f32"])
def test_whole_kernel_dtypes(dt):
    rng = np.random.default_rng()
    q, k, v = _rand(rng, (2, 4, 11, 32), dt), _rand(rng, (2, 2, 11, 32), dt), _rand(rng, (2, 2, 11, 32), dt)
    o = stdlib.attention_prefill(q, k, v, causal=True, config=dict(KERNEL="whole", BM=16, BN=16, PROGRAMS=3))
    assert o.dtype == DTYPES[dt]
    assert _rel(o, ref_attention(q, k, v, True, 32 ** -0.5)) <= TOL[dt]


def test_whole_kernel_is_the_flash_kernels_result():
    """Same inputs, both kernels: the same numbers up to the rounding of p (bf16) and of the output."""
    rng = np.random.default_rng()
    q, k, v = _rand(rng, (2, 4, 24, 32), "f32"), _rand(rng, (2, 2, 24, 32), "f32"), _rand(rng, (2, 2, 24, 32), "f32")
    a = stdlib.attention_prefill(q, k, v, config=dict(KERNEL="whole", BM=32, BN=32, PROGRAMS=2))
    f = stdlib.attention_prefill(q, k, v, config=dict(BM=16, BN=16, WARPS=1))
    assert np.max(np.abs(a - f)) <= 1e-5 * np.max(np.abs(f))


def test_whole_kernel_refuses_longer_sequences():
    rng = np.random.default_rng()
    q, k, v = _rand(rng, (1, 2, 70, 64), "f32"), _rand(rng, (1, 1, 70, 64), "f32"), _rand(rng, (1, 1, 70, 64), "f32")
    with pytest.raises(ValueError, match=r"KERNEL='whole' takes S <= BM and S <= BN \(64, 64\), got S=70"):
        stdlib.attention_prefill(q, k, v, config=dict(KERNEL="whole", BM=64, BN=64))
    with pytest.raises(ValueError, match=r"S <= BM and S <= BN \(128, 64\)"):
        stdlib.attention_prefill(q, k, v, config=dict(KERNEL="whole", BM=128, BN=64))


# ---- the generated CUDA: q, k, v by TMA, wgmma's A read from the ring

def _cuda(arch="sm_90a", **defines):
    return tilex.translate(WHOLE.read_text(), file=str(WHOLE), options=Options(defines=defines, arch=arch)).cuda


def _explain(path, *defines: str) -> str:
    r = CliRunner().invoke(app, ["explain", str(path), "--arch", "sm_90a", *sum((["-D", d] for d in defines), [])])
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.parametrize("d", [64, 128])
def test_whole_kernel_reads_q_from_the_ring(d):
    cu = _cuda(D=d)
    assert "const __grid_constant__ tilex_tmap tx_map2" in cu           # q, k, v: three TMA maps
    assert "qt @ kt.T: wgmma m64n128k16 x" in cu and "A from the ring, B K-major from the ring" in cu
    assert f"p.to(bf16) @ vt: wgmma m64n{d}k16" in cu and "A from registers" in cu
    # A's descriptor is on this iteration's q stage (offset 0 of the ring), not a resident tile or registers
    assert re.search(r"tilex_wgmma_m64n128k16_bf16_k\(tx_mm\d+, tilex_wgmma_desc\(\(tilex_smem \+ 0 \+ \(tx_stage\) \* \d+\)", cu)
    assert "qt = q[t // HQ, 0 : 128, t % HQ, 0 : " in cu and "(streamed above)" in cu
    assert "tilex_load_chunk<" not in cu  # nothing is loaded into registers: q, k, v all come by TMA
    expl = _explain(WHOLE, f"D={d}")
    assert "streamed:    line 22: qt (128-byte swizzled), kt (128-byte swizzled), vt (128-byte swizzled) by TMA" in expl
    assert "products:    line 22: wgmma (sm_90a)" in expl


def test_streamed_left_operand_elsewhere_stays_in_registers(tmp_path):
    """On sm_80 (no wgmma) the streamed left operand is read from its (padded) stage into registers and the
    products run on mma.sync; in a wgmma loop where the tile is read otherwise too, the loop falls back the same
    way with the reason in explain."""
    cu = _cuda(arch="sm_80", D=64, BM=64, BN=64, WARPS=4)
    assert "wgmma" not in cu and "mma.sync" in cu
    src = WHOLE.read_text().replace("        s = (qt @ kt.T) * qk_scale",
                                    "        s = (qt @ kt.T) * qk_scale + sum(qt.to(f32), axis=1)[:, None] * 0.0")
    (tmp_path / "w.tile").write_text(src)
    expl = _explain(tmp_path / "w.tile", "D=64")
    assert "not wgmma: 'qt' is also read into registers" in expl


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("defines", [dict(D=128), dict(D=64, T="f16", CAUSAL=False), dict(D=128, BM=64, BN=64, WARPS=4)],
                         ids=["d128", "d64_f16_full", "bm64"])
def test_whole_kernel_builds_with_nvcc(defines, tmp_path):
    cu = tmp_path / "whole.cu"
    cu.write_text(_cuda(**defines))
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-Xptxas", "-v", str(cu), "-o", str(tmp_path / "w.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "0 bytes spill stores" in r.stderr


# ---- the cost model

def test_whole_in_the_candidates_and_its_model():
    """Its 64-row tiling is a candidate (S <= 64) and, measured faster there at every shape timed, preferred; the
    model's fitted chain reproduces the eight H200 measurements within 10%."""
    assert P.whole_resident(P.whole_config(128, 128), 128) == 1   # 177 registers, 193 KB of ring: 1 per SM
    assert P.whole_resident(P.whole_config(128, 64), 64) == 2     # 128 registers, 97 KB
    assert P.whole_resident(P.whole_config(64, 128), 128) == 2    # 97 KB
    kinds = dict(P.candidates(P.Shape(32, 32, 8, 64, 128)))
    assert kinds["whole"] == dict(BM=64, BN=64, WARPS=4, STAGES=2, PROGRAMS=264)
    assert "whole" not in dict(P.candidates(P.Shape(1, 8, 8, 65, 128)))
    assert "whole" not in dict(P.candidates(P.Shape(1, 8, 8, 64, 256)))
    assert "whole" not in dict(P.candidates(P.Shape(1, 8, 8, 64, 128), arch="sm_80"))
    assert "whole" not in dict(P.candidates(P.Shape(1, 8, 8, 64, 128, dtype="f32")))
    measured = [((128, 32, 8, 128, 128), 0.2361), ((128, 32, 8, 128, 64), 0.1517), ((64, 28, 4, 100, 128), 0.1076),
                ((32, 32, 8, 64, 128), 0.0317), ((16, 28, 4, 64, 128), 0.0187), ((64, 32, 8, 50, 64), 0.0277),
                ((128, 8, 2, 33, 128), 0.0307), ((8, 40, 8, 64, 128), 0.0182)]
    for dims, whole_ms in measured:
        sh = P.Shape(*dims)
        cfg = dict(P.whole_config(sh.s, sh.d))
        cfg["PROGRAMS"] = 132 * P.whole_resident(cfg, sh.d)
        c = P.prefill_cost("whole", cfg, sh)
        assert abs(c["us"] / 1e3 / whole_ms - 1) <= 0.10, (dims, c)
        assert c["us"] >= sh.bytes() / P.BANDWIDTH * 1e6
        assert P.choose_prefill(sh)[0] == ("whole" if sh.s <= 64 else "flash"), dims
    assert P.choose_prefill(P.Shape(1, 8, 8, 64, 128), arch="sm_86")[0] == "flash"
    assert P.choose_prefill(P.Shape(1, 8, 8, 64, 128, dtype="f32"))[0] == "flash"
