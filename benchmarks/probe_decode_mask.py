"""Probe: what mask the compiled HF decode step hands the backend's decode attention on this device (its dtype,
its values, the FX nodes that build it) and which rows attention_mask_table marks for the masked_attention pass.
    python3 benchmarks/probe_decode_mask.py [--device cuda] [--dtype bf16]"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import transformers
from torch.fx import Node

import tilex.backend  # noqa: F401  (registers "tilex")
from tilex.backend import decodeattn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_backend_hf import tiny  # noqa: E402


def chain(node, depth=6):
    out = []
    while isinstance(node, Node) and depth:
        out.append(f"{node.name}={node.target}")
        node = next((a for a in node.all_input_nodes), None)
        depth -= 1
    return " <- ".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    a = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "f32": torch.float32}[a.dtype]
    model = tiny("qwen2").to(a.device, dt)
    seen = []
    orig_table = decodeattn.mask_table_source

    real = decodeattn.decode_attention

    def spy(q, k, v, mask, scale, launched=None):
        o = real(q, k, v, mask, scale, launched)
        vals = torch.unique(mask.float()).tolist()
        seen.append((str(mask.dtype), tuple(mask.shape), vals[:4] + (["..."] if len(vals) > 4 else [])))
        return o
    decodeattn.decode_attention = spy
    rows_pass = decodeattn.masked_attention

    def spy_rows(*args, **kw):
        if kw.get("rows_of") is not None:
            print("masked_attention rows pass: lens", kw["rows_of"][0].tolist()[:16])
        return rows_pass(*args, **kw)
    decodeattn.masked_attention = spy_rows
    del orig_table
    cache = transformers.StaticCache(config=model.config, max_cache_len=40)
    ids = torch.randint(0, 96, (1, 16), device=a.device)
    progs = []
    fn = torch.compile(model, backend="tilex", options={"programs": progs})
    with torch.no_grad():
        model(ids, past_key_values=cache, cache_position=torch.arange(16, device=a.device), use_cache=True)
        for i in range(2):
            fn(torch.randint(0, 96, (1, 1), device=a.device), past_key_values=cache,
               cache_position=torch.tensor([16 + i], device=a.device), use_cache=True)
    for s in seen[:2]:
        print("mask seen by decode_attention:", s)
    for p in progs:
        for st in p.steps:
            if st.kind == "library" and st.match.kernel in ("attention_decode", "masked_attention"):
                print(st.match.kernel, "mask arg:", chain(st.match.args[3]))
                sd = next(n for n in st.match.interior if "scaled_dot" in str(n.target))
                print("  sdpa node:", sd.target, "mask operand:", chain(sd.args[3] if len(sd.args) > 3 else None))
                break


if __name__ == "__main__":
    main()
