"""Check the engine against transformers with the same random weights (GPU).

    python examples/llm/check_hf.py --config qwen2.5-14b      # ~30 GB bf16 + 59 GB f32 reference
    python examples/llm/check_hf.py --config llama3-8b --json

Random weights Normal(0, 0.02) in bf16 (norm weights 1 + Normal(0, 0.02), biases random);
transformers gets the same values in f32 (--ref-dtype bf16 to compare bf16 with bf16).
Checks, each as relative error max|tilex - ref| / max|ref| per logit row, max over rows:
  * prefill: logits at every position of a 128-token prompt;
  * teacher-forced decode: 32 steps through the paged cache (CUDA graph) on forced tokens;
  * batching: the same, with two more prompts of other lengths in the batch;
and reports how many of 32 greedy tokens match when each decodes freely, with the
top-1/top-2 logit gap where they first diverge (also the norm-wise error ||a-b||/||b||).

Pass rule. With --dtype f32 (engine in f32) every error must be <= --tol (2e-2). A bf16
engine cannot meet 2e-2 against f32 on these models: transformers' own bf16 model is off
by 0.14 (Qwen2.5-14B shape), so its error is measured too (hf_bf16_vs_f32_rel_err) and the
bf16 engine passes when max_rel_err <= max(tol, 1.25 * that floor). Exit status 1 on failure.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llm.backend import TorchCudaBackend  # noqa: E402
from llm.config import ModelConfig, load_config  # noqa: E402
from llm.engine import Engine, Sequence  # noqa: E402
from llm.hf import build_hf_model, hf_greedy, hf_logits  # noqa: E402
from llm.weights import random_weights  # noqa: E402


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not np.isfinite(a).all():
        return float("inf")
    return float(np.max(np.max(np.abs(a - b), axis=-1) / np.max(np.abs(b), axis=-1)))


def _rel_norm(a, b) -> float:
    """||a - b|| / ||b|| over all the logits (Frobenius norms)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not np.isfinite(a).all():
        return float("inf")
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _gap(row) -> float:
    top = np.sort(np.asarray(row, np.float64))[-2:]
    return float(top[1] - top[0])


# bf16 cannot meet 2e-2 against an f32 reference on these random 14B/8B models: transformers'
# own bf16 model misses it by 5-7x (measured, benchmarks/RESULTS.md). A bf16 engine passes
# when its error is within FLOOR_MARGIN of that floor (or within tol); an f32 engine must
# meet tol itself.
FLOOR_MARGIN = 1.25


def check(cfg: ModelConfig, prompt_len=128, steps=32, seed=0, ref_dtype="f32", use_graph=True,
          prefill_attention="dense", extra_lens=(77, 5), tol=2e-2, log=print, mlp="auto",
          dtype="bf16") -> dict:
    import torch

    t_start = time.time()
    be = TorchCudaBackend()
    rng = np.random.default_rng(seed)
    weights = random_weights(cfg, be, dtype, seed=seed)
    lens = [prompt_len, *extra_lens]
    prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in lens]
    forced = [rng.integers(0, cfg.vocab_size, steps + 1).tolist() for _ in lens]
    need = sum(-(-(n + steps + 1) // 16) for n in lens) * 2 + 2
    eng = Engine(cfg, weights, be, num_blocks=need, block_size=16, max_batch=len(lens),
                 max_seq_len=max(lens) + steps + 1, use_graph=use_graph,
                 prefill_attention=prefill_attention, mlp=mlp, dtype=dtype)
    log(f"[{time.time() - t_start:.0f}s] engine ready ({cfg.name or cfg.model_type}); running tilex")

    # prefill, every position of the first prompt
    seq = Sequence(list(prompts[0]))
    all_pos = be.to_numpy(eng.prefill([seq], all_positions=True)).astype(np.float32)
    eng.cache.release(seq.blocks)
    # teacher-forced decode, whole batch: step 0 = prefill logits, then `steps` decode steps
    tf = eng.generate(prompts, steps + 1, keep_logits=True, forced_tokens=forced, stop_on_eos=False)
    tf_single = eng.generate(prompts[:1], steps + 1, keep_logits=True, forced_tokens=forced[:1],
                             stop_on_eos=False)
    free = eng.generate(prompts[:1], steps, keep_logits=True, stop_on_eos=False)
    torch.cuda.synchronize()
    log(f"[{time.time() - t_start:.0f}s] tilex done; building transformers ({ref_dtype})")

    model = build_hf_model(cfg, weights, dtype=ref_dtype)
    refs = [r.cpu().numpy() for r in hf_logits(model, [p + f[:steps] for p, f in zip(prompts, forced)])]
    hf_tokens, hf_free_logits = hf_greedy(model, prompts[0], steps)
    hf_free_logits = hf_free_logits.cpu().numpy()
    del model
    ref16 = None
    if dtype == "bf16" and ref_dtype == "f32":  # the precision floor: transformers itself in bf16
        bf16 = build_hf_model(cfg, weights, dtype="bf16", share=True)
        ref16 = hf_logits(bf16, [prompts[0]])[0].cpu().numpy()
        del bf16
    log(f"[{time.time() - t_start:.0f}s] transformers done")

    kind = lambda rows: "gated_mlp" if eng.model.uses_gated_mlp(rows) else "linear+silu_and_mul"  # noqa: E731
    res = {"config": cfg.name, "dtype": dtype, "prompt_len": prompt_len, "steps": steps, "ref_dtype": ref_dtype,
           "cuda_graph": eng.use_graph, "prefill_attention": prefill_attention,
           "mlp": {"prefill": kind(prompt_len), "decode": kind(len(lens))}, "tol": tol}
    res["prefill_all_positions_rel_err"] = _rel(all_pos, refs[0][:prompt_len])
    res["prefill_all_positions_rel_err_norm"] = _rel_norm(all_pos, refs[0][:prompt_len])
    if ref16 is not None:
        res["hf_bf16_vs_f32_rel_err"] = _rel(ref16, refs[0][:prompt_len])
        res["hf_bf16_vs_f32_rel_err_norm"] = _rel_norm(ref16, refs[0][:prompt_len])
        res["tilex_vs_hf_bf16_rel_err"] = _rel(all_pos, ref16)
    single = np.stack([lg[0] for lg in tf_single.logits])  # [steps + 1, vocab]
    res["prefill_rel_err"] = _rel(single[0], refs[0][prompt_len - 1])
    res["decode_teacher_forced_rel_err"] = _rel(single[1:], refs[0][prompt_len:prompt_len + steps])
    res["decode_teacher_forced_rel_err_norm"] = _rel_norm(single[1:], refs[0][prompt_len:prompt_len + steps])
    batch_errs = []
    for i, n in enumerate(lens):
        got = np.stack([lg[i] for lg in tf.logits])
        batch_errs.append(_rel(got, refs[i][n - 1:n + steps]))
    res["batch_prompt_lens"] = lens
    res["batch_rel_err"] = batch_errs
    ours = free.tokens[0]
    match = [a == b for a, b in zip(ours, hf_tokens)]
    first = match.index(False) if False in match else None
    res["greedy_tilex"], res["greedy_transformers"] = ours, hf_tokens
    res["greedy_matching"] = int(sum(match))
    res["greedy_matching_prefix"] = steps if first is None else first
    if first is not None:  # contexts agree up to `first`: compare the two choices there
        res["divergence_step"] = first
        res["gap_at_divergence_transformers"] = _gap(hf_free_logits[first])
        res["gap_at_divergence_tilex"] = _gap(free.logits[first][0])
    res["min_top2_gap_transformers"] = float(min(_gap(r) for r in hf_free_logits))
    errs = [res["prefill_all_positions_rel_err"], res["prefill_rel_err"],
            res["decode_teacher_forced_rel_err"], *batch_errs]
    res["max_rel_err"] = max(errs)
    bound = tol
    if ref16 is not None and np.isfinite(res["hf_bf16_vs_f32_rel_err"]):  # an inf floor bounds nothing
        bound = max(tol, FLOOR_MARGIN * res["hf_bf16_vs_f32_rel_err"])
    res["bound"] = bound
    res["pass"] = bool(res["max_rel_err"] <= bound)
    res["seconds"] = time.time() - t_start
    torch.cuda.empty_cache()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="qwen2.5-14b", help="named config or config.json")
    ap.add_argument("--layers", type=int, help="override num_hidden_layers (a quicker run)")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ref-dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--prefill-attention", choices=["paged", "dense"], default="dense",
                    help="prefill attention: dense (attention_prefill per sequence) or paged (attention_decode per token)")
    ap.add_argument("--no-graph", action="store_true")
    ap.add_argument("--mlp", choices=["auto", "gated_mlp", "silu_and_mul"], default="auto")
    ap.add_argument("--tol", type=float, default=2e-2)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16",
                    help="the engine's dtype (f32: kernels checked to --tol against f32 transformers)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    if args.layers:
        import dataclasses

        cfg = dataclasses.replace(cfg, num_layers=args.layers)
    log = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    res = check(cfg, args.prompt_len, args.steps, args.seed, args.ref_dtype, not args.no_graph,
                args.prefill_attention, tol=args.tol, log=log, mlp=args.mlp, dtype=args.dtype)
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:36} {v}")
        print("PASS" if res["pass"] else "FAIL")
    return 0 if res["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
