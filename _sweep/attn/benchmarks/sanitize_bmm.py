"""Run every batched main loop (examples/bmm*.tile, head_scores.tile) at odd sizes once, for compute-sanitizer:

    compute-sanitizer --tool memcheck python benchmarks/sanitize_bmm.py

sm_90a: TMA with 3-D/4-D tensor maps + wgmma (with `where`), the cp.async + mma.sync ring (bmm without `where`,
unaligned K and N), the persistent kernel with several tiles per block; a batch index past the tensor (zeros)."""
from pathlib import Path

import torch

import tilex

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"
torch.manual_seed(0)
bf = dict(device="cuda", dtype=torch.bfloat16)
bmm = tilex.compile(str(EX / "bmm.tile"))
bmm_small = tilex.compile(str(EX / "bmm.tile"), BM=64, BN=128, STAGES=3)
pers = tilex.compile(str(EX / "bmm_persistent.tile"), PROGRAMS=5)
any_size = tilex.compile((EX / "bmm.tile").read_text().replace("    where K % 8 == 0, N % 8 == 0\n", "", 1))
for b, m, n, k in [(1, 1, 8, 8), (3, 70, 136, 200), (2, 129, 264, 520), (5, 37, 72, 64)]:
    x, y = torch.randn(b, m, k, **bf), torch.randn(b, k, n, **bf)
    for mod in (bmm, bmm_small):
        mod.bmm(x, y, torch.empty(b, m, n, **bf))
    pers.bmm_persistent(x, y, torch.empty(b, m, n, **bf))
for b, m, n, k in [(3, 70, 45, 70), (1, 1, 8, 33), (2, 64, 128, 1)]:
    any_size.bmm(torch.randn(b, m, k, **bf), torch.randn(b, k, n, **bf), torch.empty(b, m, n, **bf))
heads = tilex.compile(str(EX / "head_scores.tile"))
q, kk = torch.randn(2, 3, 33, 72, **bf), torch.randn(2, 3, 150, 72, **bf)
heads.head_scores(q, kk, torch.empty(2, 3, 33, 150, device="cuda", dtype=torch.float32), 0.125)
torch.cuda.synchronize()
print("sanitize_bmm: done")
