"""Static-cache decode under the tilex backend with and without CUDA graphs, step by step against eager
(a diagnostic for the GPU: cudagraphs.py). transformers' tiny Llama/Qwen2 (random weights, tests/
test_backend_hf.tiny) prefills `--prompt` tokens into a StaticCache, then `--steps` greedy decode calls
of the forward; three runs from the same prompt: eager, tilex without graphs, tilex with cuda_graphs=True.
Per step it prints each run's token, its logits' max relative error against eager, the cache counter
(`cumulative_length` of layer 0, which the graph advances in place) and, for the graph run, whether that
call ran the program, warmed up + captured, or replayed. Then `generate(..., cache_implementation=
"static")` the same way (the GPU test's path). Exit status 1 when a token differs from eager.

    python benchmarks/diagnose_cuda_graphs.py [--arch llama|qwen2] [--layers 2] [--batch 2] [--prompt 16]
        [--steps 8] [--dtype f32|bf16]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def decode(cm, model, ids, steps, runner_of=None):
    """[(token [B], logits [B, V], counter, what the graph runner did)] per decode step."""
    import contextlib

    import transformers
    from test_backend_decode import decode_steps

    cache = transformers.StaticCache(config=model.config, max_cache_len=ids.shape[1] + steps + 8)
    seen = []

    @contextlib.contextmanager
    def on_step(i):
        runner = runner_of() if runner_of else None
        before = (runner.replays, runner.graph is None) if runner else (0, True)
        yield
        runner = runner_of() if runner_of else None
        what = "-"
        if runner is not None:
            what = ("replay" if runner.replays > before[0] else "warm-up+capture" if before[1] and
                    runner.graph is not None else "no graph" if runner.disabled else "run")
        seen.append((int(cache.layers[0].cumulative_length), what))
    logits = decode_steps(cm, model, ids, steps, on_step, cache).float()
    return [(logits[i].argmax(-1).tolist(), logits[i], *seen[i]) for i in range(steps)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="llama")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    args = ap.parse_args()
    import tilex.backend  # noqa: F401  (registers "tilex")
    from test_backend_decode import eager_details
    from test_backend_hf import rel_err, tiny

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = tiny(args.arch, layers=args.layers).to(dev)
    if args.dtype == "bf16":
        model = model.to(torch.bfloat16)
    ids = torch.randint(1, 96, (args.batch, args.prompt), device=dev,
                        generator=torch.Generator(dev).manual_seed(25))
    runs = {"eager": decode(model, model, ids, args.steps)}
    for name, opts in (("tilex", {}), ("tilex-cg", {"cuda_graphs": True})):
        torch._dynamo.reset()
        progs: list = []
        cm = torch.compile(model, backend="tilex", options={"programs": progs, **opts})

        def runner_of(progs=progs):
            return progs[-1].graph_runner if progs and progs[-1].graph_runner is not None else None
        runs[name] = decode(cm, model, ids, args.steps, runner_of if opts else None)
        print(f"{name}: {len(progs)} graphs; eager nodes: {sorted({t for p in progs for _, t in p.fallbacks()})}")
        print("\n".join(eager_details(progs)))
    bad = 0
    print(f"\n{'step':>4} | {'eager tokens':<14} | " + " | ".join(f"{n:<34}" for n in ("tilex", "tilex-cg")))
    for i in range(args.steps):
        tok, ref, counter, _ = runs["eager"][i]
        cells = []
        for name in ("tilex", "tilex-cg"):
            t, lg, c, what = runs[name][i]
            bad += t != tok
            cells.append(f"{str(t):<10} {'OK ' if t == tok else 'BAD'} err {rel_err(lg, ref):.1e} n={c} {what}")
        print(f"{i:>4} | {str(tok):<10} n={counter} | " + " | ".join(f"{c:<34}" for c in cells))
    # the GPU test's path: generate with a static cache
    from test_backend_decode import generate

    torch._dynamo.reset()
    ref_seq, ref_logits, _ = generate(model, ids, compiled=False, tokens=args.steps)
    for name, opts in (("tilex", {}), ("tilex-cg", {"cuda_graphs": True})):
        torch._dynamo.reset()
        seq, logits, progs = generate(model, ids, compiled=True, tokens=args.steps, **opts)
        same = (seq == ref_seq).all(0).tolist()[ids.shape[1]:]
        r = progs[-1].graph_runner
        print(f"generate {name}: tokens equal per step {same}, logits err {rel_err(logits, ref_logits):.1e}"
              + (f", runner calls {r.calls} replays {r.replays} disabled {r.disabled}" if r else ""))
        bad += not all(same)
    print("RESULT:", "all tokens equal" if not bad else f"{bad} step(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
