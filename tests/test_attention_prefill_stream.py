"""The stream prefill kernel (stdlib_kernels/attention_prefill_stream.tile, KERNEL="stream"): persistent programs,
each one flat pipeline loop over (head, query block, key block) steps with Q, K and V streamed by TMA, and the
wrapper's launch configuration (prefill_launch_config).

CPU tier: the interpreter against float64 NumPy (one token, odd S, S a multiple of the block, GQA, both layouts,
causal and not, fewer programs than units and more, f16/f32), the units' step order (every block walked whole,
in order), the wrapper's checks, the generated CUDA (three TMA maps, wgmma on the ring, no register load of q),
an nvcc build without spills. GPU tests: tests/test_attention_prefill_stream_gpu.py.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tilex import stdlib
from tilex.cli import app
from tilex.pipeline import Options
from tilex.stdlib import attention as A
from tilex.stdlib import attention_plan as P
from tilex.translate import translate
from tilex.types import DType, numpy_dtype

ROOT = Path(__file__).resolve().parents[1]
STREAM = ROOT / "stdlib_kernels" / "attention_prefill_stream.tile"
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
    # B, Hq, Hkv, S, D, config (BM = 16 keeps the interpreter quick and gives many blocks a head)
    (1, 1, 1, 1, 64, dict(BM=16, PROGRAMS=1)),       # one token
    (2, 4, 1, 13, 32, dict(BM=16, PROGRAMS=3)),      # G = 4, S < BM, 8 heads over 3 programs
    (1, 6, 2, 48, 32, dict(BM=16, PROGRAMS=4)),      # S a multiple of BM (3 blocks: the odd middle block)
    (3, 2, 2, 37, 16, dict(BM=16, PROGRAMS=2)),      # S past a block boundary, 3 heads a program
    (1, 2, 1, 150, 16, dict(BM=16, PROGRAMS=1)),     # 10 blocks: 5 units of 11 steps a head, one program
    (2, 2, 2, 40, 16, dict(BM=16, PROGRAMS=40)),     # more programs than units: the rest are idle
    (1, 2, 1, 77, 64, None),                         # the default tiling (64 rows), S = 77
]


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c[:5]))
def test_stream_kernel_vs_float64(case, causal, layout):
    b, hq, hkv, s, d, cfg = case
    rng = np.random.default_rng(s * 31 + d + hq)
    q, k, v = _rand(rng, (b, hq, s, d), "f32"), _rand(rng, (b, hkv, s, d), "f32"), _rand(rng, (b, hkv, s, d), "f32")
    ref = ref_attention(q, k, v, causal, d ** -0.5)
    config = dict(cfg or {}, KERNEL="stream")
    if layout == "bshd":
        tq, tk, tv = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))
        out = stdlib.attention_prefill(tq, tk, tv, causal=causal, config=config, layout="bshd").transpose(0, 2, 1, 3)
    else:
        out = stdlib.attention_prefill(q, k, v, causal=causal, config=config)
    assert _rel(out, ref) <= TOL["f32"]


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_stream_kernel_dtypes(dt):
    rng = np.random.default_rng(3)
    q, k, v = _rand(rng, (2, 4, 40, 32), dt), _rand(rng, (2, 2, 40, 32), dt), _rand(rng, (2, 2, 40, 32), dt)
    out = stdlib.attention_prefill(q, k, v, causal=True, config=dict(KERNEL="stream", BM=16, PROGRAMS=3))
    assert out.dtype == q.dtype
    assert _rel(out, ref_attention(q, k, v, True, 32 ** -0.5)) <= TOL[dt]


def test_stream_kernel_is_the_flash_kernels_result():
    """Same inputs, the stream and flash kernels agree to f32 rounding (the same online softmax, other blocks)."""
    rng = np.random.default_rng(5)
    q, k, v = _rand(rng, (1, 4, 70, 16), "f32"), _rand(rng, (1, 2, 70, 16), "f32"), _rand(rng, (1, 2, 70, 16), "f32")
    a = stdlib.attention_prefill(q, k, v, config=dict(KERNEL="stream", BM=16, PROGRAMS=2))
    f = stdlib.attention_prefill(q, k, v, config=dict(KERNEL="flash", BM=32, BN=16, WARPS=2))
    assert np.max(np.abs(a - f)) <= 1e-5


def _units(nb: int, causal: bool) -> list:
    """The kernel's units of a head as written in it: unit p -> its steps (j, n), c = 0 .. U - 1."""
    e = nb - nb % 2
    u, npairs = (e + 1, (nb + 1) // 2) if causal else (nb, nb)
    out = []
    for p in range(npairs):
        steps = []
        for c in range(u):
            if not causal:
                steps.append((p, c))
            elif p == e // 2:
                steps.append((nb - 1, c))
            else:
                steps.append((e - 1 - p, c - p - 1) if c > p else (p, c))
        out.append(steps)
    return out


@pytest.mark.parametrize("nb", [1, 2, 3, 7, 16, 65])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_units_walk_each_block_whole_and_in_order(nb, causal):
    """Every unit has U steps (causal: NB + 1 for even NB, NB for odd); each query block j's steps are its key
    blocks 0 .. j (causal) or 0 .. NB - 1, in order and consecutive (the softmax restarts at n = 0, the block is
    stored at its last); every block is walked exactly once: no step is wasted."""
    walks = []
    for steps in _units(nb, causal):
        assert len(steps) == ((nb + 1 - nb % 2) if causal else nb)
        for j, n in steps:
            if n == 0:
                walks.append((j, []))
            assert walks[-1][0] == j
            walks[-1][1].append(n)
    for j, ns in walks:
        assert ns == list(range(j + 1 if causal else nb))
    assert sorted(j for j, _ in walks) == list(range(nb))


def test_stream_refuses_what_it_cannot_take():
    rng = np.random.default_rng(0)
    q = _rand(rng, (1, 1, 8, 16), "f32")
    with pytest.raises(ValueError, match="KERNEL must be one of"):
        stdlib.attention_prefill(q, q, q, config=dict(KERNEL="streams"))


def test_launch_config():
    """The wrapper's kernel and defines: persistent kernels get PROGRAMS (SMs x resident), config entries win,
    gqa gets its G, the default is the model's choice."""
    kind, cfg = A.prefill_launch_config(128, 32, 8, 128, 128, True, "bhsd", "bf16", dict(KERNEL="stream"), 132, "sm_90a")
    assert (kind, cfg) == ("stream", dict(BM=64, WARPS=4, STAGES=2, KERNEL="stream", PROGRAMS=264))
    kind, cfg = A.prefill_launch_config(1, 8, 4, 4096, 256, True, "bhsd", "bf16", dict(KERNEL="stream", PROGRAMS=5),
                                        132, "sm_90a")
    assert cfg["PROGRAMS"] == 5
    assert A.prefill_launch_config(2, 8, 2, 100, 64, True, "bhsd", "bf16", dict(KERNEL="gqa"), 132, "sm_90a")[1]["G"] == 4
    kind, cfg = A.prefill_launch_config(4, 40, 8, 4096, 128, True, "bhsd", "bf16", None, 132, "sm_90a")
    want = P.choose(4, 40, 8, 4096, 128, True, "bhsd", "bf16", 132, "sm_90a")
    assert kind == want[0] and cfg == dict(want[1], KERNEL=want[0])
    assert P.stream_resident(P.stream_config(128, 128), 128) == 2   # 2 x 48 KB stages, 159 registers x 128
    assert P.stream_resident(P.stream_config(128, 64), 64) == 4
    assert P.stream_resident(P.stream_config(128, 256), 256) == 1


# ---- the generated CUDA


def _cuda(arch="sm_90a", **defines) -> str:
    src = STREAM.read_text(encoding="utf-8")
    return translate(src, str(STREAM), Options(arch=arch, defines=dict(defines))).cuda


def _explain(path, *defines) -> str:
    args = ["explain", str(path)]
    for d in defines:
        args += ["-D", d]
    r = CliRunner().invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.parametrize("d", [64, 128, 256])
def test_stream_kernel_streams_q_k_v_by_tma(d):
    cu = _cuda(D=d)
    assert "const __grid_constant__ tilex_tmap tx_map2" in cu           # q, k, v: three TMA maps
    assert "A from the ring, B K-major from the ring" in cu
    assert f"p.to(bf16) @ vt: wgmma m64n{d}k16" in cu and "A from registers" in cu
    assert "tilex_load_chunk<" not in cu  # nothing is loaded into registers: q, k, v all come by TMA
    expl = _explain(STREAM, f"D={d}")
    assert "qt (128-byte swizzled), kt (128-byte swizzled), vt (128-byte swizzled) by TMA, 2 stages" in expl
    assert "wgmma (sm_90a), one warpgroup per 64 rows" in expl


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("defines", [dict(D=128), dict(D=64, T="f16", CAUSAL=False), dict(D=128, BM=128, WARPS=8)],
                         ids=["d128", "d64_f16_full", "bm128"])
def test_stream_kernel_builds_with_nvcc(defines, tmp_path):
    cu = tmp_path / "stream.cu"
    cu.write_text(_cuda(**defines))
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-Xptxas", "-v", str(cu), "-o", str(tmp_path / "s.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "0 bytes spill stores" in r.stderr


# ---- the choice


def test_stream_is_config_only():
    """Measured slower than flash at every shape timed (session 20): not a candidate of the default choice."""
    for sh in (P.Shape(128, 32, 8, 128, 128), P.Shape(8, 14, 2, 2048, 64), P.Shape(1, 8, 4, 4096, 256)):
        assert "stream" not in dict(P.candidates(sh))
        assert P.choose_prefill(sh)[0] != "stream"
