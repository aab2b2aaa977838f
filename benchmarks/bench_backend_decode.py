"""Decode with a static KV cache under torch.compile: eager, Inductor (default; `inductor-ro`: mode="reduce-overhead"),
tilex and tilex with cuda_graphs, on a Qwen2-shaped model (bench_backend.py's, random weights) at batch 1 and 16.

Per backend and batch: a fresh StaticCache, the prompt's prefill (in eager: only the decode graph is compiled, which
halves the compile time), then `--steps` decode forwards fed eager's greedy
tokens (teacher forcing, so every backend computes the same steps); correctness first: the max relative error of each
step's logits against eager's (PASS/FAIL at 2e-2 for bf16/f16, 1e-4 for f32) and the greedy tokens' agreement; then
tok/s over the timed steps (after 3 warm-up steps: compile, CUDA-graph capture), ratio to eager and to the Inductor
row with the same CUDA-graph use (tilex: inductor, tilex-cg: inductor-ro). Compiled with dynamic=False (static shapes,
as CUDA graphs want); one compiled model per backend serves both batches (a recompile each).

    python benchmarks/bench_backend_decode.py --layers 2 [--only eager,inductor,tilex,tilex-cg] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_backend import build, say  # noqa: E402

CONFIGS = {"eager": None, "inductor": {"backend": "inductor"},
           "inductor-ro": {"backend": "inductor", "mode": "reduce-overhead"},
           "tilex": {"backend": "tilex"}, "tilex-cg": {"backend": "tilex", "options": {"cuda_graphs": True}}}
SAME_MODE = {"tilex": "inductor", "tilex-cg": "inductor-ro"}   # the Inductor row with the same CUDA-graph use


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def run(fn, model, ids, tokens, warm: int):
    """(logits per step [steps, B, V], seconds of the steps after `warm`) feeding `tokens` [B, steps]."""
    import transformers

    b, prompt = ids.shape
    dev = ids.device.type
    steps = tokens.shape[1]
    cache = transformers.StaticCache(config=model.config, max_cache_len=prompt + steps + 16)
    out = model(ids, past_key_values=cache, cache_position=torch.arange(prompt, device=dev), use_cache=True)
    logits = [out.logits[:, -1].float()]
    t0 = None
    for i in range(steps - 1):
        if i == warm:
            _sync(dev)
            t0 = time.perf_counter()
        out = fn(tokens[:, i:i + 1], past_key_values=cache, cache_position=torch.tensor([prompt + i], device=dev),
                 use_cache=True)
        logits.append(out.logits[:, -1].float())
    _sync(dev)
    return torch.stack(logits), time.perf_counter() - t0, steps - 1 - warm


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=3584)
    ap.add_argument("--heads", type=int, default=28)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--inter", type=int, default=18944)
    ap.add_argument("--vocab", type=int, default=152064)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--only", default="eager,tilex,tilex-cg,inductor,inductor-ro")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--device", default="cuda", help="cuda; cpu for a smoke run of a tiny shape (interpreter)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.steps < 5:  # 3 warm-up steps (compile, CUDA-graph capture), then at least one timed step
        ap.error(f"--steps must be at least 5 (3 warm-up steps after the prompt's first token, then timed ones); "
                 f"got {args.steps}")
    import tilex.backend  # noqa: F401

    dev = args.device
    say(f"building the model ({args.layers} layers, hidden {args.hidden}, {args.dtype}) and eager's tokens ...")
    model = build(args)
    tol = 1e-4 if args.dtype == "f32" else 2e-2
    rows = []
    refs = {}
    for batch in (int(x) for x in args.batches.split(",")):
        g = torch.Generator(dev).manual_seed(batch)
        ids = torch.randint(0, args.vocab, (batch, args.prompt), device=dev, generator=g)
        with torch.no_grad():  # eager's greedy tokens, fed to every backend
            import transformers

            cache = transformers.StaticCache(config=model.config, max_cache_len=args.prompt + args.steps + 16)
            out = model(ids, past_key_values=cache, cache_position=torch.arange(args.prompt, device=dev),
                        use_cache=True)
            toks = []
            for i in range(args.steps):
                toks.append(out.logits[:, -1:].argmax(-1))
                out = model(toks[-1], past_key_values=cache,
                            cache_position=torch.tensor([args.prompt + i], device=dev), use_cache=True)
            refs[batch] = (ids, torch.cat(toks, 1))
    tok_s: dict = {}
    eager_logits: dict = {}
    for name in args.only.split(","):
        torch._dynamo.reset()
        kw = CONFIGS[name]
        fn = model if kw is None else torch.compile(model, dynamic=False, **kw)
        for batch, (ids, tokens) in refs.items():
            say(f"{name}: decode b{batch} ...")
            t0 = time.perf_counter()
            try:
                with torch.no_grad():
                    logits, secs, n = run(fn, model, ids, tokens, warm=3)
            except Exception as e:  # noqa: BLE001 - report and go on
                rows.append({"name": name, "batch": batch, "error": f"{type(e).__name__}: {str(e)[:300]}"})
                print(json.dumps(rows[-1]), flush=True)
                continue
            row = {"name": name, "batch": batch, "tok_s": round(batch * n / secs, 1),
                   "ms_per_step": round(1e3 * secs / n, 3), "row_s": round(time.perf_counter() - t0, 1)}
            if name == "eager":
                eager_logits[batch] = logits
            if batch in eager_logits:
                ref = eager_logits[batch]
                err = float(((logits - ref).abs().amax(-1) / ref.abs().amax(-1)).max())
                row["max_rel_err_vs_eager"] = float(f"{err:.3g}")
                row["greedy_agree"] = round(float((logits.argmax(-1) == ref.argmax(-1)).float().mean()), 4)
                row["verdict"] = "PASS" if err <= tol else "FAIL"
            tok_s[(name, batch)] = row["tok_s"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    for row in rows:  # ratios once every row is in
        for other in ("eager", SAME_MODE.get(row["name"])):
            if "tok_s" in row and (other, row["batch"]) in tok_s and other != row["name"]:
                row[f"vs_{other}"] = round(row["tok_s"] / tok_s[(other, row["batch"])], 3)
        print("summary", json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
