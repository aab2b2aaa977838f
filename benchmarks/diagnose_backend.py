"""What the tilex backend compiles for a model, found on a CPU (no GPU, no weights): the model is built
from a config under FakeTensorMode (CPU fake tensors: no memory), traced by Dynamo + AOTAutograd as the
backend does, and lowered (Program.lower); nothing runs. For prefill shapes and (unless --skip-decode)
decode steps against a StaticCache it prints, per graph and in all:
  steps by kind and the eager fallbacks;
  generated steps, distinct generated kernels and builds ((source, RB, CB): what Program.prepare builds),
  the translation time of each distinct build, and with --nvcc its `nvcc -cubin` time for sm_90a;
  library calls by kernel and operand shapes, and for linear / gated_mlp the stdlib's tile choice
  (tilex.stdlib.linear's own model; its private helpers, so this is a diagnostic, not an API):
  each distinct (kernel, configuration) is one library module build on the GPU.

    python benchmarks/diagnose_backend.py --layers 4 [--hidden 3584 --heads 28 --kv-heads 4 --inter 18944]
        [--shapes 1x512,16x512] [--skip-decode] [--nvcc] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def build_fake(args, fm):
    import transformers

    cfg = transformers.Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.inter,
                                   num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                   num_key_value_heads=args.kv_heads, max_position_embeddings=4096,
                                   attn_implementation="sdpa")
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with fm:
            return transformers.Qwen2ForCausalLM(cfg).eval(), cfg
    finally:
        torch.set_default_dtype(old)


def lowering_backend(progs):
    from torch._dynamo.backends.common import aot_autograd

    import tilex.backend as B
    from tilex.backend.program import Program

    def fw(gm, inputs):
        progs.append(Program.lower(gm))
        return gm  # runs on the fake tensors: nothing is computed
    return aot_autograd(fw_compiler=fw, keep_inference_input_mutations=True, decompositions=B._decompositions())


def library_calls(prog) -> list:
    """(label, operand shapes) of each library step."""
    from tilex.backend.fusion import tensor_meta

    out = []
    for s in prog.steps:
        if s.kind != "library":
            continue
        shapes = tuple(tuple(int(d) for d in tensor_meta(a).shape) if tensor_meta(a) is not None else None
                       for a in s.match.args if hasattr(a, "meta"))
        out.append((s.match.kernel, shapes))
    return out


def stdlib_choice(label: str, shapes: tuple, dt: str):
    """The stdlib's (kernel, tiles) for a linear / gated_mlp call on the GPU (None for other kernels)."""
    Lm = sys.modules.get("tilex.stdlib.linear")
    if Lm is None:
        import tilex.stdlib  # noqa: F401

        Lm = sys.modules["tilex.stdlib.linear"]
    try:
        if label == "linear":
            x, w = shapes[0], shapes[1]
            bias = len(shapes) > 2 and shapes[2] is not None
            m, k, n = int(torch.Size(x[:-1]).numel()), x[-1], w[0]
            if Lm._use_split_kernels(m, n, k):
                return ("linear_splitk+splitk_sum", tuple(sorted(Lm._SPLITK.items())))
            if Lm._use_swap(m, k, True):
                return ("linear_swap_bias" if bias else "linear_swap", tuple(sorted(Lm._swap_config(n).items())))
            kern = "linear_bias" if bias else "linear"
            cfg = Lm._model_config(kern, dt, m, n, k, Lm._SPACE, Lm._config(m, Lm._SKINNY, Lm._MEDIUM, Lm._LARGE))
            if kern == "linear" and cfg == Lm._LARGE and m > 64 and Lm._PERSISTENT:
                kern = "linear_persistent"
            return (kern, tuple(sorted(cfg.items())))
        if label == "gated_mlp":
            x, wg = shapes[0], shapes[1]
            m, k, n = int(torch.Size(x[:-1]).numel()), x[-1], wg[0]
            cfg = Lm._model_config("gated_mlp", dt, m, n, k, Lm._GATED_SPACE,
                                   Lm._config(m, Lm._GATED_SKINNY, Lm._GATED, Lm._GATED))
            kern = "gated_mlp_persistent" if m > 64 and cfg == Lm._GATED and Lm._PERSISTENT else "gated_mlp"
            return (kern, tuple(sorted(cfg.items())))
    except Exception as e:  # the private helpers changed: say so, do not guess
        return ("unknown", (("error", f"{type(e).__name__}: {e}"),))
    return None


def nvcc_seconds(source: str, name: str, defines: dict) -> float:
    from tilex.pipeline import Options
    from tilex.translate import translate

    t = translate(source, f"{name}.tile", Options(defines=defines, arch="sm_90a"))
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "k.cu").write_text(t.cuda)
        t0 = time.perf_counter()
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "--std=c++17", "-w", "k.cu", "-o", "k.cubin"], cwd=d,
                       check=True, capture_output=True)
        return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=3584)
    ap.add_argument("--heads", type=int, default=28)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--inter", type=int, default=18944)
    ap.add_argument("--vocab", type=int, default=152064)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--shapes", default="1x512,16x512")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--nvcc", action="store_true", help="time nvcc -cubin of each distinct generated build")
    ap.add_argument("--json")
    args = ap.parse_args()

    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tilex.backend import kernels

    fm = FakeTensorMode(allow_non_fake_inputs=True)
    model, cfg = build_fake(args, fm)
    graphs = {}
    for shape in args.shapes.split(","):
        b, s = (int(v) for v in shape.split("x"))
        progs: list = []
        torch._dynamo.reset()
        cm = torch.compile(model, backend=lowering_backend(progs))
        with torch.no_grad(), fm:
            cm(torch.zeros(b, s, dtype=torch.long), use_cache=False)
        graphs[f"prefill {shape}"] = progs
    if not args.skip_decode:
        for b in (1, 16):
            progs = []
            torch._dynamo.reset()
            cm = torch.compile(model, backend=lowering_backend(progs))
            with torch.no_grad(), fm:
                cache = transformers.StaticCache(config=cfg, max_cache_len=256)
                cm(torch.zeros(b, 128, dtype=torch.long), past_key_values=cache, cache_position=torch.arange(128),
                   use_cache=True)
                for pos in (128, 129):  # the first decode call may still be the lazily initializing graph
                    cm(torch.zeros(b, 1, dtype=torch.long), past_key_values=cache,
                       cache_position=torch.tensor([pos]), use_cache=True)
            graphs[f"decode b{b} (prefill 128, static cache 256)"] = progs
    dt = {"bf16": "bf16", "f16": "f16", "f32": "f32"}[args.dtype]
    builds_all: dict = {}
    library_all: dict = {}
    report = {"args": vars(args), "graphs": {}}
    for name, progs in graphs.items():
        for i, p in enumerate(progs):
            launches = p.kernel_launches()
            builds_all.update({k: v for k, v in launches.items()})
            lib = library_calls(p)
            choices: dict = {}
            for label, shapes in lib:
                c = stdlib_choice(label, shapes, dt)
                key = c if c is not None else (label, shapes)
                choices[key] = choices.get(key, 0) + 1
                library_all[key] = library_all.get(key, 0) + 1
            gen = [s for s in p.steps if s.kind == "generated"]
            entry = {"steps": p.summary(), "eager": sorted({t for _, t in p.fallbacks()}),
                     "generated_steps": len(gen), "distinct_generated": len({s.kernel.source for s in gen}),
                     "generated_builds": len(launches), "library_steps": len(lib),
                     "library_builds": len(choices)}
            report["graphs"][f"{name} #{i}"] = entry
            print(f"{name} graph {i}: {json.dumps(entry)}")
    t_trans, t_nvcc = {}, {}
    for (source, kname, items) in builds_all:
        t0 = time.perf_counter()
        kernels.module(source, items)
        t_trans[f"{kname} {dict(items)}"] = round(time.perf_counter() - t0, 3)
        if args.nvcc:
            t_nvcc[f"{kname} {dict(items)}"] = round(nvcc_seconds(source, kname, dict(items)), 2)
    report["generated_builds"] = {"count": len(builds_all), "translate_s": t_trans, "nvcc_s": t_nvcc}
    report["library_builds"] = [{"kernel": k[0], "config_or_shapes": str(k[1]), "calls": v}
                                for k, v in library_all.items()]
    print(f"in all: {len(builds_all)} generated builds (translation {sum(t_trans.values()):.2f} s"
          + (f", nvcc {sum(t_nvcc.values()):.1f} s serial" if t_nvcc else "") + f"), "
          f"{len(library_all)} distinct library (kernel, configuration) builds:")
    for k, v in sorted(library_all.items(), key=lambda kv: str(kv[0])):
        print(f"  {k[0]:28s} {str(k[1])[:110]}  x{v}")
    if t_nvcc:
        print("nvcc seconds per generated build:", json.dumps(t_nvcc))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
