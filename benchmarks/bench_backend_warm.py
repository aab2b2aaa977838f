"""Warm start and memory of torch.compile(model, backend="tilex") (issue 19, items 1 and 2), one GPU.

Runs the same Qwen2-shaped model (a config, random weights, no network) in two fresh processes
under one new cache directory: each prints the seconds from before `import torch` to the end of its
first compiled forward (prefill BxS), split into the imports (torch, transformers, tilex.backend), building
the model, and the first compiled call: Dynamo's trace, AOTAutograd's trace, tilex's lowering, its kernel
builds, the program's first run, the cache record written after it, the rest (Dynamo's own work after the
backend returns); the configuration choices read from / written to the cache (tuning/), what the graph cache says (kernels reused / built, cubins
compiled, translations done), and the peak memory of the compiled forward (the arena on and off)
next to eager's, all as torch.cuda.max_memory_allocated above what the weights and inputs hold.

    python benchmarks/bench_backend_warm.py [--layers 4 --batch 1 --seq 512 --dtype bf16] [--json out.json]

Target (issue 19): the second process builds 0 kernels and finishes its first forward within 5 s of import.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch, transformers, tilex.backend
t_import = time.perf_counter() - t0
from tilex.backend import cache as C, choices as CH
from tilex import translation_cache as T
a = json.loads(sys.argv[1])
cfg = transformers.Qwen2Config(vocab_size=a["vocab"], hidden_size=a["hidden"], intermediate_size=a["inter"],
                               num_hidden_layers=a["layers"], num_attention_heads=a["heads"],
                               num_key_value_heads=a["kv_heads"], max_position_embeddings=4096,
                               attn_implementation="sdpa")
torch.manual_seed(0)
dt = {"bf16": torch.bfloat16, "f32": torch.float32}[a["dtype"]]
with torch.device("cuda"):  # random init on the GPU (on the CPU it takes seconds)
    model = transformers.Qwen2ForCausalLM(cfg).eval().to(dtype=dt)
ids = torch.randint(0, a["vocab"], (a["batch"], a["seq"]), device="cuda")
t_model = time.perf_counter() - t0
progs = []
cm = torch.compile(model, backend="tilex", options={"programs": progs, "arena": a["arena"]})
t_call = time.perf_counter()
with torch.no_grad():
    out = cm(ids, use_cache=False).logits
torch.cuda.synchronize()
t_done = time.perf_counter()
first = t_done - t0
b = [p.build_stats for p in progs]  # the first compiled call, split (every graph of it summed)
split = {"dynamo_s": b[0]["backend_entered"] - t_call, "aot_s": sum(x["aot_s"] for x in b),
         "lower_s": sum(x["lower_s"] for x in b), "builds_s": sum(x["seconds"] for x in b),
         "graph_load_in_lower_s": sum(p.cache.get("load_s", 0.0) for p in progs),
         "first_run_s": sum(x.get("first_run_s", 0.0) for x in b),
         "record_s": sum(x.get("after_first_call_s", 0.0) for x in b)}
split["rest_s"] = (t_done - t_call) - sum(v for k, v in split.items() if "_in_lower" not in k)

def peak(fn):
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
    with torch.no_grad():
        r = fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base, r
p_tilex, got = peak(lambda: cm(ids, use_cache=False).logits)
p_eager, ref = peak(lambda: model(ids, use_cache=False).logits)
p = progs[0]
plan = p.arena.last_plan if p.arena is not None else None
print(json.dumps({"first_forward_s": first, "import_s": t_import, "model_built_s": t_model,
                  "compile_first_forward_s": first - t_model, "split": split, "choices": CH.STATS,
                  "cache": p.cache,
                  "generated": C.STATS, "translations": T.STATS,
                  "peak_bytes_tilex": p_tilex, "peak_bytes_eager": p_eager,
                  "arena_bytes": plan.arena_bytes if plan else None, "arena_naive_bytes": plan.naive_bytes if plan else None,
                  "placed": len(p.arena.placed) if p.arena else 0,
                  "rel_err": float((got.float() - ref.float()).abs().max() / ref.float().abs().max())}))
"""


def child(args, cache_dir, arena=True):
    a = dict(vars(args), arena=arena)
    a.pop("json", None)
    env = dict(os.environ, TILEX_CACHE_DIR=cache_dir)
    if args.pycache:  # Python's bytecode cache there too: a host whose site-packages takes no .pyc files
        env["PYTHONPYCACHEPREFIX"] = os.path.join(cache_dir, "pycache")
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(a)], env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.stderr.write(proc.stderr[-6000:])
        raise SystemExit(f"child failed ({proc.returncode})")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    r["process_s"] = time.perf_counter() - t
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=3584)
    ap.add_argument("--heads", type=int, default=28)
    ap.add_argument("--kv-heads", dest="kv_heads", type=int, default=4)
    ap.add_argument("--inter", type=int, default=18944)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--pycache", action="store_true", help="PYTHONPYCACHEPREFIX under the cache directory (for a "
                    "host whose site-packages takes no .pyc: else every process compiles torch's sources)")
    ap.add_argument("--skip-no-arena", action="store_true", help="no third process (warm, arena off)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tilex-warm-") as d:
        runs = {"cold": child(args, d), "warm": child(args, d)}
        if not args.skip_no_arena:
            runs["warm_no_arena"] = child(args, d, arena=False)
    for k, r in runs.items():
        st = r["cache"].get("stats", {})
        print(f"{k:14s} first forward {r['first_forward_s']:6.2f} s from import (imports {r['import_s']:.2f} s, model "
              f"built at {r['model_built_s']:.2f} s, compile + first forward {r['compile_first_forward_s']:.2f} s: "
              + ", ".join(f"{n[:-2]} {v:.2f}" for n, v in r["split"].items()) + f"); choices {r['choices']}; "
              f"graph {'hit' if r['cache']['hit'] else 'miss'}: {st.get('reused')} kernels reused, {st.get('built')} built, "
              f"{st.get('cubins_built')} cubins compiled; translations {r['translations']}; peak MiB tilex "
              f"{r['peak_bytes_tilex'] / 2**20:.1f} vs eager {r['peak_bytes_eager'] / 2**20:.1f} (arena "
              f"{(r['arena_bytes'] or 0) / 2**20:.1f} of {(r['arena_naive_bytes'] or 0) / 2**20:.1f} without reuse); "
              f"rel err {r['rel_err']:.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
