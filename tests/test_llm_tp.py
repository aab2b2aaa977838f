"""Tensor parallelism of examples/llm on the CPU: gloo process groups and the interpreter.

* The plan: spans of every split (GQA KV heads replicated when N > Hkv), the shards stitch
  back to the full tensors, bad world sizes are clear errors.
* Shard-only loading: `load_checkpoint_shard` reads exactly the rank's slices (bytes read and
  shapes counted at `get_slice`), equal to the slices of the full checkpoint; random shards
  are the slices of TP=1's random weights.
* TP=2 (tiny-llama: untied, no bias) and TP=4 (tiny: tied, qkv bias, 2 KV heads replicated
  on 4 ranks, vocabulary 97 padded to 4 x 25) as separate processes on gloo
  (`examples/llm/tp_run.py --init-method file://...`): every rank's logits (prefill + decode
  through the paged cache) within 1e-5 relative (f32; only the summation order of the
  all-reduce differs) of the plain TP=1 engine on the full weights, and the same tokens; TP=1
  through the distributed path (a gloo group of one) likewise.
"""
from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

from llm.backend import NumpyBackend  # noqa: E402
from llm.config import named_config  # noqa: E402
from llm.parallel import (NO_MULTICAST_ENV, ShardPlan, SingleProcess, TensorParallel, TPError,  # noqa: E402
                          rule_of, set_no_multicast_env)
from llm.tp_weights import load_checkpoint_shard, random_weights_shard, shard_weights  # noqa: E402
from llm.weights import random_weights, save_checkpoint  # noqa: E402

TP_RUN = ROOT / "examples" / "llm" / "tp_run.py"


def _run_ranks(cmds, timeout=300, before_wait=None):
    """Start one process per command, run `before_wait()` meanwhile, wait for all; when one fails
    (or the time is up) the others, which would wait in a collective, are killed. Returns
    [(returncode, stdout, stderr)]."""
    import time

    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    try:
        extra = before_wait() if before_wait is not None else None
        deadline = time.monotonic() + timeout
        while True:
            codes = [p.poll() for p in procs]  # every one polled (any() would stop at the first)
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    streams = [p.communicate() for p in procs]  # waits: every returncode is set after it
    outs = [(p.returncode,) + s for p, s in zip(procs, streams)]
    assert all(rc == 0 for rc, _, _ in outs), "\n".join(
        f"rank {r}: exit {rc}\n{err[-1500:]}" for r, (rc, _, err) in enumerate(outs))
    return outs, extra


class _FakeGroup(SingleProcess):
    def __init__(self, rank, world):
        self.rank, self.world = rank, world


def _stitch(parts, name, plan0, cfg):
    """Reassemble one tensor from every rank's shard (padding and replicated KV heads dropped)."""
    spec = plan0.shard_spec(name)
    if spec is None:
        return parts[0]
    dim = spec[0]
    full = cfg.weight_shapes().get(name) or cfg.weight_shapes()["model.embed_tokens.weight"]
    out = np.zeros(full, np.float32)
    for r, p in enumerate(parts):
        _, b, e, _ = ShardPlan(cfg, plan0.world, r).shard_spec(name)
        if dim == 0:
            out[b:e] = p[:e - b]
        else:
            out[:, b:e] = p
    return out


# ----------------------------------------------------------------------------------- plan

def test_plan_spans_gqa_replication():
    cfg = named_config("tiny")  # 4 query heads, 2 KV heads, head_dim 16, intermediate 128, vocab 97
    spans = [ShardPlan(cfg, 4, r) for r in range(4)]
    assert [p.kv_first for p in spans] == [0, 0, 1, 1]  # each KV head on the 2 ranks whose q heads read it
    assert [p.span("q") for p in spans] == [(0, 16), (16, 32), (32, 48), (48, 64)]
    assert [p.span("kv") for p in spans] == [(0, 16), (0, 16), (16, 32), (16, 32)]
    assert [p.span("vocab") for p in spans] == [(0, 25), (25, 50), (50, 75), (75, 97)]
    assert spans[3].shard_shapes()["lm_head.weight"] == (25, 64)  # 22 rows + 3 zero rows
    assert spans[3].shard_shapes()["model.embed_tokens.weight"] == (25, 64)
    lc = spans[1].local_config()
    assert (lc.num_heads, lc.num_kv_heads, lc.intermediate_size, lc.vocab_size) == (1, 1, 32, 97)
    two = ShardPlan(cfg, 2, 1)
    assert (two.kv_first, two.kv_heads, two.span("kv"), two.span("inter")) == (1, 1, (16, 32), (64, 128))
    assert rule_of("model.layers.0.mlp.down_proj.weight") == (1, "inter")
    assert rule_of("model.norm.weight") is None


@pytest.mark.parametrize("world, msg", [
    (3, "do not divide the 4 attention heads"),
    (0, "positive integer"),
])
def test_plan_rejects(world, msg):
    with pytest.raises(TPError, match=msg):
        ShardPlan(named_config("tiny"), world, 0)


def test_plan_rejects_kv_and_mlp():
    import dataclasses

    base = named_config("tiny")
    with pytest.raises(TPError, match="do not divide the 3 KV heads"):
        ShardPlan(dataclasses.replace(base, num_heads=6, num_kv_heads=3), 2, 0)
    with pytest.raises(TPError, match="not a multiple of them"):
        ShardPlan(dataclasses.replace(base, num_heads=12, num_kv_heads=4, intermediate_size=96), 6, 0)
    with pytest.raises(TPError, match="intermediate_size 102"):
        ShardPlan(dataclasses.replace(base, intermediate_size=102), 4, 0)
    with pytest.raises(TPError, match="rank 2 is not in"):
        ShardPlan(base, 2, 2)


def test_world_size_mismatch():
    with pytest.raises(TPError, match="--tp 4 but the process group has 2 processes"):
        TensorParallel(named_config("tiny"), _FakeGroup(0, 2), world=4)


def test_no_multicast_env():
    env = set_no_multicast_env({"NCCL_NVLS_ENABLE": "1", "PATH": "x"})
    assert env == {**NO_MULTICAST_ENV, "PATH": "x"}
    assert NO_MULTICAST_ENV == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                                "NVSHMEM_DISABLE_NVLS": "1"}


# ---------------------------------------------------------------------------------- weights

@pytest.mark.parametrize("name, world", [("tiny", 4), ("tiny-llama", 2)])
def test_random_shards_are_slices_and_stitch(name, world):
    cfg, be = named_config(name), NumpyBackend()
    full = random_weights(cfg, be, "f32", seed=3)
    shards = [random_weights_shard(cfg, be, "f32", ShardPlan(cfg, world, r), seed=3) for r in range(world)]
    for r, sh in enumerate(shards):
        plan = ShardPlan(cfg, world, r)
        ref = shard_weights(full, plan, be)
        assert sh.keys() == ref.keys()
        for n in sh:
            assert sh[n].shape == plan.shard_shapes()[n], n
            np.testing.assert_array_equal(sh[n], ref[n], err_msg=n)
    plan0 = ShardPlan(cfg, world, 0)
    heads = {"lm_head.weight": full.get("lm_head.weight", full["model.embed_tokens.weight"])}
    for n, a in {**full, **heads}.items():
        np.testing.assert_array_equal(_stitch([s[n] for s in shards], n, plan0, cfg), a, err_msg=n)


def test_checkpoint_shard_reads_only_its_slices(tmp_path):
    cfg, be, world = named_config("tiny-llama"), NumpyBackend(), 2
    full = random_weights(cfg, be, "f32", seed=11)
    save_checkpoint(full, cfg, tmp_path, shards=2)
    total = sum(a.nbytes for a in full.values())
    replicated = sum(a.nbytes for n, a in full.items() if rule_of(n) is None)
    split_read = 0
    for r in range(world):
        plan, stats = ShardPlan(cfg, world, r), {}
        w = load_checkpoint_shard(cfg, tmp_path, be, "f32", plan, stats=stats)
        mine = stats["bytes_read"] - replicated  # about 1/N of the split tensors (vocab 97 splits 49 + 48)
        assert abs(mine - (total - replicated) / world) <= 2 * 64 * 4, (r, mine)
        split_read += mine
        for n, a in full.items():
            spec = plan.shard_spec(n)
            want = a if spec is None else (a[spec[1]:spec[2]] if spec[0] == 0 else a[:, spec[1]:spec[2]])
            assert stats["shapes"][n] == want.shape, n
            np.testing.assert_array_equal(w[n][:want.shape[0]], want, err_msg=n)
    assert split_read == total - replicated  # the ranks together read each split tensor once


# ------------------------------------------------------------------- TP=N vs TP=1 on gloo

PROMPTS = "5,17,3,88,42;9,60"
STEPS = 3


@functools.lru_cache(maxsize=None)
def _tp1(name):
    """The plain engine's run (cached: two tests compare with it; read only)."""
    from llm.engine import Engine

    cfg, be = named_config(name), NumpyBackend()
    w = random_weights(cfg, be, "f32", seed=0)
    eng = Engine(cfg, w, be, num_blocks=16, block_size=4, max_batch=2, max_seq_len=16, dtype="f32")
    prompts = [[int(t) for t in p.split(",")] for p in PROMPTS.split(";")]
    return eng.generate(prompts, STEPS, keep_logits=True, stop_on_eos=False)


@pytest.mark.parametrize("name, world", [("tiny-llama", 2), ("tiny", 4)])
def test_tp_gloo_matches_tp1(tmp_path, name, world):
    pytest.importorskip("torch.distributed")
    import torch.distributed as dist

    if not dist.is_gloo_available():
        pytest.skip("torch has no gloo backend")
    init = f"file://{tmp_path / 'pg'}"
    cmds = [[sys.executable, str(TP_RUN), name, "--random-weights", "--backend", "interp", "--dtype", "f32",
             "--prompt-ids", PROMPTS, "--max-new-tokens", str(STEPS), "--no-eos", "--block-size", "4",
             "--init-method", init, "--rank", str(r), "--world-size", str(world), "--tp", str(world),
             "--dump-logits", str(tmp_path / "logits{rank}.npy"), "--json"] for r in range(world)]
    outs, ref = _run_ranks(cmds, before_wait=lambda: _tp1(name))  # the plain engine while the ranks run
    import json

    got = json.loads(outs[0][1].strip().splitlines()[-1])
    assert got["tp"] == world and got["tokens"] == ref.tokens
    want = np.stack(ref.logits)
    scale = np.max(np.abs(want))
    for r in range(world):
        lg = np.load(tmp_path / f"logits{r}.npy")
        assert lg.shape == want.shape == (STEPS, 2, 97)
        err = float(np.max(np.abs(lg - want)) / scale)
        assert err <= 1e-5, (r, err)


def test_gloo_world1_collectives_and_engine(tmp_path):
    """TorchGroup on gloo with NumPy arrays (f32 and bf16 through their bits), world size 1: the
    sum and the gather leave the values as they are; a cuda group on gloo is refused; and TP=1
    through the distributed path (shard loader, all-reduces, logits gather, the unfused
    epilogue) gives the plain engine's tokens and logits (1e-5, f32)."""
    pytest.importorskip("torch.distributed")
    import torch.distributed as dist

    from llm.backend import numpy_dtype
    from llm.parallel import TorchGroup, init_group

    if not dist.is_gloo_available():
        pytest.skip("torch has no gloo backend")
    g = init_group(NumpyBackend(), f"file://{tmp_path / 'pg'}", rank=0, world=1)
    try:
        assert (g.rank, g.world) == (0, 1)
        rng = np.random.default_rng(0)
        for dt in ("f32", "bf16"):
            x = rng.standard_normal((3, 5)).astype(numpy_dtype(dt))
            before = x.copy()
            assert g.all_reduce(x) is x
            np.testing.assert_array_equal(x, before)
            y = g.all_gather_last(x)
            assert y.dtype == x.dtype and y.shape == (3, 5)
            np.testing.assert_array_equal(y, before)

        class _Gpu:
            def is_gpu(self):
                return True
        with pytest.raises(TPError, match="needs the nccl process group, got gloo"):
            TorchGroup(_Gpu())
        from llm.engine import Engine

        cfg, be = named_config("tiny"), NumpyBackend()
        tp = TensorParallel(cfg, g, world=1)
        eng = Engine(cfg, random_weights_shard(cfg, be, "f32", tp.plan, seed=0), be, num_blocks=16,
                     block_size=4, max_batch=2, max_seq_len=16, dtype="f32", tp=tp)
        prompts = [[int(t) for t in p.split(",")] for p in PROMPTS.split(";")]
        got = eng.generate(prompts, STEPS, keep_logits=True, stop_on_eos=False)
        ref = _tp1("tiny")
        assert got.tokens == ref.tokens
        want = np.stack(ref.logits)
        assert np.max(np.abs(np.stack(got.logits) - want)) <= 1e-5 * np.max(np.abs(want))
    finally:
        dist.destroy_process_group()


_COLLECTIVES = """
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
from llm.backend import NumpyBackend, numpy_dtype
from llm.parallel import init_group
g = init_group(NumpyBackend(), sys.argv[2], rank=int(sys.argv[3]), world=2)
out = {}
for dt in ("f32", "bf16"):
    x = (np.arange(6, dtype=np.float32).reshape(2, 3) * (g.rank + 1) + 0.25).astype(numpy_dtype(dt))
    out["sum_" + dt] = g.all_reduce(x).astype(np.float32)
    out["cat_" + dt] = g.all_gather_last(np.full((2, 2), g.rank + 0.5, numpy_dtype(dt))).astype(np.float32)
np.savez(sys.argv[4], **out)
"""


def test_gloo_collectives_two_processes(tmp_path):
    """all_reduce (sum, in place) and all_gather_last over 2 gloo processes, f32 and bf16."""
    pytest.importorskip("torch.distributed")
    init = f"file://{tmp_path / 'pg'}"
    _run_ranks([[sys.executable, "-c", _COLLECTIVES, str(ROOT / "examples"), init, str(r), str(tmp_path / f"c{r}.npz")]
                for r in range(2)], timeout=120)
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    for r in range(2):
        got = np.load(tmp_path / f"c{r}.npz")
        for dt in ("f32", "bf16"):
            np.testing.assert_array_equal(got["sum_" + dt], base * 3 + 0.5)  # exact in bf16 too
            np.testing.assert_array_equal(got["cat_" + dt], [[0.5, 0.5, 1.5, 1.5]] * 2)
