"""Generate with the tilex LLM engine.

    python examples/llm/run.py MODEL_DIR_OR_CONFIG --prompt-ids 1,2,3 --max-new-tokens 16
    python examples/llm/run.py --random-weights --config qwen2.5-14b --prompt-ids 1,2,3 --json
    python examples/llm/run.py tiny --random-weights --backend interp --prompt-ids "1,2,3;4,5" --max-new-tokens 4

The weights come from the model directory's safetensors checkpoint; a missing or unreadable
one is an error unless --random-weights is given (named configs have no weights).

Several prompts: separate them with ';' in --prompt-ids, or repeat --prompt.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # import llm.* from examples/

from llm.backend import DTYPES, make_backend  # noqa: E402
from llm.config import ConfigError  # noqa: E402
from llm.engine import Engine  # noqa: E402
from llm.loader import TokenizerError, load_model  # noqa: E402
from llm.weights import WeightError  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", help="checkpoint directory, config.json, or named config")
    ap.add_argument("--config", help="named config (llama3-8b, qwen2.5-14b, tiny, tiny-llama) or config.json")
    ap.add_argument("--random-weights", action="store_true", help="Normal(0, 0.02) weights")
    ap.add_argument("--seed", type=int, default=0, help="weights (random) and sampling seed")
    ap.add_argument("--prompt-ids", help="comma-separated token ids; ';' separates prompts")
    ap.add_argument("--prompt", action="append", help="text (needs tokenizer.json); repeatable")
    ap.add_argument("--batch", type=int, default=1, help="repeat the prompt(s) to this many sequences")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--no-eos", action="store_true", help="do not stop at EOS")
    ap.add_argument("--backend", choices=["cuda", "interp", "auto"], default="auto")
    ap.add_argument("--dtype", choices=DTYPES, default="bf16")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--prefill-attention", choices=["paged", "dense"], default="dense",
                    help="prefill attention: dense (attention_prefill per sequence) or paged (attention_decode per token)")
    ap.add_argument("--mlp", choices=["auto", "gated_mlp", "silu_and_mul"], default="auto",
                    help="MLP kernels: gated_mlp (one kernel) or linear + silu_and_mul")
    ap.add_argument("--no-graph", action="store_true", help="decode without a CUDA graph")
    ap.add_argument("--no-fuse-qkv", action="store_true",
                    help="decode QKV as linear + rope + kv_cache_write instead of linear_qkv_rope_cache")
    ap.add_argument("--no-fuse-norm", action="store_true",
                    help="decode o/down_proj + residual + norm as linear + fused_add_rms_norm instead of linear_add_rms_norm")
    ap.add_argument("--graph-prefill", action="store_true",
                    help="also capture prefill in a CUDA graph (per prompt-length shape)")
    ap.add_argument("--no-warmup", action="store_true", help="time the first (compiling) run")
    ap.add_argument("--dump-logits", metavar="FILE.npy",
                    help="save logits [steps, batch, vocab] f32 (step 0 = prefill; NaN after a sequence ends)")
    ap.add_argument("--profile", action="store_true", help="time every kernel of prefill and one decode step")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    args.model = args.model or args.config
    if not args.model:
        ap.error("give a model directory / config, or --config NAME")
    for opt, value, least in (("--block-size", args.block_size, 1), ("--max-new-tokens", args.max_new_tokens, 1),
                              ("--batch", args.batch, 1)):
        if value < least:
            ap.error(f"{opt} must be at least {least}, got {value}")
    if not args.temperature >= 0:
        ap.error(f"--temperature must be >= 0 (0 = greedy), got {args.temperature}")
    if not 0 < args.top_p <= 1:
        ap.error(f"--top-p must be in (0, 1], got {args.top_p}")
    if args.dump_logits:  # checked before the run, not after generating
        parent = Path(args.dump_logits).resolve().parent
        if not parent.is_dir():
            ap.error(f"--dump-logits {args.dump_logits}: directory {parent} does not exist")
        if not os.access(parent, os.W_OK):
            ap.error(f"--dump-logits {args.dump_logits}: directory {parent} is not writable")
    return args


def prompts_from(args, tokenizer):
    prompts = []
    if args.prompt_ids:
        for part in args.prompt_ids.split(";"):
            try:
                prompts.append([int(t) for t in part.replace(" ", "").split(",") if t])
            except ValueError:
                raise SystemExit(f"error: --prompt-ids: not a list of integers: {part!r}") from None
    for text in args.prompt or []:
        if tokenizer is None:
            raise SystemExit("error: --prompt needs a tokenizer.json in the model directory; use --prompt-ids")
        prompts.append(tokenizer.encode(text).ids)
    if not prompts:
        raise SystemExit("error: give --prompt-ids or --prompt")
    if any(not p for p in prompts):
        raise SystemExit("error: empty prompt")
    if args.batch > len(prompts):
        prompts = [prompts[i % len(prompts)] for i in range(args.batch)]
    return prompts


def summarize_profile(records):
    by = {}
    for name, ms in records:
        c, t = by.get(name, (0, 0.0))
        by[name] = (c + 1, t + ms)
    return {"calls": len(records), "total_ms": sum(ms for _, ms in records),
            "by_function": {k: {"calls": c, "ms": t} for k, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1])}}


def cuda_kernel_list(engine, prompts, args):
    """One eager decode step under torch.profiler: every GPU kernel with its time."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except Exception:
        return None
    from llm.engine import Sequence

    seqs = [Sequence(list(p)) for p in prompts]
    try:
        engine.prefill(seqs)
        for s in seqs:
            s.tokens.append(0)
        use_graph, engine.use_graph = engine.use_graph, False
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            engine.decode_step(seqs, greedy=args.temperature <= 0)
            torch.cuda.synchronize()
        engine.use_graph = use_graph
    finally:
        for s in seqs:
            engine.cache.release(s.blocks)
    out = []
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            us = getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0)
            out.append((e.name, us / 1e3))
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        backend = make_backend(args.backend)
        cfg, weights, tok = load_model(args.model, backend, args.dtype, random=args.random_weights,
                                       seed=args.seed, need_tokenizer=bool(args.prompt))
    except (ConfigError, WeightError, TokenizerError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    prompts = prompts_from(args, tok)
    bs = args.block_size
    max_len = max(len(p) for p in prompts) + args.max_new_tokens
    num_blocks = 1 + sum(-(-(len(p) + args.max_new_tokens) // bs) for p in prompts)
    engine = Engine(cfg, weights, backend, num_blocks=num_blocks, block_size=bs,
                    max_batch=len(prompts), max_seq_len=max_len, use_graph=not args.no_graph,
                    prefill_attention=args.prefill_attention, dtype=args.dtype,
                    graph_prefill=args.graph_prefill, mlp=args.mlp, fuse_qkv=not args.no_fuse_qkv,
                    fuse_norm=not args.no_fuse_norm)
    gen = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
               seed=args.seed, stop_on_eos=not args.no_eos)
    try:
        if backend.is_gpu() and not args.no_warmup:  # compile kernels, capture the graph
            engine.generate(prompts, **{**gen, "max_new_tokens": min(2, args.max_new_tokens)})
        res = engine.generate(prompts, keep_logits=bool(args.dump_logits), **gen)
        prof = None
        if args.profile:
            prof = engine.generate(prompts, profile=True, **{**gen, "max_new_tokens": min(2, args.max_new_tokens)}).profile
            prof = {k: {"summary": summarize_profile(v), "calls": v} for k, v in prof.items()}
            if backend.is_gpu():
                kl = cuda_kernel_list(engine, prompts, args)
                if kl is not None:
                    prof["decode_kernels"] = kl
                    # tilex kernels are extern "C": plain identifiers; torch's are C++ names
                    # (host<->device copies are allowed: Memcpy/Memset are not kernels)
                    prof["non_tilex_kernels"] = sorted({n for n, _ in kl if not n.isidentifier()
                                                        and not n.startswith(("Memcpy", "Memset"))})
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.dump_logits:
        np.save(args.dump_logits, np.stack(res.logits).astype(np.float32))
    out = {
        "model": args.model, "backend": backend.name, "dtype": args.dtype, "batch": len(prompts),
        "prompt_lens": [len(p) for p in prompts], "tokens": res.tokens,
        "finish_reasons": res.finish_reasons, "prefill_ms": res.prefill_ms,
        "decode_ms": res.decode_ms, "decode_steps": res.decode_steps,
        "decode_tok_s": res.decode_tok_s, "decode_tok_s_per_seq": res.decode_step_tok_s,
        "cuda_graph": engine.use_graph,
    }
    if tok is not None:
        out["text"] = [tok.decode(t) for t in res.tokens]
    if backend.is_gpu():
        import torch

        out["peak_gpu_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
    if prof is not None:
        out["profile"] = prof
    if args.json:
        print(json.dumps(out))
        return 0
    for i, t in enumerate(res.tokens):
        line = f"[{i}] {len(prompts[i])} prompt tokens -> {t} ({res.finish_reasons[i]})"
        if tok is not None:
            line += f"\n    {out['text'][i]!r}"
        print(line)
    print(f"prefill {res.prefill_ms:.2f} ms; decode {res.decode_steps} steps, "
          f"{res.decode_tok_s:.1f} tok/s ({res.decode_step_tok_s:.1f} per sequence); "
          f"backend {backend.name}{' + CUDA graph' if engine.use_graph else ''}")
    if prof is not None:
        for phase in ("prefill", "decode"):
            s = prof[phase]["summary"]
            print(f"\n{phase}: {s['calls']} tilex.stdlib calls, {s['total_ms']:.3f} ms")
            for name, d in s["by_function"].items():
                print(f"  {name:<22} {d['calls']:>5} calls {d['ms']:>10.3f} ms")
        if "decode_kernels" in prof:
            kl = prof["decode_kernels"]
            print(f"\ndecode step, {len(kl)} GPU kernels (torch.profiler), "
                  f"{sum(ms for _, ms in kl):.3f} ms:")
            for name, ms in kl:
                print(f"  {ms:9.4f} ms  {name}")
            print("non-tilex kernels:", ", ".join(prof["non_tilex_kernels"]) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
