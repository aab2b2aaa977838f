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
    tilex.compile("stdlib_kernels/linear.tile", PROGRAMS=3).linear_persistent(x, w, torch.empty(m, n, **bf))
for m, n, k in [(1, 8, 70), (37, 45, 33)]:
    linear(torch.randn(m, k, **bf), torch.randn(n, k, **bf))
a, bb = torch.randn(37, 72, **bf), torch.randn(72, 136, **bf)
tilex.compile("examples/matmul.tile").matmul(a, bb, torch.empty(37, 136, **bf))
torch.cuda.synchronize()
print("sanitize_matmul: done")
