"""Generate with the tilex LLM engine over N tensor-parallel ranks (one process per GPU).

    torchrun --nproc_per_node=2 examples/llm/tp_run.py --config qwen2.5-14b --random-weights \\
        --prompt-ids 1,2,3 --max-new-tokens 32 --json
    torchrun --nproc_per_node=4 examples/llm/tp_run.py MODEL_DIR --prompt-ids 1,2,3
    torchrun --nproc_per_node=2 examples/llm/tp_run.py tiny --random-weights --backend interp \\
        --dtype f32 --prompt-ids "1,2,3;4,5" --max-new-tokens 4      # CPU: gloo + interpreter

Every rank loads only its shard (safetensors get_slice, or its part of the random weights:
the same ones TP=1 draws), runs the same steps (NCCL all-reduces inside each rank's decode
CUDA graph) and holds the same logits; the ranks' tokens are compared at the end (a
difference is an error); rank 0 prints. --tp N checks the launch (the world
size must be N). NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 are set before NCCL starts).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # import llm.* from examples/

from llm.parallel import set_no_multicast_env  # noqa: E402

set_no_multicast_env()  # before torch / NCCL read them

import torch.distributed as dist  # noqa: E402

from llm.backend import DTYPES, make_backend  # noqa: E402
from llm.config import ConfigError, load_config  # noqa: E402
from llm.engine import Engine  # noqa: E402
from llm.loader import checkpoint_dir  # noqa: E402
from llm.parallel import TensorParallel, TPError, init_group  # noqa: E402
from llm.tp_weights import load_checkpoint_shard, random_weights_shard  # noqa: E402
from llm.weights import WeightError  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", help="checkpoint directory, config.json, or named config")
    ap.add_argument("--config", help="named config or config.json (instead of MODEL)")
    ap.add_argument("--random-weights", action="store_true", help="Normal(0, 0.02) weights, as run.py")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids; ';' separates prompts")
    ap.add_argument("--batch", type=int, default=1, help="repeat the prompt(s) to this many sequences")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--no-eos", action="store_true")
    ap.add_argument("--tp", type=int, help="expected world size (an error when the launch differs)")
    ap.add_argument("--backend", choices=["cuda", "interp"], default="cuda")
    ap.add_argument("--dtype", choices=DTYPES, default="bf16")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--no-graph", action="store_true", help="decode without a CUDA graph")
    ap.add_argument("--init-method", help="torch.distributed init method (default: torchrun's env://)")
    ap.add_argument("--rank", type=int, help="with --init-method")
    ap.add_argument("--world-size", type=int, help="with --init-method")
    ap.add_argument("--dump-logits", metavar="FILE.npy",
                    help="logits [steps, batch, vocab] f32 of rank 0 (of every rank when the name has {rank})")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    args.model = args.model or args.config
    if not args.model:
        ap.error("give a model directory / config, or --config NAME")
    for opt, v in (("--batch", args.batch), ("--max-new-tokens", args.max_new_tokens),
                   ("--block-size", args.block_size)):
        if v < 1:
            ap.error(f"{opt} must be at least 1, got {v}")
    if args.tp is not None and args.tp < 1:
        ap.error(f"--tp must be at least 1, got {args.tp}")
    if args.init_method and (args.rank is None or args.world_size is None):
        ap.error("--init-method needs --rank and --world-size")
    return args


def parse_prompts(text: str, batch: int) -> list:
    try:
        prompts = [[int(t) for t in part.replace(" ", "").split(",") if t] for part in text.split(";")]
    except ValueError:
        raise SystemExit(f"error: --prompt-ids: not a list of integers: {text!r}") from None
    if any(not p for p in prompts):
        raise SystemExit("error: empty prompt")
    return [prompts[i % len(prompts)] for i in range(max(batch, len(prompts)))]


def build(args, backend, tp, prompts):
    """This rank's weights and engine (sized for `prompts` + max_new_tokens)."""
    cfg = tp.cfg
    if args.random_weights:
        weights = random_weights_shard(cfg, backend, args.dtype, tp.plan, seed=args.seed)
    else:
        weights = load_checkpoint_shard(cfg, checkpoint_dir(args.model), backend, args.dtype, tp.plan)
    bs = args.block_size
    num_blocks = 1 + sum(-(-(len(p) + args.max_new_tokens) // bs) for p in prompts)
    return Engine(cfg, weights, backend, num_blocks=num_blocks, block_size=bs, max_batch=len(prompts),
                  max_seq_len=max(len(p) for p in prompts) + args.max_new_tokens,
                  use_graph=not args.no_graph, dtype=args.dtype, tp=tp)


def main(argv=None) -> int:
    args = parse_args(argv)
    prompts = parse_prompts(args.prompt_ids, args.batch)
    try:
        backend = make_backend(args.backend)
        cfg = load_config(args.model)
        group = init_group(backend, args.init_method, args.rank, args.world_size)
        tp = TensorParallel(cfg, group, world=args.tp)
        engine = build(args, backend, tp, prompts)
    except (ConfigError, WeightError, TPError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    gen = dict(max_new_tokens=args.max_new_tokens, stop_on_eos=not args.no_eos)
    try:
        if backend.is_gpu():  # compile kernels and capture the graph on every rank
            engine.generate(prompts, **{**gen, "max_new_tokens": min(2, args.max_new_tokens)})
        t0 = time.perf_counter()
        res = engine.generate(prompts, keep_logits=bool(args.dump_logits), **gen)
        wall = time.perf_counter() - t0
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    every = [None] * tp.world  # the ranks must have generated the same tokens (same logits everywhere)
    dist.all_gather_object(every, res.tokens)
    if any(t != res.tokens for t in every):
        print(f"error: rank {tp.rank}: the ranks generated different tokens: {every}", file=sys.stderr)
        return 1
    if args.dump_logits and (tp.rank == 0 or "{rank}" in args.dump_logits):
        np.save(args.dump_logits.replace("{rank}", str(tp.rank)), np.stack(res.logits).astype(np.float32))
    if tp.rank != 0:
        return 0
    out = {"model": args.model, "backend": backend.name, "dtype": args.dtype, "tp": tp.world,
           "batch": len(prompts), "tokens": res.tokens, "finish_reasons": res.finish_reasons,
           "prefill_ms": res.prefill_ms, "decode_tok_s": res.decode_tok_s,
           "decode_tok_s_per_seq": res.decode_step_tok_s, "wall_s": wall, "cuda_graph": engine.use_graph}
    if backend.is_gpu():
        import torch

        out["peak_gpu_mem_gb_rank0"] = torch.cuda.max_memory_allocated() / 1e9
    if args.json:
        print(json.dumps(out))
    else:
        for i, t in enumerate(res.tokens):
            print(f"[{i}] {len(prompts[i])} prompt tokens -> {t} ({res.finish_reasons[i]})")
        print(f"TP={tp.world}: prefill {res.prefill_ms:.2f} ms; decode {res.decode_tok_s:.1f} tok/s")
    return 0


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    sys.exit(rc)
