"""One attention_prefill launch (causal B4 Hq40 Hkv8 S4096 D128 bf16) after warm-up, for ncu."""
import torch

import tilex.stdlib as S

q = torch.randn(4, 40, 4096, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(4, 8, 4096, 128, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    S.attention_prefill(q, k, k)
torch.cuda.synchronize()
S.attention_prefill(q, k, k)
torch.cuda.synchronize()
