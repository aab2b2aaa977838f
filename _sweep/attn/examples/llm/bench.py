"""Benchmark: tilex engine vs transformers (eager, same bf16 weights) on one GPU.

    python examples/llm/bench.py --config qwen2.5-14b --json bench.json
    python examples/llm/bench.py --config llama3-8b --no-hf

Measures: prefill latency 1x512 and 16x512 (ms, median), decode tok/s at batch 1, 16, 64
(prompts of --decode-prompt-len, --decode-steps greedy steps, EOS ignored), peak GPU
memory of the tilex run against weights + KV cache, and decode at batch 1 as a fraction of
its roofline: (bytes of weights + KV read per token) / measured device copy bandwidth.
Targets (issue 5, Qwen2.5-14B shape): decode bs1 >= 116 tok/s, prefill 1x512 < 37 ms,
peak memory within 10% of weights + KV.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llm.backend import TorchCudaBackend  # noqa: E402
from llm.config import load_config  # noqa: E402
from llm.engine import Engine, Sequence  # noqa: E402
from llm.weights import random_weights  # noqa: E402


def copy_bandwidth(torch, nbytes=2 << 30, reps=20) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + write counted)."""
    a = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    bw = 2 * nbytes * reps / (s.elapsed_time(e) / 1e3)
    del a, b
    return bw


def _median_ms(torch, fn, reps):
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def bench_tilex(cfg, weights, be, args, prefill_shapes, decode_batches, log):
    import torch

    rng = np.random.default_rng(0)
    bs = 16
    max_tokens = max([b * s for b, s in prefill_shapes] +
                     [b * (args.decode_prompt_len + args.decode_steps + 1) for b in decode_batches])
    max_len = max([s for _, s in prefill_shapes] + [args.decode_prompt_len + args.decode_steps + 1])
    max_batch = max([b for b, _ in prefill_shapes] + list(decode_batches))
    num_blocks = max_tokens // bs + max_batch + 1
    eng = Engine(cfg, weights, be, num_blocks=num_blocks, block_size=bs, max_batch=max_batch,
                 max_seq_len=max_len, use_graph=not args.no_graph,
                 prefill_attention=args.prefill_attention, mlp=args.mlp, fuse_qkv=not args.no_fuse_qkv,
                 fuse_norm=not args.no_fuse_norm)
    out = {"kv_cache_gb": eng.cache.nbytes / 1e9, "prefill_ms": {}, "decode": {}}
    for b, s in prefill_shapes:
        prompts = [rng.integers(0, cfg.vocab_size, s).tolist() for _ in range(b)]

        def run():
            seqs = [Sequence(p) for p in prompts]
            eng.prefill(seqs)
            for q in seqs:
                eng.cache.release(q.blocks)
        run()  # compile
        out["prefill_ms"][f"{b}x{s}"] = ms = _median_ms(torch, run, args.reps)
        log(f"tilex prefill {b}x{s}: {ms:.2f} ms")
        if eng.use_graph:  # the same, replayed from a CUDA graph (no per-launch host cost)
            eng.graph_prefill = True
            run()  # capture
            out.setdefault("prefill_graph_ms", {})[f"{b}x{s}"] = ms = _median_ms(torch, run, args.reps)
            eng.graph_prefill = False
            log(f"tilex prefill {b}x{s} (CUDA graph): {ms:.2f} ms")
    for b in decode_batches:
        prompts = [rng.integers(0, cfg.vocab_size, args.decode_prompt_len).tolist() for _ in range(b)]
        eng.generate(prompts, 4, stop_on_eos=False)  # compile + capture the graph
        r = eng.generate(prompts, args.decode_steps + 1, stop_on_eos=False)
        out["decode"][str(b)] = {"tok_s": r.decode_tok_s, "steps_s": r.decode_step_tok_s,
                                 "ms_per_step": r.decode_ms / r.decode_steps}
        log(f"tilex decode bs{b}: {r.decode_tok_s:.1f} tok/s ({r.decode_ms / r.decode_steps:.2f} ms/step)")
    torch.cuda.synchronize()
    out["peak_gpu_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
    out["weights_gb"] = sum(be.nbytes(a) for a in eng.model.weight_arrays()) / 1e9
    return eng, out


def bench_hf(cfg, weights, args, prefill_shapes, decode_batches, log):
    import torch

    from llm.hf import build_hf_model

    model = build_hf_model(cfg, weights, dtype="bf16", share=True)
    rng = np.random.default_rng(0)
    out = {"prefill_ms": {}, "decode": {}}
    with torch.no_grad():
        for b, s in prefill_shapes:
            x = torch.tensor(rng.integers(0, cfg.vocab_size, (b, s)), device="cuda")
            fn = lambda: model(input_ids=x, use_cache=False, logits_to_keep=1)  # noqa: E731
            fn()
            out["prefill_ms"][f"{b}x{s}"] = ms = _median_ms(torch, fn, args.reps)
            log(f"transformers prefill {b}x{s}: {ms:.2f} ms")
        for b in decode_batches:
            x = torch.tensor(rng.integers(0, cfg.vocab_size, (b, args.decode_prompt_len)), device="cuda")

            def run(steps):
                o = model(input_ids=x, use_cache=True, logits_to_keep=1)
                pkv, nxt = o.past_key_values, o.logits[:, -1].argmax(-1, keepdim=True)
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(steps):
                    o = model(input_ids=nxt, past_key_values=pkv, use_cache=True, logits_to_keep=1)
                    pkv, nxt = o.past_key_values, o.logits[:, -1].argmax(-1, keepdim=True)
                    nxt.cpu()  # the engine reads each token on the host too
                torch.cuda.synchronize()
                return (time.perf_counter() - t) * 1e3
            run(2)
            ms = run(args.decode_steps)
            out["decode"][str(b)] = {"tok_s": b * args.decode_steps / (ms / 1e3),
                                     "ms_per_step": ms / args.decode_steps}
            log(f"transformers decode bs{b}: {out['decode'][str(b)]['tok_s']:.1f} tok/s")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="qwen2.5-14b")
    ap.add_argument("--layers", type=int, help="override num_hidden_layers")
    ap.add_argument("--prefill", default="1x512,16x512", help="BxS list")
    ap.add_argument("--decode-batches", default="1,16,64")
    ap.add_argument("--decode-prompt-len", type=int, default=128)
    ap.add_argument("--decode-steps", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prefill-attention", choices=["paged", "dense"], default="dense",
                    help="prefill attention: dense (attention_prefill per sequence) or paged (attention_decode per token)")
    ap.add_argument("--no-graph", action="store_true")
    ap.add_argument("--mlp", choices=["auto", "gated_mlp", "silu_and_mul"], default="auto")
    ap.add_argument("--no-fuse-qkv", action="store_true",
                    help="decode QKV as linear + rope + kv_cache_write instead of linear_qkv_rope_cache")
    ap.add_argument("--no-fuse-norm", action="store_true",
                    help="decode o/down_proj + residual + norm as linear + fused_add_rms_norm instead of linear_add_rms_norm")
    ap.add_argument("--no-hf", action="store_true", help="tilex only")
    ap.add_argument("--json", metavar="FILE", help="also write the results here")
    args = ap.parse_args(argv)
    import torch

    cfg = load_config(args.config)
    if args.layers:
        import dataclasses

        cfg = dataclasses.replace(cfg, num_layers=args.layers)
    prefill_shapes = [tuple(int(v) for v in p.split("x")) for p in args.prefill.split(",") if p]
    decode_batches = [int(b) for b in args.decode_batches.split(",") if b]
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    res = {"config": args.config, "layers": cfg.num_layers, "gpu": torch.cuda.get_device_name(0),
           "prefill_attention": args.prefill_attention, "cuda_graph": not args.no_graph, "mlp": args.mlp,
           "decode_prompt_len": args.decode_prompt_len, "decode_steps": args.decode_steps}
    bw = copy_bandwidth(torch)
    res["copy_bandwidth_gb_s"] = bw / 1e9
    be = TorchCudaBackend()
    weights = random_weights(cfg, be, "bf16", seed=0)
    torch.cuda.reset_peak_memory_stats()
    eng, tl = bench_tilex(cfg, weights, be, args, prefill_shapes, decode_batches, log)
    res["tilex"] = tl
    # roofline of decode at batch 1: every weight byte (embedding: one row) + the KV read
    emb = cfg.vocab_size * cfg.hidden_size * 2
    wbytes = tl["weights_gb"] * 1e9 - (0 if cfg.tie_word_embeddings else emb) + cfg.hidden_size * 2
    ctx = args.decode_prompt_len + args.decode_steps / 2
    per_tok = wbytes + ctx * cfg.kv_bytes_per_token(2)
    roof = bw / per_tok
    if "1" in tl["decode"]:
        res["decode_bs1_roofline_tok_s"] = roof
        res["decode_bs1_fraction_of_roofline"] = tl["decode"]["1"]["tok_s"] / roof
    res["peak_vs_weights_plus_kv"] = tl["peak_gpu_mem_gb"] / (tl["weights_gb"] + tl["kv_cache_gb"])
    del eng
    gc.collect()
    torch.cuda.empty_cache()
    if not args.no_hf:
        torch.cuda.reset_peak_memory_stats()
        res["transformers"] = bench_hf(cfg, weights, args, prefill_shapes, decode_batches, log)
        gc.collect()
        res["transformers"]["peak_gpu_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
    # prefill: faster than transformers eager measured in this run (the 37 ms when
    # transformers was not run)
    ours = min(tl["prefill_ms"].get("1x512", 1e9), tl.get("prefill_graph_ms", {}).get("1x512", 1e9))
    theirs = res.get("transformers", {}).get("prefill_ms", {}).get("1x512", 37.0)
    tg = {"decode_bs1_tok_s>=116": tl["decode"].get("1", {}).get("tok_s", 0) >= 116,
          f"prefill_1x512_ms<{theirs:.1f}": ours < theirs,
          "peak_within_10pct": res["peak_vs_weights_plus_kv"] <= 1.10}
    res["targets_met"] = tg
    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
