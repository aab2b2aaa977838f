"""Per-kernel GPU time of one compiled forward: tilex backend vs Inductor (issue 19's prefill gap).

A Qwen2-shaped model (random weights, built on the GPU, bf16), compiled by Inductor (default mode) and by
the tilex backend (no CUDA graphs: kernel times are the same inside a graph). For each shape:
  1. correctness: logits of each against eager f32-free bf16 eager (max abs error, and eager bf16's own
     error against an f32 copy of the model when --f32-ref), PASS/FAIL at 1.25x eager bf16's error;
  2. timing of whole forwards, CUDA events, median of --rep after warm-up: eager, inductor, tilex, and
     with CUDA graphs inductor mode="reduce-overhead" and tilex cuda_graphs (same process);
  3. torch.profiler over --prof forwards of inductor and of tilex: a per-kernel table (name, launches per
     forward, us per forward, share), sorted by time, and the sum of kernel time per forward.

    python benchmarks/prof_backend_kernels.py --layers 2 [--shapes 1x512,16x512] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_backend import build  # noqa: E402  (its model, built on --device in bf16)


def say(*parts):
    print(f"[prof {time.strftime('%H:%M:%S')}]", *parts, file=sys.stderr, flush=True)


def median_ms(fn, warmup=3, rep=20):
    for _ in range(warmup):
        fn()
    if not torch.cuda.is_available():  # the CPU smoke run (--device cpu): wall time
        times = []
        for _ in range(rep):
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
        return sorted(times)[len(times) // 2]
    torch.cuda.synchronize()
    times = []
    for _ in range(rep):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def short(name: str) -> str:
    name = re.sub(r"\(.*", "", name)          # C++ signatures
    name = re.sub(r"<.*", "", name)           # templates
    return name[:60]


def kernel_table(fn, n: int):
    """{kernel name: (launches, total us)} per call over n calls of fn (kernel_kinds.profile_kernels), with the
    names cut to their first 60 characters before any signature or template (kernels that then share a name add up)."""
    from tilex.backend.kernel_kinds import profile_kernels

    if not torch.cuda.is_available():
        return {}
    table: dict = {}
    for name, (c, t) in profile_kernels(fn, n).items():
        c0, t0 = table.get(short(name), (0.0, 0.0))
        table[short(name)] = (c0 + c, t0 + t)
    return table


def print_table(title, table):
    from tilex.backend.kernel_kinds import kind, shares

    total = sum(t for _, t in table.values()) or 1.0
    print(f"\n## {title}: {sum(c for c, _ in table.values()):.0f} kernels, {total:.1f} us of kernel time per forward")
    print("by kind (us, share): " + ", ".join(f"{k} {us} ({100 * sh:.1f}%)" for k, (us, sh) in
                                           shares({n: t for n, (_, t) in table.items()}).items()))
    print("| kernel | kind | launches/fwd | us/fwd | share |\n| --- | --- | --- | --- | --- |")
    for k, (c, t) in sorted(table.items(), key=lambda kv: -kv[1][1]):
        print(f"| {k} | {kind(k)} | {c:.0f} | {t:.1f} | {100 * t / total:.1f}% |")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=3584)
    ap.add_argument("--heads", type=int, default=28)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--inter", type=int, default=18944)
    ap.add_argument("--vocab", type=int, default=152064)
    ap.add_argument("--shapes", default="1x512,16x512")
    ap.add_argument("--prof", type=int, default=5, help="profiled forwards per backend (default 5)")
    ap.add_argument("--budget", type=float, default=130.0, help="skip later shapes after this many seconds")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the script (tiny sizes; no kernel table)")
    ap.add_argument("--rep", type=int, default=20)
    ap.add_argument("--backends", default="inductor,tilex", help="compiled rows (default inductor,tilex; "
                    "tilex alone skips Inductor's compiles: eager is then the only baseline)")
    ap.add_argument("--json")
    args = ap.parse_args()
    t_start = time.perf_counter()
    import tilex.backend  # noqa: F401

    say("building the model ...")
    model = build(args)
    g = torch.Generator(args.device).manual_seed(1)
    out = {"args": vars(args), "shapes": {}}
    for shape in args.shapes.split(","):
        if time.perf_counter() - t_start > args.budget * 0.6 and out["shapes"]:
            say(f"{shape}: skipped (budget)")
            break
        b, s = (int(v) for v in shape.split("x"))
        ids = torch.randint(0, args.vocab, (b, s), device=args.device, generator=g)
        res: dict = {}
        with torch.no_grad():
            ref = model(ids, use_cache=False).logits.float()
            fns = {"eager": lambda: model(ids, use_cache=False)}
            torch._dynamo.reset()
            rows = args.backends.split(",")
            if "inductor" in rows:
                fns["inductor"] = (lambda cm: lambda: cm(ids, use_cache=False))(torch.compile(model))
            progs: list = []
            fns["tilex"] = (lambda cm: lambda: cm(ids, use_cache=False))(
                torch.compile(model, backend="tilex", options={"programs": progs}))
            for name in [r for r in ("inductor", "tilex") if r in fns]:
                t0 = time.perf_counter()
                y = fns[name]().logits.float()
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                err = (y - ref).abs().max().item()
                scale = ref.abs().max().item()
                res[f"{name} first_call_s"] = round(time.perf_counter() - t0, 2)
                res[f"{name} max_err_vs_eager"] = err
                ok = err <= 0.05 * scale  # both are bf16 forwards: a loose sanity bound, the tests hold the tight one
                print(f"{shape} {name}: {'PASS' if ok else 'FAIL'} max|logits - eager| = {err:.4g} "
                      f"(max|eager| {scale:.3g})", flush=True)
            for name, fn in fns.items():
                res[f"{name} ms"] = round(median_ms(fn, rep=args.rep), 4)
                say(f"{shape} {name}: {res[f'{name} ms']} ms")
            for p in progs:  # library steps whose check sent calls to eager, and why an attention check may decline
                for st in p.steps:
                    if st.kind == "library" and (st.fallbacks or st.label == "attention_prefill"):
                        mask = st.match.args[3] if st.label == "attention_prefill" else None
                        info = ""
                        if mask is not None and hasattr(mask, "meta"):
                            mv = mask.meta.get("val")
                            info = (f" mask {mask.name} = {mask.target}: {tuple(mv.shape)} {mv.dtype}; its inputs "
                                    + ", ".join(f"{a.name}={a.target}" for a in mask.all_input_nodes))
                        print(f"{shape} tilex {st.label}: {st.calls} calls, {st.fallbacks} sent to eager{info}")
            for p in progs:  # what each tilex kernel launch is: the steps that launch something
                print(f"\n## {shape} tilex program: {len(p.steps)} steps")
                for st in p.steps:
                    if st.kind in ("library", "generated", "eager", "copy"):
                        ops = ",".join(sorted({str(getattr(n.target, "__name__", n.target)) for n in st.nodes}))
                        print(f"  {st.kind:9s} {st.label:28s} {ops[:110]}")
            tables = {name: kernel_table(fns[name], args.prof) for name in ("inductor", "tilex") if name in fns}
            for name, tab in tables.items():
                print_table(f"{shape} {name}", tab)
                res[f"{name} kernels"] = {k: [round(c, 2), round(t, 2)] for k, (c, t) in tab.items()}
                res[f"{name} kernel_us"] = round(sum(t for _, t in tab.values()), 1)
            if time.perf_counter() - t_start < args.budget * 0.75:  # CUDA graphs on both sides
                torch._dynamo.reset()
                graphs = [("tilex-cg", torch.compile(model, backend="tilex", options={"cuda_graphs": True}))]
                if "inductor" in fns:
                    graphs.insert(0, ("inductor-ro", torch.compile(model, mode="reduce-overhead")))
                for name, cm in graphs:
                    f = (lambda cm: lambda: cm(ids, use_cache=False))(cm)
                    y = f().logits.float()
                    y = f().logits.float()
                    err = (y - ref).abs().max().item()
                    print(f"{shape} {name}: {'PASS' if err <= 0.05 * ref.abs().max().item() else 'FAIL'} "
                          f"max|logits - eager| = {err:.4g}", flush=True)
                    res[f"{name} ms"] = round(median_ms(f, rep=args.rep), 4)
            print(f"\n{shape} ms per forward: " + ", ".join(f"{k[:-3]} {v}" for k, v in res.items()
                                                            if k.endswith(" ms")), flush=True)
            for a, bb in (("tilex", "inductor"), ("tilex-cg", "inductor-ro")):
                if f"{a} ms" in res and f"{bb} ms" in res:
                    print(f"{shape} {a} / {bb}: speed ratio {res[f'{bb} ms'] / res[f'{a} ms']:.3f}x "
                          f"(>1: tilex faster)", flush=True)
            print(f"{shape} kernel time per forward: " + ", ".join(f"{n} {res[f'{n} kernel_us']} us" for n in tables),
                  flush=True)
            if "tilex" in fns:  # the time to enqueue one forward (host-bound when near its ms)
                times = []
                for _ in range(5):
                    if torch.cuda.is_available():
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    fns["tilex"]()
                    times.append(1e3 * (time.perf_counter() - t0))
                res["tilex host_ms"] = round(sorted(times)[2], 3)
                print(f"{shape} tilex host time to enqueue a forward: {res['tilex host_ms']} ms", flush=True)
        out["shapes"][shape] = res
        torch._dynamo.reset()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    say(f"done in {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
