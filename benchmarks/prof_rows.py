"""One launch each of tilex's row kernels and torch.compile's (after warm-up), for ncu:

    ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section Occupancy -k regex:"rms_norm|softmax|triton" \
        python benchmarks/prof_rows.py
"""
import torch
import torch.nn.functional as F

import tilex.stdlib as S

g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(16384, 4096, generator=g, device="cuda").to(torch.bfloat16)
w = torch.randn(4096, generator=g, device="cuda").to(torch.bfloat16)
xs = torch.randn(4096, 32000, generator=g, device="cuda").to(torch.bfloat16)
rms = torch.compile(lambda x, w: F.rms_norm(x, (4096,), w, 1e-6))
sm = torch.compile(lambda x: torch.softmax(x, -1))
for _ in range(3):  # warm-up: compiles and caches everything
    S.rms_norm(x, w), rms(x, w), S.softmax(x), sm(x), S.softmax(xs), sm(xs)
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("profiled")
S.rms_norm(x, w), rms(x, w), S.softmax(x), sm(x), S.softmax(xs), sm(xs)
torch.cuda.synchronize()
