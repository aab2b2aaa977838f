"""Probe: what torch._C._set_storage_access_error_msg does to a CUDA tensor on this torch (which accesses raise),
and what the tilex backend's cuda_graphs="borrow" runner hands out and expires.
    python3 benchmarks/probe_borrow.py"""
import torch

import tilex.backend  # noqa: F401
from tilex.backend.cudagraphs import CudaGraphs


def tries(t, label):
    for name, fn in [("sum", lambda: t.sum().item()), ("data_ptr", t.data_ptr), ("add", lambda: (t + 1).shape),
                     ("cpu", lambda: t.cpu().shape), ("storage.data_ptr", lambda: t.untyped_storage().data_ptr())]:
        try:
            fn()
            print(f"{label}: {name} did not raise")
        except Exception as e:  # noqa: BLE001
            print(f"{label}: {name} raised {type(e).__name__}: {str(e)[:80]}")


base = torch.randn(64, 64, device="cuda")
st = CudaGraphs.share(base.untyped_storage())
a = torch.empty(0, device="cuda").set_(st, 0, base.shape, base.stride())
print("torch", torch.__version__, "alias shares memory:", a.data_ptr() == base.data_ptr())
CudaGraphs.expire(a, "EXPIRED-MSG")
tries(a, "alias after expire")
tries(base, "base after alias expired")
progs = []
f = lambda x, w: torch.tanh(x @ w) * 2.0  # noqa: E731
w = torch.randn(64, 96, device="cuda")
cf = torch.compile(f, backend="tilex", options={"programs": progs, "cuda_graphs": "borrow"})
outs = [cf(torch.randn(33, 64, device="cuda"), w) for _ in range(5)]
r = progs[0].graph_runner
print("replays", r.replays, "expired", r.expired, "clone_outputs", r.clone_outputs, "own", r.own,
      "handed", len(r.handed), "ids distinct", len({id(o) for o in outs}), "type", type(outs[2]))
print("handed[0] is outs[-1]:", bool(r.handed) and r.handed[0] is outs[-1])
tries(outs[2], "outs[2] (overwritten by replay 2)")
tries(outs[-1], "outs[-1] (the latest)")
