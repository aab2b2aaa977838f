"""One causal prefill attention call at the issue-4 shape (B4 Hq40 Hkv8 S4096 D128) for ncu: run under `ncu -k regex:attention`."""
import torch
from tilex.stdlib import attention_prefill
q = torch.randn(4, 40, 4096, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(4, 8, 4096, 128, device="cuda", dtype=torch.bfloat16)
v = torch.randn(4, 8, 4096, 128, device="cuda", dtype=torch.bfloat16)
for _ in range(2):
    attention_prefill(q, k, v)
torch.cuda.synchronize()
