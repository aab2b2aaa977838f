"""Run every tensor-core main loop at odd sizes once (for compute-sanitizer memcheck)."""
import torch

import tilex
from tilex.stdlib import gated_mlp, linear

torch.manual_seed(0)
bf = dict(device="cuda", dtype=torch.bfloat16)
for m, n, k in [(1, 8, 8), (37, 45, 72), (130, 264, 200), (257, 300, 136)]:
    x, w, b = torch.randn(m, k, **bf), torch.randn(n, k, **bf), torch.randn(n, **bf)
    linear(x, w)
    linear(x, w, b)
    gated_mlp(x, w, w)
    mod = tilex.compile("stdlib_kernels/linear.tile", BM=64, BN=128, BK=128, STAGES=3)
    mod.linear(x, w, torch.empty(m, n, **bf))
    per = tilex.compile("stdlib_kernels/linear.tile", PROGRAMS=3)
    per.linear_persistent(x, w, torch.empty(m, n, **bf))
    per.gated_mlp_persistent(x, w, w, torch.empty(m, n, **bf))
    if m <= 16:  # the decode kernels (swapped operands), both tile configurations, and K shares
        for cfg in (dict(BN=64, BK=128, STAGES=6), dict(BN=128, BK=64, STAGES=6)):
            sw = tilex.compile("stdlib_kernels/linear.tile", **cfg)
            sw.linear_swap(x, w, torch.empty(m, n, **bf))
            sw.linear_swap_bias(x, w, b, torch.empty(m, n, **bf))
            sw.linear_swap_splitk(x, w, torch.empty(3, m, n, device="cuda", dtype=torch.float32))
for m, n, k in [(1, 8, 70), (37, 45, 33)]:
    linear(torch.randn(m, k, **bf), torch.randn(n, k, **bf))
a, bb = torch.randn(37, 72, **bf), torch.randn(72, 136, **bf)
tilex.compile("examples/matmul.tile").matmul(a, bb, torch.empty(37, 136, **bf))
# the guarded matmul (shifted cp.async rings): odd pitches, unaligned views, edge tiles; split-K at any M
mm = tilex.compile("examples/matmul.tile")
for (m, n, k), (oa, ob) in [((203, 999, 1001), (0, 0)), ((37, 45, 33), (1, 3)), ((130, 257, 129), (5, 0))]:
    a = torch.randn(m * k + oa, **bf)[oa:].view(m, k)
    bb = torch.randn(k * n + ob, **bf)[ob:].view(k, n)
    for cfg in (dict(BM=64, BN=128, BK=32, STAGES=3), dict(BM=16, BN=64, BK=64, STAGES=2)):
        mm.variant("matmul", cfg, ())(a, bb, torch.empty(m, n, **bf))
    mm.matmul(a, bb, torch.empty(m, n, **bf))
sk = tilex.compile("stdlib_kernels/linear.tile", BM=128, BN=128, BK=64, STAGES=4)
for m, n, k, s in [(100, 300, 1000, 3), (37, 45, 72, 5)]:
    sk.linear_splitk_tiles(torch.randn(m, k, **bf), torch.randn(n, k, **bf),
                           torch.empty(s, m, n, device="cuda", dtype=torch.float32))
torch.cuda.synchronize()
print("sanitize_matmul: done")
