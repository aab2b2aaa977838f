"""tilex.torch: the kernel library, and your own kernels, as PyTorch custom ops.

    import tilex.torch                      # registers torch.ops.tilex.*
    y = torch.ops.tilex.rms_norm(x, w, 1e-6)

Each op has a fake rule (shapes, dtypes and the wrapper's checks, so torch.compile traces it without
a graph break and a bad shape fails at trace time with the launch-time message), runs CUDA tensors
on the generated kernels (torch's current stream, no synchronisation) and CPU tensors in the NumPy
interpreter (slow; for tests and machines without a GPU). Inference only: backward raises.
`tilex.torch.op(module, "kernel", name="mylib::foo")` makes a kernel of your own .tile file an op.
See docs/torch.md. Needs torch (the `torch` extra); `import tilex` alone does not import it.
"""
try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised where torch is missing
    raise ImportError("tilex.torch needs PyTorch: pip install 'tilex[torch]'") from e

from ._library import NAMESPACE, OPS  # noqa: E402  (registers the tilex:: ops)
from ._user import op  # noqa: E402

__all__ = ["NAMESPACE", "OPS", "op"]
