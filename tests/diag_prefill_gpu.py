"""Diagnostic (not a test; run on a GPU): why the tiny Qwen2 bf16 prefill (test_backend_plans_gpu's
test_profiler_kinds_of_a_compiled_prefill) launches torch kernels: prints the SDPA nodes of the lowered graphs
(their arguments' shapes, strides, dtypes, the step kind, the library check's fallbacks), every eager step,
every generated step that copies an input (with that input's layout), and the profiler's torch kernels."""
from __future__ import annotations

import torch
import transformers

import tilex.backend  # noqa: F401  (registers "tilex")
from tilex.backend import kernel_kinds as K


def arg(a):
    v = getattr(a, "meta", {}).get("val")
    if isinstance(v, torch.Tensor):
        return f"{a.name}{tuple(v.shape)}/{tuple(v.stride())}:{str(v.dtype)[6:]}"
    return repr(a)[:50]


def main():
    cfg = transformers.Qwen2Config(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).eval().to(device="cuda", dtype=torch.bfloat16)
    ids = torch.randint(0, 96, (2, 37), device="cuda", generator=torch.Generator("cuda").manual_seed(7))
    progs = []
    cm = torch.compile(model, backend="tilex", options={"programs": progs})
    with torch.no_grad():
        table = K.profile_kernels(lambda: cm(ids, use_cache=False), 2)
    print("torch kernels:", K.summary(table)["torch_kernels"])
    for gi, p in enumerate(progs):
        print(f"graph {gi}: {p.summary()}")
        for s in p.steps:
            for n in s.nodes:
                if "scaled_dot_product" in str(n.target):
                    print(f"  SDPA in a {s.kind} step ({s.label}, fallbacks {s.fallbacks}): {n.target}(" +
                          ", ".join(arg(a) for a in n.args) + f") {n.kwargs}")
            if s.kind == "library" and "attention" in s.label:
                m = s.match
                print(f"  library {s.label}: calls {s.calls} fallbacks {s.fallbacks} args " +
                      ", ".join(arg(a) for a in m.args))
            if s.kind == "eager":
                n = s.nodes[0]
                print(f"  eager {n.name} {n.target}(" + ", ".join(arg(a) for a in n.args) + f") {n.kwargs}")
            if s.kind == "generated" and s.copies:
                ins = [op for op in s.kernel.inputs]
                print(f"  generated {s.label} copies {s.copies}/{s.calls} calls; ops {s.kernel.members}; inputs " +
                      ", ".join(f"{arg(op.node)}[{op.rows}]" for op in ins))
        sd = [n for n in p.gm.graph.nodes if "scaled_dot_product" in str(n.target)]
        for n in sd:  # the mask's producers, three levels up
            for a in [*n.args[3:4], n.kwargs.get("attn_mask")]:
                chain, node = [], a
                for _ in range(4):
                    if not hasattr(node, "target"):
                        break
                    chain.append(f"{node.name}={node.target}(" + ", ".join(arg(x) for x in node.args) + ")")
                    node = node.args[0] if node.args else None
                print("  mask chain:", " <- ".join(chain))


if __name__ == "__main__":
    main()
