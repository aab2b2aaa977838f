"""Benchmark: the tilex engine at TP=N (one process per GPU, NCCL), random weights per shard.

    torchrun --nproc_per_node=2 examples/llm/tp_bench.py --config llama3-70b --json tp2.json
    torchrun --nproc_per_node=8 examples/llm/tp_bench.py --config qwen2.5-14b
    torchrun --nproc_per_node=1 examples/llm/tp_bench.py --config qwen2.5-14b   # TP=1, distributed path

Measures on every rank (rank 0 prints the slowest rank's figure where they differ):
prefill 1x512 (ms, median of --reps), decode tok/s at batch 1, 16, 64 (prompts of
--decode-prompt-len, --decode-steps greedy steps in each rank's CUDA graph, EOS ignored);
the per-rank roofline of decode: (this rank's weight bytes + its KV bytes read per step) /
the device copy bandwidth measured here, and the fraction reached; the time of one decode
step's collectives alone (2 x layers + 1 all-reduces of [B, hidden] + the logits all-gather,
replayed from their own CUDA graph) as ms and as a fraction of the step.
Targets (issue 23, H200): 70B bs1 TP=2 >= 80% and TP=8 >= 55% of the per-rank roofline
(TP=8 >= 130 tok/s); 14B bs1 TP=2 >= 1.6x TP=1 (compare two runs' JSON).
NVLink multicast stays off (parallel.NO_MULTICAST_ENV is set before NCCL starts).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llm.parallel import set_no_multicast_env  # noqa: E402

set_no_multicast_env()

from llm.backend import TorchCudaBackend  # noqa: E402
from llm.bench import _median_ms, copy_bandwidth  # noqa: E402
from llm.config import load_config  # noqa: E402
from llm.engine import Engine, Sequence  # noqa: E402
from llm.parallel import TensorParallel, init_group  # noqa: E402
from llm.tp_weights import random_weights_shard  # noqa: E402


def collective_ms(torch, tp, cfg, batch, reps=20) -> float:
    """One decode step's collectives alone (captured in a graph, replayed): ms per step."""
    x = torch.zeros((batch, cfg.hidden_size), dtype=torch.bfloat16, device="cuda")
    lg = torch.zeros((batch, tp.plan.vocab_rows), dtype=torch.bfloat16, device="cuda")

    def step():
        for _ in range(2 * cfg.num_layers + 1):  # o_proj and down_proj per layer, the embedding
            tp.all_reduce(x)
        return tp.group.all_gather_last(lg)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    g.replay()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    for _ in range(reps):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps


def bench(cfg, tp, be, args, log):
    import torch

    rng = np.random.default_rng(0)
    batches = [int(b) for b in args.decode_batches.split(",") if b]
    ctx = args.decode_prompt_len + args.decode_steps + 1
    bs = 16
    max_batch = max(batches)
    num_blocks = max(args.prefill_len, max_batch * ctx) // bs + max_batch + 2
    weights = random_weights_shard(cfg, be, "bf16", tp.plan, seed=0)
    eng = Engine(cfg, weights, be, num_blocks=num_blocks, block_size=bs, max_batch=max_batch,
                 max_seq_len=max(args.prefill_len, ctx), use_graph=not args.no_graph, tp=tp)
    del weights
    # random shards draw each full tensor in f32 first (one at a time): the load peak is apart
    load_peak = torch.cuda.max_memory_allocated() / 1e9
    torch.cuda.reset_peak_memory_stats()
    wbytes = sum(be.nbytes(a) for a in eng.model.weight_arrays())
    # per step a rank reads its weights once (of its embedding shard only B rows: left out,
    # unless it is the tied LM head) and its KV heads of every context token
    m = eng.model
    wread = wbytes - (0 if m.embed is m.lm_head else be.nbytes(m.embed))
    local = tp.plan.local_config()
    out = {"weights_gb_per_rank": wbytes / 1e9, "kv_cache_gb_per_rank": eng.cache.nbytes / 1e9,
           "load_peak_gpu_mem_gb": load_peak,
           "prefill_ms": {}, "decode": {}}
    prompt = rng.integers(0, cfg.vocab_size, args.prefill_len).tolist()

    def prefill():
        seqs = [Sequence(list(prompt))]
        eng.prefill(seqs)
        eng.cache.release(seqs[0].blocks)
    prefill()  # compile
    out["prefill_ms"][f"1x{args.prefill_len}"] = ms = _median_ms(torch, prefill, args.reps)
    log(f"prefill 1x{args.prefill_len}: {ms:.2f} ms")
    bw = copy_bandwidth(torch)
    out["copy_bandwidth_gb_s"] = bw / 1e9
    for b in batches:
        prompts = [rng.integers(0, cfg.vocab_size, args.decode_prompt_len).tolist() for _ in range(b)]
        eng.generate(prompts, 3, stop_on_eos=False)  # compile + capture this batch's graph
        r = eng.generate(prompts, args.decode_steps + 1, stop_on_eos=False)
        step_ms = r.decode_ms / r.decode_steps
        avg_ctx = args.decode_prompt_len + args.decode_steps / 2
        per_step = wread + b * avg_ctx * local.kv_bytes_per_token(2)
        roof_step_ms = per_step / bw * 1e3
        coll = collective_ms(torch, tp, cfg, b)
        out["decode"][str(b)] = {"tok_s": r.decode_tok_s, "ms_per_step": step_ms,
                                 "roofline_ms_per_step": roof_step_ms,
                                 "fraction_of_rank_roofline": roof_step_ms / step_ms,
                                 "collectives_ms_per_step": coll, "collectives_fraction": coll / step_ms}
        log(f"decode bs{b}: {r.decode_tok_s:.1f} tok/s, {step_ms:.3f} ms/step, "
            f"{roof_step_ms / step_ms:.1%} of the rank roofline, collectives {coll:.3f} ms")
    out["peak_gpu_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9  # after loading
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="qwen2.5-14b", help="named config or config.json")
    ap.add_argument("--layers", type=int, help="override num_hidden_layers (quick runs)")
    ap.add_argument("--tp", type=int, help="expected world size (an error when the launch differs)")
    ap.add_argument("--prefill-len", type=int, default=512)
    ap.add_argument("--decode-batches", default="1,16,64")
    ap.add_argument("--decode-prompt-len", type=int, default=128)
    ap.add_argument("--decode-steps", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-graph", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="rank 0 also writes the results here")
    args = ap.parse_args(argv)
    import dataclasses

    import torch
    import torch.distributed as dist

    cfg = load_config(args.config)
    if args.layers:
        cfg = dataclasses.replace(cfg, num_layers=args.layers)
    be = TorchCudaBackend()
    tp = TensorParallel(cfg, init_group(be), world=args.tp)
    log = (lambda m: print(f"[rank 0] {m}", file=sys.stderr, flush=True)) if tp.rank == 0 else (lambda m: None)
    mine = bench(cfg, tp, be, args, log)
    every = [None] * tp.world
    dist.all_gather_object(every, mine)
    res = {"config": args.config, "layers": cfg.num_layers, "tp": tp.world,
           "gpu": torch.cuda.get_device_name(0), "cuda_graph": not args.no_graph,
           "decode_prompt_len": args.decode_prompt_len, "decode_steps": args.decode_steps,
           "rank0": every[0],
           "slowest_rank_decode_tok_s": {b: min(e["decode"][b]["tok_s"] for e in every) for b in mine["decode"]},
           "max_peak_gpu_mem_gb": max(e["peak_gpu_mem_gb"] for e in every)}
    if tp.rank == 0:
        text = json.dumps(res, indent=1)
        print(text)
        if args.json:
            Path(args.json).write_text(text)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
