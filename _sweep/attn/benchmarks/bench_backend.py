"""torch.compile(model, backend="tilex") vs eager and Inductor on one GPU (issue 19, item 5).

A Qwen2-shaped model built from a config with random weights (no network): prefill at 1x512
and 16x512 (ms per forward), compile time (first call) for each backend, peak memory, the
share of steps in generated vs library kernels, and the eager fallbacks tilex listed.
`tilex-cg` is the tilex backend with options={"cuda_graphs": True}, to compare with Inductor's
mode="reduce-overhead" (`inductor-ro`). Decode
with a static KV cache is NOT measured yet: the backend does not lower attention against a
cache (docs/backend.md, "Not done").

    python benchmarks/bench_backend.py --layers 4 [--hidden 3584 --heads 28 --kv-heads 4
        --inter 18944 --dtype bf16] [--json out.json]

The defaults are Qwen2.5-7B's shapes with 4 layers (one run fits a device call).
"""
from __future__ import annotations

import argparse
import json
import time

import torch


def build(args):
    import transformers

    cfg = transformers.Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.inter,
                                   num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                   num_key_value_heads=args.kv_heads, max_position_embeddings=4096,
                                   attn_implementation="sdpa")
    torch.manual_seed(0)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    return transformers.Qwen2ForCausalLM(cfg).eval().to(device="cuda", dtype=dtype)


def timed(fn, warmup=3, rep=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(rep):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / rep


def measure(name, model, ids_by_shape, compile_kwargs):
    import tilex.backend  # noqa: F401

    torch._dynamo.reset()
    progs = []
    kw = {}
    if compile_kwargs is None:
        fn = model
    else:
        kw = dict(compile_kwargs)
        if kw.get("backend") == "tilex":
            kw["options"] = {"programs": progs, **kw.get("options", {})}
        fn = torch.compile(model, **kw)
    row = {"name": name}
    with torch.no_grad():
        for shape, ids in ids_by_shape.items():
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            fn(ids, use_cache=False)
            torch.cuda.synchronize()
            row[f"first_call_s {shape}"] = round(time.perf_counter() - t0, 2)
            row[f"ms {shape}"] = round(timed(lambda: fn(ids, use_cache=False)), 3)
            row[f"peak_MiB {shape}"] = round(torch.cuda.max_memory_allocated() / 2 ** 20, 1)
    if progs and kw.get("backend") == "tilex":
        torch._dynamo.reset()  # one profiled run (synchronized per step) for the time shares
        pprogs = []
        pf = torch.compile(model, backend="tilex", options={"programs": pprogs, "profile": True})
        with torch.no_grad():
            for ids in ids_by_shape.values():
                pf(ids, use_cache=False)
        row["time_share"] = {k: round(v, 3) for k, v in pprogs[-1].time_shares().items()}
    if progs:
        p = progs[-1]
        kinds = {}
        for s in p.steps:
            kinds[s.kind] = kinds.get(s.kind, 0) + 1
        row["steps"] = kinds
        row["eager_fallbacks"] = sorted({t for _, t in p.fallbacks()})
        row["library_kernels"] = sorted({s.label for s in p.steps if s.kind == "library"})
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=3584)
    ap.add_argument("--heads", type=int, default=28)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--inter", type=int, default=18944)
    ap.add_argument("--vocab", type=int, default=152064)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--only", default="eager,inductor,inductor-ro,tilex,tilex-cg")
    ap.add_argument("--json")
    args = ap.parse_args()
    model = build(args)
    g = torch.Generator("cuda").manual_seed(1)
    ids = {f"{b}x512": torch.randint(0, args.vocab, (b, 512), device="cuda", generator=g) for b in (1, 16)}
    configs = {"eager": None, "inductor": {"backend": "inductor"},
               "inductor-ro": {"backend": "inductor", "mode": "reduce-overhead"},
               "tilex": {"backend": "tilex"},
               "tilex-cg": {"backend": "tilex", "options": {"cuda_graphs": True}}}
    rows = []
    for name in args.only.split(","):
        try:
            rows.append(measure(name, model, ids, configs[name]))
        except Exception as e:  # report and go on: one backend failing must not hide the others
            rows.append({"name": name, "error": f"{type(e).__name__}: {str(e)[:400]}"})
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
