"""Where a warm start of torch.compile(..., backend="tilex") spends its time (issue 19: second process, first
forward within 5 s of import). Runs tests/test_backend_cache.py's small model (two library GEMMs, a
softmax, three generated kernels; `--model qwen2`: the tiny transformers Qwen2 instead) in a cold child
process (fills a fresh cache directory), then in a warm one under cProfile and a warm one without it.
Each prints a timeline, wall and CPU seconds (import torch, import torch._dynamo, import tilex.backend,
then the first compiled call), that call split into Dynamo's trace, AOTAutograd's trace, tilex's lowering, its
kernel builds, the first run of the program, the cache record written after it, and the rest; then the profiled warm process's functions with the most cumulative and
own time. On CUDA with `--cuda` (the GPU test's case), else on CPU.

    python benchmarks/profile_warm_start.py [--cuda] [--model small|qwen2] [--top 30] [--pycache]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

CHILD = textwrap.dedent('''
    import sys, time
    t0 = time.perf_counter()
    marks = []
    c0 = time.process_time()
    def mark(what):
        marks.append((what, time.perf_counter() - t0, time.process_time() - c0))
    import torch
    mark("import torch")
    import torch._dynamo
    mark("import torch._dynamo")
    import tilex.backend
    mark("import tilex.backend")
    dev = "cuda" if CUDA else "cpu"
    g = torch.Generator().manual_seed(0)
    if MODEL == "qwen2":
        sys.path.insert(0, TESTS)
        from test_backend_hf import tiny
        mark("import transformers")
        model = tiny("qwen2").to(dev)
        x = torch.randint(0, 96, (1, 16), generator=g).to(dev)
        f = lambda m: m(x, use_cache=False).logits
    else:
        import torch.nn.functional as F
        w1, w2 = torch.randn(48, 32, generator=g).to(dev), torch.randn(32, 48, generator=g).to(dev)
        def model(x):
            h = F.linear(x, w1)
            h = torch.sigmoid(h) * h * 0.5 + 1.0
            y = F.linear(h, w2) - x.amax(-1, keepdim=True)
            return torch.softmax(y, -1) * torch.tanh(y)
        x = torch.randn(5, 32, generator=g).to(dev)
        f = lambda m: m(x)
    if CUDA:
        torch.cuda.init()
        torch.empty(1, device="cuda")
        mark("CUDA context")
    mark("model built")
    progs = []
    cm = torch.compile(model, backend="tilex", options={"programs": progs})
    t_call = time.perf_counter()
    with torch.no_grad():
        out = f(cm)
    if CUDA:
        torch.cuda.synchronize()
    mark("first compiled call")
    t_done = time.perf_counter()
    with torch.no_grad():
        f(cm)
    if CUDA:
        torch.cuda.synchronize()
    mark("second call")
    prev = cprev = 0.0
    for what, t, c in marks:  # wall seconds, and this process's CPU seconds (less sensitive to a loaded machine)
        print(f"  {t:7.2f} s  (+{t - prev:5.2f})  cpu {c:6.2f} s (+{c - cprev:5.2f})  {what}", file=sys.stderr)
        prev, cprev = t, c
    b = [p.build_stats for p in progs]  # the first compiled call, split (every graph of it summed)
    split = {"dynamo": b[0]["backend_entered"] - t_call, "aot": sum(x["aot_s"] for x in b),
             "tilex lower": sum(x["lower_s"] for x in b), "tilex builds": sum(x["seconds"] for x in b),
             "first run": sum(x.get("first_run_s", 0.0) for x in b),
             "record": sum(x.get("after_first_call_s", 0.0) for x in b)}
    split["rest"] = (t_done - t_call) - sum(split.values())
    print("  first compiled call: " + ", ".join(f"{k} {v:.2f} s" for k, v in split.items()), file=sys.stderr)
    print("  cache:", progs[0].cache.get("stats"), "build:", {k: v for k, v in progs[0].build_stats.items()
          if k in ("builds", "seconds", "lower_s")}, file=sys.stderr)
''')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("--model", default="small", choices=["small", "qwen2"])
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--pycache", action="store_true", help="Python's bytecode cache under the temporary cache "
                    "directory (PYTHONPYCACHEPREFIX): for a host whose site-packages take no .pyc files")
    args = ap.parse_args()
    tests = str(Path(__file__).resolve().parent.parent / "tests")
    src = f"CUDA = {args.cuda}\nMODEL = {args.model!r}\nTESTS = {tests!r}\n" + CHILD
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "child.py"
        script.write_text(src)
        env = dict(os.environ, TILEX_CACHE_DIR=str(Path(d) / "cache"))
        if args.pycache:
            env["PYTHONPYCACHEPREFIX"] = str(Path(d) / "pycache")
        for name, extra in (("cold", []), ("warm", ["-m", "cProfile", "-o", str(Path(d) / "warm.prof")]),
                            ("warm, no profiler", [])):
            print(f"== {name} process", flush=True)
            proc = subprocess.run([sys.executable, *extra, str(script)], env=env, capture_output=True, text=True,
                                  timeout=900)
            print("\n".join(line for line in proc.stderr.splitlines() if line.startswith("  ")))
            if proc.returncode:
                print(proc.stderr[-3000:])
                return 1
        import pstats

        st = pstats.Stats(str(Path(d) / "warm.prof"))
        print(f"== warm process: top {args.top} by cumulative time")
        st.sort_stats("cumulative").print_stats(args.top)
        print(f"== warm process: top {args.top} by own time")
        st.sort_stats("tottime").print_stats(args.top)
        print("== warm process: tilex functions by cumulative time")
        st.sort_stats("cumulative").print_stats(r"tilex|transpiler|cupy", args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
