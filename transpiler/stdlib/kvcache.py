"""Paged KV-cache write."""
from __future__ import annotations

from . import _launch as L
from . import messages as M


@L.fastpath
def kv_cache_write(k, v, k_cache, v_cache, slot_mapping):
    """Write each token's k, v into the paged caches, in place.

    k, v: [tokens, Hkv, D]; k_cache, v_cache: [num_blocks, block_size, Hkv, D] (contiguous,
    same dtype); slot_mapping: [tokens] int32/int64, slot = block * block_size + offset.
    A negative slot skips its token (padding); so does a slot >= num_blocks * block_size.
    Returns (k_cache, v_cache).
    """
    dt = L.check_float("k", k, ndim=3)
    for name, x in (("v", v),):
        L.check_float(name, x, ndim=3)
        L.check_same_dtype(name, x, dt)
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        L.check_float(name, x, ndim=4)
        L.check_same_dtype(name, x, dt)
    idt = L.check_int("slot_mapping", slot_mapping, ndim=1)
    L.kind_of(k, v, k_cache, v_cache, slot_mapping)
    s, h, d = (int(n) for n in k.shape)
    L.check_shape("v", v, (s, h, d))
    nb, bs = int(k_cache.shape[0]), int(k_cache.shape[1])
    L.check_shape("k_cache", k_cache, (nb, bs, h, d))
    L.check_shape("v_cache", v_cache, (nb, bs, h, d))
    L.check_shape("slot_mapping", slot_mapping, (s,))
    from ..runtime.args import describe_array

    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not describe_array(x).c_contiguous:
            raise ValueError(M.not_contiguous_cache(name))
    if s and h * d and nb * bs:
        hd = h * d
        block = min(2048, max(8, L.next_pow2(hd)))
        warps = max(1, min(8, block // 256))
        mod = L.load("kv_cache_write", T=dt, I=idt, BLOCK=block, WARPS=warps)
        L.run(mod, "kv_cache_write", L.reshape(L.contiguous(k), (s, hd)), L.reshape(L.contiguous(v), (s, hd)),
              L.reshape(k_cache, (nb, bs, hd)), L.reshape(v_cache, (nb, bs, hd)), L.contiguous(slot_mapping))
    return k_cache, v_cache
