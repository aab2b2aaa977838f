"""Debug probe (device): which argmax variants hang. Each case in its own process with a timeout."""
import subprocess, sys
CASE = r'''
import sys, torch, cupy
from tilex.stdlib import _launch as L
dt, block, warps, b, v, lib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
mod = L.load("argmax", kernel="argmax", T=dt, BLOCK=block, WARPS=warps)
tdt = {"f32": torch.float32, "bf16": torch.bfloat16}[dt]
x = torch.randn(b, v, device="cuda", dtype=tdt); ids = torch.empty(b, device="cuda", dtype=torch.int64)
if lib == "cupy":
    xc, ic = cupy.from_dlpack(x), cupy.from_dlpack(ids); torch.cuda.synchronize()
    mod.kernel("argmax")(xc, ic); cupy.cuda.Device().synchronize()
else:
    mod.kernel("argmax")(x, ids); torch.cuda.synchronize()
print("ok", torch.equal(ids, x.float().argmax(-1)))
'''
cases = [("f32", 8, 1, 1, 1, "torch"), ("f32", 256, 1, 1, 200, "torch"), ("f32", 512, 2, 1, 500, "torch"),
         ("f32", 1024, 4, 1, 1024, "torch"), ("f32", 1024, 4, 3, 1001, "torch"), ("f32", 1024, 4, 3, 1001, "cupy"),
         ("bf16", 1024, 4, 3, 1001, "torch"), ("f32", 2048, 8, 2, 5000, "torch")]
for c in cases:
    try:
        r = subprocess.run([sys.executable, "-c", CASE, *map(str, c)], capture_output=True, text=True, timeout=25)
        print(c, r.stdout.strip() or r.stderr.strip()[-300:], flush=True)
    except subprocess.TimeoutExpired:
        print(c, "HANG (25 s)", flush=True)
