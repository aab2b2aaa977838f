"""plan_streams' streamed tiles: tiles a `pipeline` loop loads at the top of its body go global ->
shared memory by cp.async S - 1 iterations ahead (a ring of S stages); read only as the right operand of
mma products they never enter registers, read otherwise they are read from there into registers. These tests pin the decision and the emitted shape;
the GPU tests of attention_prefill check the numbers."""
from __future__ import annotations

import pytest

from test_plan_matmul import loops
from tilex.pipeline import Options
from tilex.stdlib import _launch as L
from tilex.translate import translate

LOOP = """
kernel f<STAGES: int = 2>(q: bf16[S, 64], k: bf16[S, 64], o: out f32[64, 64])
    grid (1,)
{
    qt = q[0 : 64, 0 : 64]
    acc = zeros(f32[64, 64])
    for n0 in pipeline(0, S, 64, stages = STAGES) {
        kt = k[n0 : n0 + 64, 0 : 64]
        acc += qt @ kt.T
    }
    o[0 : 64, 0 : 64] = acc
}
"""
ALSO_READ = LOOP.replace("        acc += qt @ kt.T\n", "        acc += qt @ kt.T\n        o[0, 0] = sum(kt.to(f32))\n")


def _loops(src, arch="sm_90a", **defines):
    """Every for loop of every kernel (outer first), and the generated CUDA."""
    t = translate(src, "f.tile", Options(arch=arch, defines=defines))
    return [f for k in t.program.kernels for f in loops(k)], t.cuda


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_streamed_when_only_an_mma_operand(stages):
    """S stages: S - 1 copies in flight before the loop, each iteration waits for all but S - 2."""
    t = translate(LOOP, "f.tile", Options(defines=dict(STAGES=stages)))
    fs, cuda = [f for k in t.program.kernels for f in loops(k)], t.cuda
    assert [s.name for s in fs[0].stream] == ["kt"] and not fs[0].stream[0].regs
    assert "tilex_tile_to_smem<64, 64, 72, " in cuda and f"tilex_cp_async_wait<{stages - 2}>" in cuda
    assert cuda.count("kt = k[n0 : n0 + 64, 0 : 64]  (streamed above)") == 1  # one body; tx_stage picks the stage
    assert "int tx_stage = 0;" in cuda
    assert cuda.count("tilex_tile_to_smem<") == stages  # S - 1 before the loop, one in it
    assert t.program.kernels[0].info.smem_bytes >= stages * 64 * 72 * 2


@pytest.mark.parametrize("src, defines, arch", [(LOOP, dict(STAGES=1), "sm_90a"), (LOOP, {}, "sm_75")])
def test_not_streamed(src, defines, arch):
    """One stage asks for no pipelining; no cp.async below sm_80."""
    loops, cuda = _loops(src, arch, **defines)
    assert loops[0].stream == () and "tilex_tile_to_smem<" not in cuda


ROWS = """
kernel g(x: bf16[M, N], y: out bf16[M, N])
    grid (4,)
{
    for r in pipeline(program_id(0), M, num_programs(0), stages = 2) {
        t = x[r : r + 1, 0 : 256].to(f32)
        y[r : r + 1, 0 : 256] = (t / sum(t, axis = 1)[:, None]).to(bf16)
    }
}
"""


@pytest.mark.parametrize("src, tile", [(ALSO_READ, "kt"), (ROWS, "t")])
def test_streamed_into_registers(src, tile):
    """A tile read elementwise too (or widened by .to(f32)) is still copied one iteration ahead; each
    iteration reads it from its stage into registers, 16 bytes at a time, instead of from global memory."""
    loops, cuda = _loops(src)
    (t,) = loops[0].stream
    assert t.name == tile and t.regs
    assert "(streamed above; into registers)" in cuda and "tilex_smem_chunk<8, tilex_bf16, float>" in cuda
    if src is ROWS:
        assert "tilex_load_chunk<" not in cuda  # the streamed tile is the kernel's only load


def test_attention_prefill_streams_k_and_v():
    src = L.source("attention_prefill")
    loops, cuda = _loops(src, D=128)
    assert [[t.name for t in f.stream] for f in loops] == [["kt", "vt"], ["kt", "vt"]]
    # both products read their right operand where the loop put it: nothing is staged for them
    assert "stage [" not in cuda
    loops, _ = _loops(src, D=64, T="f32")
    assert all(f.stream == () for f in loops)  # cp.async streaming is for 2-byte operands (ldmatrix)


# Programs a review found streamed wrongly: each must keep the tile in registers.
NOT_STREAMED = {
    "read after the loop": LOOP.replace("    o[0 : 64, 0 : 64] = acc\n",
                                        "    o[0 : 64, 0 : 64] = acc + (qt @ kt.T)\n").replace(
        "    acc = zeros(f32[64, 64])\n", "    acc = zeros(f32[64, 64])\n    kt = k[0 : 64, 0 : 64]\n"),
    "loop-carried": LOOP.replace("        kt = k[n0 : n0 + 64, 0 : 64]\n        acc += qt @ kt.T\n",
                                 "        acc += qt @ kt.T\n        kt = k[n0 : n0 + 64, 0 : 64]\n").replace(
        "    acc = zeros(f32[64, 64])\n", "    acc = zeros(f32[64, 64])\n    kt = k[0 : 64, 0 : 64]\n"),
    "reassigned in an if": LOOP.replace("        acc += qt @ kt.T\n",
                                        "        if n0 > 0 {\n            kt = k[0 : 64, 0 : 64]\n        }\n"
                                        "        acc += qt @ kt.T\n"),
    "a tensor the kernel writes": LOOP.replace("k: bf16[S, 64], o: out f32[64, 64]", "k: out bf16[S, 64], o: out f32[64, 64]")
                                      .replace("    o[0 : 64, 0 : 64] = acc\n",
                                               "    o[0 : 64, 0 : 64] = acc\n    k[0 : 64, 0 : 64] = qt\n"),
}


@pytest.mark.parametrize("name", list(NOT_STREAMED))
def test_not_streamed_when_the_value_crosses_iterations_or_the_tensor_changes(name):
    loops, cuda = _loops(NOT_STREAMED[name])
    assert all(f.stream == () for f in loops) and "tilex_tile_to_smem<" not in cuda


NESTED = """
kernel f(q: bf16[S, 64], k: bf16[S, 64], v: bf16[S, 64], o: out f32[64, 64])
    grid (1,)
{
    qt = q[0 : 64, 0 : 64]
    acc = zeros(f32[64, 64])
    for n0 in pipeline(0, S, 64, stages = 2) {
        kt = k[n0 : n0 + 64, 0 : 64]
        for j in pipeline(0, S, 64, stages = 2) {
            vt = v[j : j + 64, 0 : 64]
            acc += qt @ vt.T
        }
        acc += qt @ kt.T
    }
    o[0 : 64, 0 : 64] = acc
}
"""


def test_no_streaming_inside_a_streamed_loop():
    """Both loops would use the one streamed region: only the outer loop streams."""
    loops, _ = _loops(NESTED)
    assert [[t.name for t in f.stream] for f in loops] == [["kt"], []]


def test_streamed_loop_reads_its_bounds_once():
    _, cuda = _loops(LOOP)
    assert "const long long tx_lo = 0, tx_hi = S, tx_step = 64;" in cuda


# ---- gathers: rows through an index tile (a paged KV cache), streamed with their indices re-evaluated
GATHER = """
kernel f<BN: int = 64, BS: int = 16, STAGES: int = 2, WARPS: int = 4>(q: bf16[16, 64], kc: bf16[NB, BS, 64], vc: bf16[NB, BS, 64], table: i32[MAXB],
                                                       o: out f32[16, 64])
    grid (1,)
{
    qt = q[0 : 16, 0 : 64]
    acc = zeros(f32[16, 64])
    hi = MAXB * BS
    for n0 in pipeline(0, hi, BN, stages = STAGES) {
        blk = where(arange(n0, n0 + BN) < hi, table[arange(n0, n0 + BN) // BS], -1)
        row = arange(n0, n0 + BN) % BS
        kt = kc[blk, row, 0 : 64]
        vt = vc[blk, row, 0 : 64]
        p = qt @ kt.T
        acc += p.to(bf16) @ vt
    }
    o[0 : 16, 0 : 64] = acc
}
"""


def test_gathered_tile_is_streamed_with_its_indices_substituted():
    loops, cuda = _loops(GATHER)
    assert [t.name for t in loops[0].stream] == ["kt", "vt"]
    t = loops[0].stream[0]
    assert t.gather is not None and t.copy_layout is not None
    # the index tiles were substituted by their definitions (evaluated one iteration ahead in the copy)
    from tilex.exprs import unparse
    assert "blk" not in unparse(t.gather) and "table[" in unparse(t.gather)
    assert cuda.count("tilex_gather_chunk16<tilex_bf16>(") == 4  # the first copy, then one in the loop; k and v
    assert "kt = kc[blk, row, 0 : 64]  (streamed above)" in cuda
    # one table load per row a thread copies (64 rows of 8 chunks over 128 threads: 4 rows each), not per
    # chunk, and one for k and v together (same indices, same dims): in the first copy and in the loop's
    # (the third is the body's own `blk`, unread once kt and vt are streamed: nvcc drops it)
    assert cuda.count("[4];  // table[arange(n0, n0 + 64) // 16]") == 3
    assert cuda.count("// kt, vt: gathered rows, indices and offset once per row for all") == 2
    # whole aligned rows: one cp.async per chunk and tensor, zero-filled for rows outside, from one address
    # (32 x 32 -> 64-bit multiply-adds of the indices by the strides in bytes, checked to fit in 32 bits)
    assert "(unsigned long long)tx_kc_s0 * 2 <= 0xffffffffull" in cuda
    assert "const unsigned long long tx_d1 = reinterpret_cast<unsigned long long>(vc) - reinterpret_cast<unsigned long long>(kc);" in cuda
    assert cuda.split('extern "C"')[1].count("tilex_cp_async16_or_zero(") == 4  # k and v in two copies
    assert "reinterpret_cast<const void*>(tx_a + tx_d1), tx_ok);" in cuda
    # row % BS and row // BS by a power of two: a mask and a shift
    assert "& 15)" in cuda and ">> 4)" in cuda and "tilex_floormod<int>(" not in cuda.split("extern \"C\"")[1]


def test_gathers_of_different_rows_or_geometry_copy_separately():
    # vt reads other rows (row + 0 vs a different expression): its indices are its own
    loops, cuda = _loops(GATHER.replace("vt = vc[blk, row, 0 : 64]", "vt = vc[blk, (row + 1) % BS, 0 : 64]"))
    assert [t.name for t in loops[0].stream] == ["kt", "vt"]
    assert cuda.count("// kt: gathered rows") == 2 and cuda.count("// vt: gathered rows") == 2
    # a tensor of other dims: its strides and bounds differ
    loops, cuda = _loops(GATHER.replace("vc: bf16[NB, BS, 64]", "vc: bf16[NV, BS, 64]"))
    assert cuda.count("// kt: gathered rows") == 2 and cuda.count("// vt: gathered rows") == 2


def test_gather_not_streamed_when_an_index_is_loop_carried():
    src = GATHER.replace("    hi = MAXB * BS\n", "    hi = MAXB * BS\n    off = 0\n").replace(
        "        row = arange(n0, n0 + BN) % BS\n", "        row = (arange(n0, n0 + BN) + off) % BS\n        off = off + 1\n")
    loops, cuda = _loops(src)
    assert loops[0].stream == () and "tilex_gather_chunk16" not in cuda


def test_attention_decode_streams_gathered_k_and_v():
    src = L.source("attention_decode")
    loops, cuda = _loops(src, GP=16, BN=64, D=128)
    split = [f for f in loops if f.stream]
    # attention_decode_split streams the gathered K and V; attention_decode_split_qs also q (read in the key loop)
    assert [[t.name for t in f.stream] for f in split] == [["kt", "vt"], ["qt", "kt", "vt"]]
    assert all(t.gather is not None for f in split for t in f.stream if t.name != "qt")



# ---- gathers the copy must not stream (review of the first version, each a reproducer)
def _gather_variant(body_before_kt: str, pre: str = "", slice_: str = "0 : 64") -> str:
    return ("kernel f<BN: int = 64, BS: int = 16, STAGES: int = 2, WARPS: int = 4>(q: bf16[16, 64], kc: bf16[NB, BS, 64], "
            "table: out i32[MAXB], o: out f32[16, BN], s: i32)\n    grid (1,)\n{\n"
            "    qt = q[0 : 16, 0 : 64]\n    acc = zeros(f32[16, BN])\n    hi = MAXB * BS\n" + pre +
            "    for n0 in pipeline(0, hi, BN, stages = STAGES) {\n" + body_before_kt +
            f"        kt = kc[blk, row, {slice_}]\n        acc += qt @ kt.T\n" + "{after}" +
            "    }\n    o[0 : 16, 0 : BN] = acc\n}\n")


ROW = "        row = arange(n0, n0 + BN) % BS\n"


@pytest.mark.parametrize("src, why", [
    # blk defined after the gather: the load reads the previous iteration's (or the pre-loop) value
    (_gather_variant(ROW, pre="    blk = table[arange(0, BN) // BS]\n").replace(
        "{after}", "        blk = table[arange(n0 + BN, n0 + 2 * BN) // BS]\n"), "defined after the use"),
    # blk's definition reads a name the body assigns after it (its value is the previous iteration's)
    (_gather_variant("        blk = table[arange(base, base + BN) // BS]\n" + ROW, pre="    base = 0\n").replace(
        "{after}", "        base = n0 + BN\n"), "input defined after"),
    # a tile computed before the loop (its layout is not the copy's)
    (_gather_variant("        blk = table[(n0 + offs) // BS]\n        row = (n0 + offs) % BS\n",
                     pre="    offs = arange(0, BN)\n").replace("{after}", ""), "loop-invariant tile"),
    # the index tensor is written by the kernel: a copy one iteration ahead could read a stale index
    (_gather_variant("        blk = table[arange(n0, n0 + BN) // BS]\n" + ROW).replace(
        "{after}", "        table[0] = n0\n"), "index tensor written"),
])
def test_gather_not_streamed(src, why):
    loops, cuda = _loops(src.replace("table: out i32[MAXB]", "table: out i32[MAXB]" if "table[0] =" in src
                                     else "table: i32[MAXB]"))
    assert loops[0].stream == () and "tilex_gather_chunk16" not in cuda, why


def test_gather_with_a_negative_column_start_masks_columns_below_zero():
    src = _gather_variant("        blk = table[arange(n0, n0 + BN) // BS]\n" + ROW, slice_="s : s + 64").replace(
        "{after}", "").replace("table: out i32[MAXB]", "table: i32[MAXB]")
    loops, cuda = _loops(src)
    assert [t.name for t in loops[0].stream] == ["kt"]
    # one cp.async per chunk only when the slice is whole and aligned (decided once per copy); else the
    # helper gets the column and the row length: cp.async only for whole chunks at col >= 0
    assert "const long long tx_c0 = (long long)(s);" in cuda
    assert "const bool tx_whole = tx_c0 >= 0 && (tx_c0 & 7) == 0 && tx_c0 + 64 <= (long long)64 " in cuda
    assert "tilex_gather_chunk16<tilex_bf16>(" in cuda and ", tx_col, (long long)64);" in cuda
    assert "col >= 0 && col + 8 <= ncols" in cuda


def test_ring_that_does_not_fit_gets_fewer_stages():
    """Streaming never turns a kernel that fits into an error: 3 stages of attention_prefill's k and v
    tiles do not fit with its other shared memory on sm_80 (163 KB), so the ring gets 2; a ring of
    tiles read into registers that does not fit even with 2 stages is not streamed (the loads go
    through registers as before)."""
    t = translate(L.source("attention_prefill"), "a.tile", Options(arch="sm_80", defines=dict(STAGES=3)))
    fs = [f for k in t.program.kernels for f in loops(k)]
    assert {s.stages for f in fs for s in f.stream} == {2}
    assert "pipeline(stages=3, 2 used: the ring did not fit)" in t.cuda
    t90 = translate(L.source("attention_prefill"), "a.tile", Options(arch="sm_90a", defines=dict(STAGES=3)))
    assert {s.stages for k in t90.program.kernels for f in loops(k) for s in f.stream} == {3}
    # fused_add_rms_norm streams two [1, 16384] tiles: 2 x 2 x 32 KB > 99 KB on sm_89
    src = L.source("fused_add_rms_norm")
    big = dict(BLOCK=16384, WARPS=32)
    t89 = translate(src, "f.tile", Options(arch="sm_89", kernel="fused_add_rms_norm", defines=big))
    assert all(f.stream == () for k in t89.program.kernels for f in loops(k))
    t90 = translate(src, "f.tile", Options(arch="sm_90a", kernel="fused_add_rms_norm", defines=big))
    assert any(f.stream for k in t90.program.kernels for f in loops(k))


def test_not_streamed_when_an_index_reads_a_tensor_the_kernel_writes():
    """The copy runs iterations ahead: an index read from a tensor the kernel writes could be stale."""
    src = ROWS.replace("x: bf16[M, N], y: out bf16[M, N]", "x: bf16[M, N], off: out i32[4], y: out bf16[M, N]") \
              .replace("t = x[r : r + 1, 0 : 256]", "t = x[r + off[0] : r + off[0] + 1, 0 : 256]") \
              .replace("        y[r : r + 1", "        off[0] = r\n        y[r : r + 1")
    fs, cuda = _loops(src)
    assert fs[0].stream == () and "tilex_tile_to_smem<" not in cuda


def test_streamed_loop_counts_in_64_bits():
    """tx_cur + (S - 1) * step and the loop's stride of S steps are long long: no wrap near 2**31."""
    _, cuda = _loops(ROWS.replace("stages = 2", "stages = 3"))
    assert "const long long tx_lo = " in cuda and "for (long long tx_it = tx_lo;" in cuda
    assert "const int r = (int)tx_cur;" in cuda
    assert "tx_stage" not in cuda  # no product: the body once per stage, its addresses constants


def test_explain_lists_streamed_loops():
    from tilex.explain import explain

    t = translate(ROWS.replace("stages = 2", "stages = 3"), "g.tile", Options())
    (loop,) = explain(t.program)[0]["streamed_loops"]
    assert loop["tiles"] == ["t"] and loop["into_registers"] == ["t"] and loop["stages"] == loop["asked"] == 3
    t = translate(L.source("attention_prefill"), "a.tile", Options(arch="sm_80", defines=dict(STAGES=3)))
    loops = explain(t.program)[0]["streamed_loops"]
    assert [(x["tiles"], x["stages"], x["asked"], x["into_registers"]) for x in loops] == [(["kt", "vt"], 2, 3, [])] * 2


# In place: the loop rewrites the rows it reads. Streaming is safe when every store to the tensor is in
# the loop (not nested in another) and ends, on the axis of the streamed rows, before the rows the next
# iteration reads (a compile-time step): the copies ahead never read rows an earlier iteration writes.
IN_PLACE = """
kernel g<HB: int = 8>(x: out bf16[S, H, 64])
    grid (S,)
{
    t = program_id(0)
    for h in pipeline(0, H, HB, stages = 2) {
        a = x[t, h : h + HB, 0 : 64].to(f32)
        x[t, h : h + HB, 0 : 64] = (a * 2.0).to(bf16)
    }
}
"""
IN_PLACE_NOT_STREAMED = {
    "writes the rows the next iteration reads": IN_PLACE.replace("x[t, h : h + HB, 0 : 64] =", "x[t, h + HB : h + 2 * HB, 0 : 64] ="),
    "rows overlap the next iteration's": IN_PLACE.replace("pipeline(0, H, HB,", "pipeline(0, H, HB // 2,"),
    "a row not relative to the loop": IN_PLACE.replace("x[t, h : h + HB, 0 : 64] =", "x[t, 0 : HB, 0 : 64] ="),
    "a store after the loop": IN_PLACE.replace("    }\n}", "    }\n    x[t, 0 : HB, 0 : 64] = zeros(bf16[HB, 64])\n}"),
    "inside another loop": IN_PLACE.replace("    for h in pipeline", "    for r in range(0, 2) {\n    for h in pipeline")
                                   .replace("    }\n}", "    }\n    }\n}"),
    "a step not known at compile time": IN_PLACE.replace("pipeline(0, H, HB,", "pipeline(0, H, H,")
                                                .replace("h : h + HB", "h : h + 1").replace("[HB, 64]", "[1, 64]"),
    # (review) the load is read from the stage copied ahead, before this iteration's stores ran: a store
    # to the tensor ahead of the load in the body would be missed by it
    "a store before the load": IN_PLACE.replace(
        "        a = x[t, h : h + HB, 0 : 64].to(f32)\n",
        "        x[t, h : h + HB, 0 : 64] = zeros(bf16[HB, 64])\n        a = x[t, h : h + HB, 0 : 64].to(f32)\n"),
    "a conditional store before the load": IN_PLACE.replace(
        "        a = x[t, h : h + HB, 0 : 64].to(f32)\n",
        "        if t > 0 {\n            x[t, h : h + HB, 0 : 64] = zeros(bf16[HB, 64])\n        }\n"
        "        a = x[t, h : h + HB, 0 : 64].to(f32)\n"),
    # an inner loop that rebinds the loop variable: its `h` is not the rows of this iteration
    "an inner loop rebinding the variable": IN_PLACE.replace(
        "        x[t, h : h + HB, 0 : 64] = (a * 2.0).to(bf16)\n",
        "        x[t, h : h + HB, 0 : 64] = (a * 2.0).to(bf16)\n"
        "        for h in range(HB, HB + 1) {\n            x[t, h : h + HB, 0 : 64] = zeros(bf16[HB, 64])\n        }\n"),
}


def test_in_place_rows_are_streamed():
    loops, cuda = _loops(IN_PLACE)
    assert [t.name for t in loops[0].stream] == ["a"] and "tilex_tile_to_smem<8, 64, " in cuda


@pytest.mark.parametrize("name", list(IN_PLACE_NOT_STREAMED))
def test_in_place_not_streamed_when_a_copy_ahead_could_read_a_write(name):
    loops, cuda = _loops(IN_PLACE_NOT_STREAMED[name])
    assert all(f.stream == () for f in loops) and "tilex_tile_to_smem<" not in cuda


def test_in_place_load_after_a_store_is_not_streamed():
    """(review) a second load of the rows after this iteration's store reads what the store wrote: only the
    first load (before any store) may come from the stage copied ahead."""
    src = IN_PLACE.replace("    }\n}", "        b = x[t, h : h + HB, 0 : 64].to(f32)\n"
                           "        x[t, h : h + HB, 0 : 64] = (b + 1.0).to(bf16)\n    }\n}")
    loops, _ = _loops(src)
    assert [t.name for t in loops[0].stream] == ["a"]


def test_rope_inplace_streams_its_heads():
    """rope_inplace rotates rows h : h + HB of q (k) in place; the next heads load while these rotate."""
    src = L.source("rope")
    t = translate(src, "rope.tile", Options(kernel="rope_inplace", defines=dict(HB=8, HALFB=64, WARPS=2)))
    loops_ = [f for k in t.program.kernels for f in loops(k)]
    assert [[s.name for s in f.stream] for f in loops_] == [["a", "b"], ["a", "b"]]
    t = translate(src, "rope.tile", Options(kernel="rope_partial_inplace", defines=dict(HALF=32, HB=8, WARPS=1)))
    assert [[s.name for s in f.stream] for k in t.program.kernels for f in loops(k)] == [["a", "b"], ["a", "b"]]
