"""One launch each of the library kernels that miss their targets (after warm-up), for ncu:

    ncu --clock-control none --set detailed -k regex:"attention|layer_norm|rope|softmax" \
        python benchmarks/prof_next.py

attention_prefill (causal B4 Hq40 Hkv8 S4096 D128, wgmma on sm_90a), attention_decode (B16 ctx4096, paged
blocks of 16, and its split reduction), layer_norm 16384x4096, rope T16384 Hq32 Hk8 D128 and softmax
4096x32000 (whole rows): the bench_attention.py / bench_stdlib.py shapes.
"""
import torch

import tilex.stdlib as S

dev, bf = "cuda", torch.bfloat16
g = torch.Generator(device=dev).manual_seed(0)


def randn(*shape):
    return torch.randn(shape, generator=g, device=dev).to(bf)


q, k, v = randn(4, 40, 4096, 128), randn(4, 8, 4096, 128), randn(4, 8, 4096, 128)
b, ctx, bs = 16, 4096, 16
nb = b * ctx // bs
kc, vc = randn(nb, bs, 8, 128), randn(nb, bs, 8, 128)
table = torch.randperm(nb, device=dev).to(torch.int32).reshape(b, ctx // bs)
lens = torch.full((b,), ctx, dtype=torch.int32, device=dev)
qd = randn(b, 40, 128)
x, w, bias = randn(16384, 4096), randn(4096), randn(4096)
qr, kr = randn(16384, 32, 128), randn(16384, 8, 128)
pos = torch.arange(16384, device=dev, dtype=torch.int64)
xs = randn(4096, 32000)


def once():
    S.attention_prefill(q, k, v, causal=True)
    S.attention_decode(qd, kc, vc, table, lens)
    S.layer_norm(x, w, bias, 1e-5)
    S.rope(qr, kr, pos, 1e6)
    S.softmax(xs)


for _ in range(3):  # warm-up: compiles and caches everything
    once()
torch.cuda.synchronize()
once()
torch.cuda.synchronize()
