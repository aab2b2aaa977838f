"""torch.compile(model, backend="tilex") vs eager and Inductor on one GPU (issue 19, item 5).

A Qwen2-shaped model built from a config with random weights (no network), for each backend:
  prefill at 1x512 and 16x512 (ms per forward, use_cache=False),
  decode tok/s at batch 1 and 16 with a static KV cache (a --prompt-token prefill, then --steps greedy
  decode forwards, each one token per sequence; tok/s = batch * steps / time),
  compile time: the first call of each shape (cold in this process: Dynamo, lowering, kernel builds; the
  kernel disk cache may be warm from an earlier run) and again after torch._dynamo.reset() (warm: the
  kernels are in memory and on disk, only tracing and lowering remain),
  peak memory per shape (and per decode batch), the host time to enqueue one forward (host_ms: near the ms
  per forward means host-bound), the tilex programs' build statistics (generated steps, distinct kernels,
  seconds) and eager fallbacks, and per prefill shape and decode batch a torch.profiler table of 3 calls
  (`kernels <shape>`: kernel time and launches per call, the share of time in tilex generated vs library
  kernels, copies and torch's own kernels, the torch kernels seen, the top kernels; kernel_kinds.py).
A phase that fails (a decode under one backend, say) is recorded as `error <phase>` and the row goes on.
`tilex-cg` is the tilex backend with options={"cuda_graphs": True}, to compare with Inductor's
mode="reduce-overhead" (`inductor-ro`).

Every backend row has a time budget (--budget seconds, SIGALRM): a row that runs over is reported as
timed out and the next row starts, so one slow backend cannot eat the run. Progress goes to stderr
(one line per step, with its time; tilex's own kernel-build progress with --verbose).

    python benchmarks/bench_backend.py --layers 4 [--hidden 3584 --heads 28 --kv-heads 4
        --inter 18944 --dtype bf16] [--only eager,tilex] [--skip-decode] [--json out.json]

The defaults are Qwen2.5-7B's shapes with 4 layers (one run fits a device call).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time

import torch


def say(*parts):
    print(f"[bench {time.strftime('%H:%M:%S')}]", *parts, file=sys.stderr, flush=True)


def build(args):
    """The benchmarks' Qwen2 model from a config with random weights: built on args.device (default cuda) directly
    in args.dtype (default bf16), weights of two or more dims drawn Normal(0, 0.02) as HF initialises them
    (bench_backend_decode.py and prof_backend_kernels.py build theirs here too)."""
    import transformers

    cfg = transformers.Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.inter,
                                   num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                   num_key_value_heads=args.kv_heads, max_position_embeddings=4096,
                                   attn_implementation="sdpa")
    torch.manual_seed(0)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[getattr(args, "dtype", "bf16")]
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(getattr(args, "device", "cuda")):
            m = transformers.Qwen2ForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(old)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    return m


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


def host_ms(fn, rep=5) -> float:
    """Median host time of one call from an idle GPU to its return, not waiting for the GPU: the time to
    enqueue the forward. Close to the ms per forward means the forward is host-bound."""
    times = []
    for _ in range(rep):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - t0))
    torch.cuda.synchronize()
    return sorted(times)[len(times) // 2]


class Budget(Exception):
    pass


def _alarm(signum, frame):
    raise Budget()


def compiled(model, compile_kwargs, progs, verbose):
    if compile_kwargs is None:
        return model
    kw = dict(compile_kwargs)
    if kw.get("backend") == "tilex":
        kw["options"] = {"programs": progs, "verbose": verbose, **kw.get("options", {})}
    return torch.compile(model, **kw)


def prefill(row, name, fn, ids_by_shape):
    for shape, ids in ids_by_shape.items():
        torch.cuda.reset_peak_memory_stats()
        say(f"{name}: prefill {shape}: first call (compile) ...")
        t0 = time.perf_counter()
        fn(ids, use_cache=False)
        torch.cuda.synchronize()
        row[f"first_call_s {shape}"] = round(time.perf_counter() - t0, 2)
        say(f"{name}: prefill {shape}: first call {row[f'first_call_s {shape}']} s; timing ...")
        row[f"ms {shape}"] = round(timed(lambda: fn(ids, use_cache=False)), 3)
        row[f"peak_MiB {shape}"] = round(torch.cuda.max_memory_allocated() / 2 ** 20, 1)
        row[f"host_ms {shape}"] = round(host_ms(lambda: fn(ids, use_cache=False)), 3)
        say(f"{name}: prefill {shape}: {row[f'ms {shape}']} ms (host {row[f'host_ms {shape}']} ms to enqueue)")


def decode(row, name, fn, model, batch: int, prompt: int, steps: int, vocab: int, kernel_table: bool = True):
    """Greedy decode forwards against a StaticCache: (first decode call s, tok/s over `steps` calls)."""
    import transformers

    g = torch.Generator("cuda").manual_seed(2)
    ids = torch.randint(0, vocab, (batch, prompt), device="cuda", generator=g)
    cache = transformers.StaticCache(config=model.config, max_cache_len=prompt + steps + 16)
    key = f"decode b{batch}"
    say(f"{name}: {key}: prefill {batch}x{prompt} and the first decode call (compile) ...")
    t0 = time.perf_counter()
    torch.cuda.reset_peak_memory_stats()
    out = fn(ids, past_key_values=cache, cache_position=torch.arange(prompt, device="cuda"), use_cache=True)
    state = {"tok": out.logits[:, -1:].argmax(-1), "pos": torch.tensor([prompt], device="cuda")}

    def step():
        out = fn(state["tok"], past_key_values=cache, cache_position=state["pos"], use_cache=True)
        state["tok"] = out.logits[:, -1:].argmax(-1)
        state["pos"] = state["pos"] + 1
    for _ in range(3):  # compile, warm up (a CUDA-graph runner captures on its second call)
        step()
    torch.cuda.synchronize()
    row[f"first_call_s {key}"] = round(time.perf_counter() - t0, 2)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    row[f"tok_s {key}"] = round(batch * steps / dt, 1)
    row[f"ms_per_step {key}"] = round(1e3 * dt / steps, 3)
    row[f"peak_MiB {key}"] = round(torch.cuda.max_memory_allocated() / 2 ** 20, 1)
    say(f"{name}: {key}: {row[f'tok_s {key}']} tok/s ({row[f'ms_per_step {key}']} ms a step)")
    if kernel_table:  # the decode step's kernels (3 more steps; the cache has room: max_cache_len has 16 spare)
        kernels(row, key, step)


def _over_budget(e: BaseException) -> bool:
    """The row's alarm, also when Dynamo wrapped it (BackendCompilerFailed from inside a recompile)."""
    while e is not None:
        if isinstance(e, Budget):
            return True
        e = e.__cause__ or e.__context__
    return False


def phase(row, key, fn):
    """Run one measurement; an error is recorded under `error <key>` and the row goes on (the budget stops it)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - report and go on: one phase failing must not hide the others
        if _over_budget(e):
            raise Budget() from e
        row[f"error {key}"] = f"{type(e).__name__}: {str(e)[:300]}"
        say(f"{row['name']}: {key}: {row[f'error {key}']}")


def kernels(row, key, fn):
    """torch.profiler over 3 calls: kernel time, launches, the share of tilex generated / library kernels,
    copies and torch's own kernels (which a compiled tilex forward should not launch), the top kernels."""
    from tilex.backend.kernel_kinds import profile_kernels, summary

    row[f"kernels {key}"] = summary(profile_kernels(fn, 3))


def measure(row, model, ids_by_shape, compile_kwargs, args):
    """Fill `row` (kept as far as it got when the budget stops it)."""
    import tilex.backend  # noqa: F401

    name = row["name"]
    torch._dynamo.reset()
    progs: list = []
    with torch.no_grad():
        fn = compiled(model, compile_kwargs, progs, args.verbose)
        for shape, ids in ids_by_shape.items():
            phase(row, f"prefill {shape}", lambda: prefill(row, name, fn, {shape: ids}))
            phase(row, f"kernels {shape}", lambda: kernels(row, shape, lambda: fn(ids, use_cache=False)))
        if not args.skip_decode:
            for b in (1, 16):
                phase(row, f"decode b{b}", lambda: decode(row, name, fn, model, b, args.prompt, args.steps,
                                                          args.vocab))
        if compile_kwargs is not None:  # warm compile: the same shapes after a Dynamo reset
            torch._dynamo.reset()
            fn = compiled(model, compile_kwargs, [], args.verbose)
            for shape, ids in ids_by_shape.items():
                def warm(shape=shape, ids=ids):
                    t0 = time.perf_counter()
                    fn(ids, use_cache=False)
                    torch.cuda.synchronize()
                    row[f"warm_first_call_s {shape}"] = round(time.perf_counter() - t0, 2)
                    say(f"{name}: warm compile {shape}: {row[f'warm_first_call_s {shape}']} s")
                phase(row, f"warm compile {shape}", warm)
    if progs:
        row["build"] = [dict(p.build_stats) for p in progs]
        p = max(progs, key=lambda p: len(p.steps))
        kinds = {}
        for s in p.steps:
            kinds[s.kind] = kinds.get(s.kind, 0) + 1
        row["steps"] = kinds
        row["eager_fallbacks"] = sorted({t for q in progs for _, t in q.fallbacks()})
        row["library_kernels"] = sorted({s.label for q in progs for s in q.steps if s.kind == "library"})
        row["copies"] = sum(s.copies for q in progs for s in q.steps)


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
    ap.add_argument("--budget", type=float, default=150.0, help="seconds per backend row (default 150)")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens before decode (default 128)")
    ap.add_argument("--steps", type=int, default=32, help="timed decode steps (default 32)")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="tilex's kernel-build progress on stderr")
    ap.add_argument("--json")
    args = ap.parse_args()
    say(f"building the model ({args.layers} layers, hidden {args.hidden}, {args.dtype}) ...")
    model = build(args)
    g = torch.Generator("cuda").manual_seed(1)
    ids = {f"{b}x512": torch.randint(0, args.vocab, (b, 512), device="cuda", generator=g) for b in (1, 16)}
    configs = {"eager": None, "inductor": {"backend": "inductor"},
               "inductor-ro": {"backend": "inductor", "mode": "reduce-overhead"},
               "tilex": {"backend": "tilex"},
               "tilex-cg": {"backend": "tilex", "options": {"cuda_graphs": True}}}
    rows = []
    signal.signal(signal.SIGALRM, _alarm)
    for name in args.only.split(","):
        say(f"{name}: start (budget {args.budget:.0f} s)")
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, args.budget)
        rows.append({"name": name})
        try:
            measure(rows[-1], model, ids, configs[name], args)
        except Exception as e:  # report and go on: one backend failing must not hide the others
            rows[-1]["error"] = (f"over its budget of {args.budget:.0f} s" if _over_budget(e) else
                                 f"{type(e).__name__}: {str(e)[:400]}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        rows[-1]["row_s"] = round(time.perf_counter() - t0, 1)
        say(f"{name}: done in {rows[-1]['row_s']} s")
        print(json.dumps(rows[-1]), flush=True)
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
