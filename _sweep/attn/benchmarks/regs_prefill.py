"""Registers and local memory (spills) of attention_prefill as the runtime (NVRTC) builds it, per tiling."""
from cupy_backends.cuda.api import driver

import tilex.stdlib._launch as L

for cfg in (dict(BM=128, BN=64, WARPS=8), dict(BM=128, BN=128, WARPS=8), dict(BM=64, BN=64, WARPS=4)):
    mod = L.load("attention_prefill", T="bf16", D=128, CAUSAL=True, **cfg)
    fn = mod.kernel("attention_prefill")._function(0)
    print(cfg, "registers", driver.funcGetAttribute(4, fn.ptr), "local bytes", driver.funcGetAttribute(3, fn.ptr), flush=True)
