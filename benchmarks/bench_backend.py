"""torch.compile(model, backend="tilex") vs eager and Inductor on one GPU (issue 19, item 5), in one run.

A Qwen2-shaped model built from a config with random weights (no network; default: 2 layers of Qwen2.5-7B's shapes,
vocabulary included, bf16), and for each row (eager, inductor, inductor-ro = mode="reduce-overhead", tilex, tilex-cg
= options={"cuda_graphs": True}, tilex-cg-borrow = cuda_graphs=CudaGraphs(clone_outputs=False): replays return the
graph's outputs without a copy, as reduce-overhead does; every compiled row dynamic=False, static shapes as CUDA
graphs want):

  prefill 1x512 and 16x512 (use_cache=False): the first call (compile, cold in this process), its logits checked
      against eager's (max |a - b| / max |b| over the logits; PASS at 2e-2 for bf16/f16, 1e-4 for f32), ms per
      forward (CUDA events, median of --rep after warm-up), the host time to enqueue one forward (host_ms: near the
      ms means host-bound), the logits checked again after timing (a CUDA-graph row: a replay's), peak memory
      (torch.cuda.max_memory_allocated above what was allocated before the phase: weights and references excluded);
  decode at batch 1 and 16 with a static KV cache: a StaticCache, the --prompt prefill in eager (only the decode
      graph compiles), then one-token steps fed eager's greedy tokens (teacher forcing: every row computes the same
      steps, so each step's logits compare with eager's): --warm steps (compile, CUDA-graph capture) checked, then
      --steps timed (tok/s = batch * steps / seconds, host clock around the loop), one more checked step;
  compile time: the first call of each shape above (cold: Dynamo, AOTAutograd, lowering, kernel builds) and, after
      torch._dynamo.reset(), again for --warm-shapes (warm: kernels in memory and on disk, tracing and lowering
      remain); the second-process warm start is bench_backend_warm.py's and tests/test_backend_cache.py's;
  for --profile-rows, a torch.profiler table per shape and decode batch (kernel_kinds.py: kernel us and launches per
      call, the share in tilex's generated vs library kernels, copies and torch's own kernels, the top kernels);
  for tilex rows, the programs' build statistics, step kinds, eager fallbacks, copies and graph-cache verdicts.

Time: --total seconds for the whole run (model build and eager references included). Each row gets a share of what
is left (weights in ROW_WEIGHT; --budget caps a row) enforced by SIGALRM: a row over its share is reported as timed
out with what it measured so far, and the next row starts. A phase that fails is recorded as `error <phase>` and the
row goes on. Progress goes to stderr (one line per step, with its time); one JSON line per row to stdout; at the end
a summary table (markdown) with the speedups tilex / Inductor in the same CUDA-graph mode (tilex vs inductor,
tilex-cg and tilex-cg-borrow vs inductor-ro: > 1 means tilex is faster), and --json writes everything.

    python3 benchmarks/bench_backend.py --layers 2 --total 140 [--only eager,tilex-cg,inductor-ro,tilex,inductor]
        [--hidden 3584 --heads 28 --kv-heads 4 --inter 18944 --vocab 152064 --dtype bf16] [--json out.json]
    python3 benchmarks/bench_backend.py --device cpu --layers 1 --hidden 64 --heads 4 --kv-heads 2 --inter 128 \\
        --vocab 256 --seq 16 --prompt 8 --only eager,tilex,tilex-cg      # a CPU smoke run (interpreter, wall clock)
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time

_T0 = time.perf_counter()  # --total counts from here: `import torch` included

import torch  # noqa: E402

ROWS = "eager,tilex-cg,inductor-ro,tilex-cg-borrow,tilex,inductor"   # the comparisons the target is about first
ROW_WEIGHT = {"eager": 0.6, "tilex-cg": 3.0, "inductor-ro": 3.0, "tilex-cg-borrow": 1.2, "tilex": 1.0,
              "inductor": 1.5}
CONFIGS = {"eager": None, "inductor": {"backend": "inductor"},
           "inductor-ro": {"backend": "inductor", "mode": "reduce-overhead"},
           "tilex": {"backend": "tilex"},
           "tilex-cg": {"backend": "tilex", "options": {"cuda_graphs": True}},
           # replays return the graph's own outputs, as Inductor's reduce-overhead does (no copy of the logits)
           "tilex-cg-borrow": {"backend": "tilex", "options": {"cuda_graphs": "borrow"}}}
SAME_MODE = {"tilex": "inductor", "tilex-cg": "inductor-ro", "tilex-cg-borrow": "inductor-ro"}  # same graph use


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


# ------------------------------------------------------------------ clocks (CUDA events on a GPU, wall clock on CPU)
def _cuda(dev: str) -> bool:
    return dev == "cuda"


def sync(dev: str) -> None:
    if _cuda(dev):
        torch.cuda.synchronize()


def median_ms(fn, dev: str, warmup: int = 3, rep: int = 10) -> float:
    """Median ms of one call over `rep` calls after `warmup`: CUDA events around each call on a GPU."""
    for _ in range(warmup):
        fn()
    sync(dev)
    times = []
    for _ in range(rep):
        if _cuda(dev):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return sorted(times)[len(times) // 2]


def host_ms(fn, dev: str, rep: int = 5) -> float:
    """Median host time of one call from an idle GPU to its return, not waiting for the GPU: the time to
    enqueue the forward. Close to the ms per forward means the forward is host-bound."""
    times = []
    for _ in range(rep):
        sync(dev)
        t0 = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - t0))
    sync(dev)
    return sorted(times)[len(times) // 2]


_BASE = [0]


def reset_peak(dev: str) -> None:
    """Start a peak-memory window: the peak is measured above what is allocated now (the weights, eager's
    reference logits, the cache), so it is what the phase's forwards add (activations, outputs, arena, graphs)."""
    if _cuda(dev):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        _BASE[0] = torch.cuda.memory_allocated()


def peak_mib(dev: str) -> float | None:
    return round((torch.cuda.max_memory_allocated() - _BASE[0]) / 2 ** 20, 1) if _cuda(dev) else None


# ------------------------------------------------------------------ budgets and phases
class Budget(Exception):
    pass


def _alarm(signum, frame):
    raise Budget()


def _over_budget(e: BaseException) -> bool:
    """The row's alarm, also when Dynamo wrapped it (BackendCompilerFailed from inside a recompile)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, Budget):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def phase(row, key, fn):
    """Run one measurement; an error is recorded under `error <key>` and the row goes on (the budget stops it)."""
    t0 = time.perf_counter()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - report and go on: one phase failing must not hide the others
        if _over_budget(e):
            raise Budget() from e
        row[f"error {key}"] = f"{type(e).__name__}: {str(e)[:300]}"
        say(f"{row['name']}: {key}: {row[f'error {key}']}")
    finally:
        row.setdefault("phase_s", {})[key] = round(time.perf_counter() - t0, 2)


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """max |got - ref| / max |ref|, in f32 a batch row at a time (16x512 logits are 2.5 GB in bf16)."""
    num, den = 0.0, 0.0
    for g, r in zip(got.reshape(got.shape[0], -1), ref.reshape(ref.shape[0], -1)):
        r = r.float()
        num = max(num, float((g.float() - r).abs().max()))
        den = max(den, float(r.abs().max()))
    return num / max(den, 1e-30)


def check(row, key, got, ref, tol) -> bool:
    err = rel_err(got, ref)
    row[f"err {key}"] = float(f"{err:.3g}")
    ok = err <= tol
    row[f"verdict {key}"] = "PASS" if ok else "FAIL"
    if not ok:
        say(f"{row['name']}: {key}: FAIL: relative error {err:.3g} against eager (tolerance {tol})")
    return ok


def kernels(row, key, fn, dev):
    """torch.profiler over 3 calls: kernel time, launches, the share of tilex generated / library kernels,
    copies and torch's own kernels (which a compiled tilex forward should not launch), the top kernels."""
    if not _cuda(dev):
        return
    from tilex.backend.kernel_kinds import profile_kernels, summary

    row[f"kernels {key}"] = summary(profile_kernels(fn, 3))


# ------------------------------------------------------------------ references (eager, before any row)
def references(model, args, dev):
    """Eager's prefill logits per shape and, per decode batch, the prompt, eager's greedy tokens and their logits
    (the last position of each step): what every row is checked against."""
    import transformers

    g = torch.Generator(dev).manual_seed(1)
    pre = {}
    for b in args.batches:
        ids = torch.randint(0, args.vocab, (b, args.seq), device=dev, generator=g)
        pre[f"{b}x{args.seq}"] = (ids, model(ids, use_cache=False).logits)
    dec = {}
    if not args.skip_decode:
        n = args.warm + args.steps + 1 + 4          # warm-up, timed, one checked after, the kernel table's 1 + 3
        for b in args.decode_batches:
            ids = torch.randint(0, args.vocab, (b, args.prompt), device=dev, generator=g)
            cache = transformers.StaticCache(config=model.config, max_cache_len=args.prompt + n + 8)
            out = model(ids, past_key_values=cache, cache_position=torch.arange(args.prompt, device=dev),
                        use_cache=True)
            toks, logits = [], []
            for i in range(n):
                toks.append(out.logits[:, -1:].argmax(-1))
                out = model(toks[-1], past_key_values=cache,
                            cache_position=torch.tensor([args.prompt + i], device=dev), use_cache=True)
                logits.append(out.logits[:, -1].clone())
            dec[b] = {"ids": ids, "tokens": [t.clone() for t in toks], "logits": logits, "n": n,
                      "pos": [torch.tensor([args.prompt + i], device=dev) for i in range(n)]}
    sync(dev)
    return pre, dec


# ------------------------------------------------------------------ phases
def prefill(row, fn, shape, ids, ref, args, dev, tol):
    name = row["name"]
    reset_peak(dev)
    say(f"{name}: prefill {shape}: first call (compile) ...")
    t0 = time.perf_counter()
    out = fn(ids, use_cache=False).logits
    sync(dev)
    row[f"first_call_s {shape}"] = round(time.perf_counter() - t0, 2)
    ok = check(row, f"prefill {shape}", out, ref, tol)
    del out
    say(f"{name}: prefill {shape}: first call {row[f'first_call_s {shape}']} s, err {row[f'err prefill {shape}']}"
        f" ({row[f'verdict prefill {shape}']}); timing ...")
    if not ok and not args.time_failing:
        raise RuntimeError(f"logits differ from eager's (err {row[f'err prefill {shape}']}): not timed")
    row[f"ms {shape}"] = round(median_ms(lambda: fn(ids, use_cache=False), dev, rep=args.rep), 3)
    row[f"host_ms {shape}"] = round(host_ms(lambda: fn(ids, use_cache=False), dev), 3)
    out = fn(ids, use_cache=False).logits   # after timing: a CUDA-graph row's replay
    sync(dev)
    check(row, f"prefill {shape} after timing", out, ref, tol)
    if name == "tilex-cg":  # what cloning the logits out of the graph (cudagraphs.py) costs inside its ms
        row[f"output_clone_ms {shape}"] = round(median_ms(lambda: out.clone(), dev, rep=args.rep), 3)
    del out
    row[f"peak_MiB {shape}"] = peak_mib(dev)
    say(f"{name}: prefill {shape}: {row[f'ms {shape}']} ms (host {row[f'host_ms {shape}']} ms to enqueue)")


def decode(row, fn, model, batch, ref, args, dev, tol, profile: bool):
    """Decode steps against a StaticCache fed eager's tokens; checked, then timed."""
    import transformers

    name, key = row["name"], f"decode b{batch}"
    cache = transformers.StaticCache(config=model.config, max_cache_len=args.prompt + ref["n"] + 8)
    reset_peak(dev)
    say(f"{name}: {key}: eager prefill of {batch}x{args.prompt}, then the first decode calls (compile) ...")
    model(ref["ids"], past_key_values=cache, cache_position=torch.arange(args.prompt, device=dev), use_cache=True)
    state = {"i": 0}

    def step():
        i = state["i"]
        state["i"] = i + 1
        return fn(ref["tokens"][i], past_key_values=cache, cache_position=ref["pos"][i], use_cache=True).logits

    t0 = time.perf_counter()
    worst = 0.0
    for _ in range(args.warm):  # compile, capture (a CUDA-graph runner captures on its second call), replay
        i = state["i"]
        worst = max(worst, rel_err(step()[:, -1], ref["logits"][i]))
    sync(dev)
    row[f"first_call_s {key}"] = round(time.perf_counter() - t0, 2)
    row[f"err {key}"] = float(f"{worst:.3g}")
    row[f"verdict {key}"] = "PASS" if worst <= tol else "FAIL"
    say(f"{name}: {key}: {args.warm} steps in {row[f'first_call_s {key}']} s, err {row[f'err {key}']} "
        f"({row[f'verdict {key}']}); timing {args.steps} steps ...")
    if worst > tol and not args.time_failing:
        raise RuntimeError(f"decode logits differ from eager's (err {worst:.3g}): not timed")
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync(dev)
    dt = time.perf_counter() - t0
    i = state["i"]
    err_after = rel_err(step()[:, -1], ref["logits"][i])    # after the timed steps (replays)
    row[f"err {key} after timing"] = float(f"{err_after:.3g}")
    if err_after > tol:
        row[f"verdict {key}"] = "FAIL"
    row[f"tok_s {key}"] = round(batch * args.steps / dt, 1)
    row[f"ms_per_step {key}"] = round(1e3 * dt / args.steps, 3)
    row[f"peak_MiB {key}"] = peak_mib(dev)
    say(f"{name}: {key}: {row[f'tok_s {key}']} tok/s ({row[f'ms_per_step {key}']} ms a step)")
    if profile:  # the decode step's kernels: 1 + 3 more steps (the reference has them)
        kernels(row, key, step, dev)


def program_facts(row, progs):
    if not progs:
        return
    row["build"] = [{k: v for k, v in p.build_stats.items() if k != "backend_entered"} for p in progs]
    row["graph_cache"] = [{k: v for k, v in (p.cache or {}).items() if k != "fingerprint"} for p in progs]
    row["graphs"] = len(progs)
    p = max(progs, key=lambda p: len(p.steps))
    kinds: dict = {}
    for s in p.steps:
        kinds[s.kind] = kinds.get(s.kind, 0) + 1
    row["steps (largest graph)"] = kinds
    row["eager_fallbacks"] = sorted({t for q in progs for _, t in q.fallbacks()})
    row["library_kernels"] = sorted({s.label for q in progs for s in q.steps if s.kind == "library"})
    row["copies"] = sum(s.copies for q in progs for s in q.steps)
    runners = [getattr(q, "graph_runner", None) for q in progs]
    row["cuda_graph_replays"] = [None if r is None else (r.replays if not r.disabled else "off") for r in runners]


def compiled(model, kw, progs, verbose):
    if kw is None:
        return model
    kw = dict(kw)
    if kw.get("backend") == "tilex":
        kw["options"] = {"programs": progs, "verbose": verbose, **kw.get("options", {})}
    return torch.compile(model, dynamic=False, **kw)


def measure(row, model, pre, dec, args, dev, tol):
    """Fill `row` (kept as far as it got when the budget stops it)."""
    import tilex.backend  # noqa: F401

    name = row["name"]
    kw = CONFIGS[name]
    torch._dynamo.reset()
    progs: list = []
    profile = name in args.profile_rows
    row["_progs"] = progs
    with torch.no_grad():
        fn = compiled(model, kw, progs, args.verbose)
        for shape, (ids, ref) in pre.items():
            phase(row, f"prefill {shape}", lambda: prefill(row, fn, shape, ids, ref, args, dev, tol))
            if profile:
                phase(row, f"kernels {shape}", lambda: kernels(row, shape, lambda: fn(ids, use_cache=False), dev))
        for b, ref in dec.items():
            phase(row, f"decode b{b}", lambda: decode(row, fn, model, b, ref, args, dev, tol, profile))
        if kw is not None:  # warm compile: the same shapes after a Dynamo reset
            torch._dynamo.reset()
            fn = compiled(model, kw, [], args.verbose)
            for shape in args.warm_shapes:
                if shape not in pre:
                    continue
                ids = pre[shape][0]

                def warm(shape=shape, ids=ids):
                    t0 = time.perf_counter()
                    fn(ids, use_cache=False)
                    sync(dev)
                    row[f"warm_first_call_s {shape}"] = round(time.perf_counter() - t0, 2)
                    say(f"{name}: warm compile {shape}: {row[f'warm_first_call_s {shape}']} s")
                phase(row, f"warm compile {shape}", warm)


# ------------------------------------------------------------------ the summary
def summary_table(rows, args) -> str:
    """Markdown: one line per measured quantity, a column per row, then the speedups tilex / Inductor in the same
    CUDA-graph mode (ms and seconds: Inductor's / tilex's; tok/s: tilex's / Inductor's; > 1: tilex better)."""
    by = {r["name"]: r for r in rows}
    names = [r["name"] for r in rows]
    keys = []
    for r in rows:
        for k in r:
            if k.split(" ")[0] in ("ms", "host_ms", "output_clone_ms", "tok_s", "first_call_s", "warm_first_call_s",
                                   "peak_MiB", "err") and k not in keys and "after timing" not in k:
                keys.append(k)
    order = ("ms", "tok_s", "host_ms", "output_clone_ms", "err", "first_call_s", "warm_first_call_s", "peak_MiB")
    keys.sort(key=lambda k: (order.index(k.split(" ")[0]), k))
    pairs = [(t, i) for t, i in SAME_MODE.items() if t in by and i in by]
    head = ["quantity", *names, *(f"{t} / {i}" for t, i in pairs)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in keys:
        cells = [k]
        for n in names:
            v = by[n].get(k)
            verdict = by[n].get(f"verdict {k[4:]}") if k.startswith("err ") else None
            cells.append("" if v is None else f"{v}{' ' + verdict if verdict else ''}")
        for t, i in pairs:
            a, b = by[t].get(k), by[i].get(k)
            if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not a or not b \
                    or k.startswith("err"):
                cells.append("")
            elif k.startswith("tok_s"):
                cells.append(f"{a / b:.3f}x")
            elif k.startswith("peak_MiB"):
                cells.append(f"{a / b:.3f} (size)")
            else:
                cells.append(f"{b / a:.3f}x")
        lines.append("| " + " | ".join(cells) + " |")
    errors = [f"{r['name']}: {k}: {v}" for r in rows for k, v in r.items() if k.startswith("error")]
    if errors:
        lines.append("")
        lines.extend(f"- {e}" for e in errors)
    return "\n".join(lines)


def _shares(row) -> list:
    out = []
    for k, v in row.items():
        if k.startswith("kernels ") and isinstance(v, dict):
            s = v.get("share", {})
            out.append(f"{row['name']} {k[8:]}: {v.get('kernel_us')} us in {v.get('launches')} launches; generated "
                       f"{s.get('generated', 0):.1%}, library {s.get('library', 0):.1%}, copies {s.get('copy', 0):.1%},"
                       f" torch {s.get('torch', 0):.1%}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=3584)
    ap.add_argument("--heads", type=int, default=28)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--inter", type=int, default=18944)
    ap.add_argument("--vocab", type=int, default=152064)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke run (interpreter)")
    ap.add_argument("--only", default=None, help=f"rows, in this order (default {ROWS}; on --device cpu without "
                    "the inductor rows)")
    ap.add_argument("--total", type=float, default=140.0, help="seconds for the whole run (default 140)")
    ap.add_argument("--budget", type=float, default=None, help="at most this many seconds per row")
    ap.add_argument("--seq", type=int, default=512, help="prefill tokens per sequence (default 512)")
    ap.add_argument("--batches", default="1,16", help="prefill batch sizes (default 1,16)")
    ap.add_argument("--decode-batches", default="1,16")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens before decode (default 128)")
    ap.add_argument("--warm", type=int, default=3, help="checked decode steps before timing (default 3)")
    ap.add_argument("--steps", type=int, default=32, help="timed decode steps (default 32)")
    ap.add_argument("--rep", type=int, default=10, help="timed prefill forwards (default 10)")
    ap.add_argument("--warm-shapes", default=None, help="prefill shapes compiled again after a Dynamo reset "
                    "(default: the first, e.g. 1x512)")
    ap.add_argument("--profile-rows", default="tilex-cg,inductor-ro", help="rows with torch.profiler tables")
    ap.add_argument("--time-failing", action="store_true", help="time a row whose logits differ from eager's")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="tilex's kernel-build progress on stderr")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    t_start = _T0 if argv is None else time.perf_counter()
    names = [n for n in (args.only or ROWS).split(",") if n]
    for n in names:
        if n not in CONFIGS:
            ap.error(f"unknown row {n!r} (rows: {', '.join(CONFIGS)})")
    if args.steps < 1 or args.warm < 2:
        ap.error("--steps must be at least 1 and --warm at least 2 (compile, then a CUDA-graph row's capture)")
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device (use --device cpu for a smoke run)")
    if dev == "cpu" and args.only is None:  # Inductor on a CPU compiles C++: minutes for a smoke run
        names = [n for n in names if not n.startswith("inductor")]
    args.batches = [int(x) for x in args.batches.split(",") if x]
    args.decode_batches = [int(x) for x in args.decode_batches.split(",") if x]
    args.warm_shapes = ([s for s in args.warm_shapes.split(",") if s] if args.warm_shapes is not None else
                        [f"{args.batches[0]}x{args.seq}"] if args.batches else [])
    args.profile_rows = [s for s in args.profile_rows.split(",") if s]
    tol = 1e-4 if args.dtype == "f32" else 2e-2
    say(f"building the model ({args.layers} layers, hidden {args.hidden}, vocab {args.vocab}, {args.dtype}, {dev}) ...")
    t0 = time.perf_counter()
    model = build(args)
    weights_mib = round(sum(p.numel() * p.element_size() for p in model.parameters()) / 2 ** 20, 1)
    build_s = round(time.perf_counter() - t0, 2)
    say(f"model built in {build_s} s ({weights_mib} MiB of weights); eager references ...")
    t0 = time.perf_counter()
    with torch.no_grad():
        pre, dec = references(model, args, dev)
    refs_s = round(time.perf_counter() - t0, 2)
    say(f"references in {refs_s} s")
    rows = []
    signal.signal(signal.SIGALRM, _alarm)
    for j, name in enumerate(names):
        left = args.total - (time.perf_counter() - t_start)
        share = left * ROW_WEIGHT[name] / sum(ROW_WEIGHT[n] for n in names[j:])
        budget = min(share, args.budget) if args.budget else share
        row = {"name": name, "budget_s": round(budget, 1)}
        rows.append(row)
        if budget < 5:
            row["error"] = f"not run: {left:.0f} s left of --total {args.total:.0f}"
            say(f"{name}: {row['error']}")
            continue
        say(f"{name}: start (budget {budget:.0f} s of {left:.0f} s left)")
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            measure(row, model, pre, dec, args, dev, tol)
        except BaseException as e:  # noqa: BLE001 - report and go on: one backend failing must not hide the others
            if isinstance(e, KeyboardInterrupt):
                raise
            row["error"] = (f"over its budget of {budget:.0f} s (measured so far kept)" if _over_budget(e) else
                            f"{type(e).__name__}: {str(e)[:400]}")
            say(f"{name}: {row['error']}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            program_facts(row, row.pop("_progs", []))
        except Exception as e:  # noqa: BLE001
            row["error facts"] = f"{type(e).__name__}: {e}"
        row.pop("_progs", None)
        row["row_s"] = round(time.perf_counter() - t0, 1)
        say(f"{name}: done in {row['row_s']} s")
        print(json.dumps(row, default=str), flush=True)
        if args.json:  # after every row: a run killed later still leaves what it measured
            _write(args, rows, weights_mib, build_s, refs_s, None)
        try:
            sync(dev)
            if _cuda(dev):
                torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001 - a row left the device in a bad state: say so, go on
            say(f"{name}: after the row: {type(e).__name__}: {e}")
    table = summary_table(rows, args)
    print("\n## summary (" + f"{args.layers} layers, hidden {args.hidden}, heads {args.heads}/{args.kv_heads}, inter "
          f"{args.inter}, vocab {args.vocab}, {args.dtype}; speedup > 1: tilex faster)\n\n" + table, flush=True)
    for r in rows:
        for line in _shares(r):
            print("-", line)
    print(f"\ntotal {time.perf_counter() - t_start:.1f} s (model {build_s} s, references {refs_s} s)", flush=True)
    if args.json:
        _write(args, rows, weights_mib, build_s, refs_s, table)
    return rows


def _write(args, rows, weights_mib, build_s, refs_s, table) -> None:
    with open(args.json, "w") as f:
        json.dump({"args": vars(args), "weights_MiB": weights_mib, "build_s": build_s, "refs_s": refs_s,
                   "rows": rows, "summary": table}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
