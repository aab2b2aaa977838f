"""The backend's attention against a static KV cache with a mask (decodeattn.py: attention_mask_table + the
library's attention_decode) against session 17's generated masked_attention and torch's SDPA, on one GPU.

For each case (Qwen2.5-7B heads: Hq 28, Hkv 4, D 128, bf16 unless --dtype; batch, cache length, mask kind):
  correctness first: max |o - ref| / max |ref| against SDPA in f32 (PASS/FAIL at 1e-2 bf16/f16, 1e-4 f32),
  for the tilex path and for masked_attention;
  CUDA-graph capture of the tilex path, new mask contents, replay: PASS/FAIL against SDPA again;
  timing: median ms over CUDA events (20 warm-up, 100 timed calls, each inside a CUDA graph of 1 call so the
  launch overhead is the graph's, as under cuda_graphs=True) of tilex, masked_attention and SDPA (eager), ratios.

    python benchmarks/bench_backend_attention.py [--dtype bf16] [--json out.json]
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F


def masks(kind: str, b: int, t: int, length: int, used: int, device):
    """[B, 1, T, L] bool: a causal prefix over `used` cached tokens (HF StaticCache decode), or left padding of
    a few tokens in every other sequence, or random holes."""
    pos = torch.arange(length, device=device)
    q = used - t + torch.arange(t, device=device)
    allowed = (pos[None, :] <= q[:, None]).expand(b, t, length).clone()
    if kind == "padded":
        allowed[::2, :, :5] = False
    elif kind == "holes":
        allowed &= torch.rand(b, t, length, device=device) > 0.3
        allowed[..., 0] = True
    return allowed[:, None]


def graph_ms(fn, warmup=20, rep=100) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(warmup):
        g.replay()
    times = []
    for _ in range(rep):
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def ref(q, k, v, mask, scale):
    g = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(g, 1),
                                          v.float().repeat_interleave(g, 1), attn_mask=mask, scale=scale)


def rel(a, b) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--json")
    args = ap.parse_args()
    from tilex.backend import cachegen, decodeattn

    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    tol = 1e-4 if dt == torch.float32 else 1e-2
    hq, hkv, d = 28, 4, 128
    scale = d ** -0.5
    gen = torch.Generator("cuda").manual_seed(0)
    rows = []
    cases = [(1, 1, 176, 150, "causal"), (16, 1, 176, 150, "causal"), (16, 1, 176, 150, "padded"),
             (1, 1, 1040, 1000, "causal"), (16, 1, 1040, 1000, "causal"), (4, 3, 333, 200, "holes")]
    for b, t, length, used, kind in cases:
        q = torch.randn(b, t, hq, d, device="cuda", generator=gen, dtype=dt).transpose(1, 2)
        k = torch.randn(b, hkv, length, d, device="cuda", generator=gen, dtype=dt)
        v = torch.randn(b, hkv, length, d, device="cuda", generator=gen, dtype=dt)
        mask = masks(kind, b, t, length, used, "cuda")
        r = ref(q, k, v, mask, scale)
        o = decodeattn.decode_attention(q, k, v, mask, scale)
        om = cachegen.masked_attention(q, k, v, mask, scale)
        row = {"case": f"B{b} T{t} L{length} used{used} {kind}", "err_tilex": rel(o, r), "err_masked": rel(om, r)}
        # capture, then new mask contents (one more token; padding moved) and replay
        static_mask = mask.clone()
        out = {}

        def run():
            out["o"] = decodeattn.decode_attention(q, k, v, static_mask, scale)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            run()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            run()
        new = masks(kind, b, t, length, used + 1, "cuda")
        if kind == "padded":
            new[1::2, :, :7] = False
        static_mask.copy_(new)
        g.replay()
        torch.cuda.synchronize()
        row["err_tilex_graph_replay"] = rel(out["o"], ref(q, k, v, new, scale))
        ok = row["err_tilex"] <= tol and row["err_tilex_graph_replay"] <= tol
        row["verdict"] = "PASS" if ok else "FAIL"
        row["ms_tilex"] = graph_ms(lambda: decodeattn.decode_attention(q, k, v, mask, scale))
        row["ms_masked_attention"] = graph_ms(lambda: cachegen.masked_attention(q, k, v, mask, scale))
        kr, vr = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
        row["ms_sdpa"] = graph_ms(lambda: F.scaled_dot_product_attention(q, kr, vr, attn_mask=mask, scale=scale))
        row["tilex_vs_sdpa"] = round(row["ms_sdpa"] / row["ms_tilex"], 3)
        row["tilex_vs_masked"] = round(row["ms_masked_attention"] / row["ms_tilex"], 3)
        rows.append(row)
        print(f"{row['verdict']} {row['case']}: err tilex {row['err_tilex']:.2e} (replay {row['err_tilex_graph_replay']:.2e})"
              f" masked {row['err_masked']:.2e} | ms tilex {row['ms_tilex']:.4f} masked {row['ms_masked_attention']:.4f}"
              f" sdpa {row['ms_sdpa']:.4f} | sdpa/tilex {row['tilex_vs_sdpa']} masked/tilex {row['tilex_vs_masked']}",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
