"""Run the persistent GEMM whose tiles are stored by TMA (linear_persistent_tma) at odd sizes once, for
compute-sanitizer memcheck: one staging round, two rounds (BN=256, 4 stages), one and four consumer warpgroups, and
few programs walking many tiles (the staging buffer reused); the 192- and 160-column kernels (_tma3, _tma5) too, and
the library's `linear` on the paths that take them by default. benchmarks/sanitize_matmul.py covers the other kernels."""
import torch

import tilex

torch.manual_seed(0)
bf = dict(device="cuda", dtype=torch.bfloat16)
mod = tilex.compile("stdlib_kernels/linear.tile")
for cfg in (dict(PROGRAMS=3), dict(BN=256, PROGRAMS=3), dict(BM=64, STAGES=6, PROGRAMS=5), dict(BM=256, PROGRAMS=7)):
    one = mod.variant("linear_persistent_tma", cfg, ())  # translated alone: -D BM=256 does not build the others
    # 192-column tiles at BM <= 128 (four warpgroups of 96 accumulators each do not fit in 640 threads' registers)
    three = mod.variant("linear_persistent_tma3", {c: v for c, v in cfg.items() if c != "BN" and cfg.get("BM") != 256}, ())
    five = mod.variant("linear_persistent_tma5", {c: v for c, v in cfg.items() if c != "BN" and cfg.get("BM") != 256}, ())
    for m, n, k in [(1, 8, 8), (37, 136, 72), (130, 264, 200), (257, 2560, 136)]:
        x, w = torch.randn(m, k, **bf), torch.randn(n, k, **bf)
        one(x, w, torch.empty(m, n, **bf))
        three(x, w, torch.empty(m, n, **bf))  # 192-column tiles: one wgmma, three stores
        five(x, w, torch.empty(m, n, **bf))  # 160-column tiles: one wgmma, five register stores
# tilex.stdlib.linear's default paths at odd sizes: 128x192 (persistent3), 128x160 (persistent5), TMA-stored 128x128
import tilex.stdlib as S  # noqa: E402

for m, k, n in [(4001, 1032, 4600), (509, 4104, 5128), (333, 2056, 4808)]:
    S.linear(torch.randn(m, k, **bf), torch.randn(n, k, **bf))
torch.cuda.synchronize()
print("sanitize_tma_store: done")
