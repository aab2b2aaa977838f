"""Every tilex.stdlib function as a torch custom op `torch.ops.tilex.NAME`: a fake rule (output shapes
and the wrapper's checks, ._checks), one implementation for CUDA tensors (the generated kernels on
torch's current stream) and CPU tensors (the NumPy interpreter), and a backward that raises.

In-place variants (`fused_add_rms_norm_inplace`, `rope_inplace`, `kv_cache_write`, and the caches of
`linear_qkv_rope_cache`) declare `mutates_args`; every returned tensor is new (no output aliases an input).
The ops are defined in _ops_rows.py and _ops_matmul.py with the decorator of _registry.py; importing this
module registers them all.
"""
from . import _ops_matmul, _ops_rows  # noqa: F401 (defining the ops registers them)
from ._registry import NAMESPACE, OPS, _no_backward, forbid_grad_in_place, inference_only  # noqa: F401

