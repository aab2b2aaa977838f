"""Host cost of tilex.stdlib.linear at M=512, K=N=5120 with and without the persistent kernel (GPU).

    python3 benchmarks/host_ab_linear.py
Per call: Python time to return (host) and wall time including the GPU (300 calls, synchronized once),
alternating the two paths twice. An eager call is host-bound when host ~ wall.
"""
import time, torch
import tilex.stdlib.linear as LM
from tilex.stdlib import linear
x = torch.randn(512, 5120, device="cuda", dtype=torch.bfloat16)
w = torch.randn(5120, 5120, device="cuda", dtype=torch.bfloat16)
for flag in (True, False, True, False):
    LM._PERSISTENT = flag
    for _ in range(20): linear(x, w)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(300): linear(x, w)
    t1 = time.perf_counter(); torch.cuda.synchronize(); t2 = time.perf_counter()
    print(f"persistent={flag}: host {1e6*(t1-t0)/300:.1f} us/call, wall {1e6*(t2-t0)/300:.1f} us/call")
