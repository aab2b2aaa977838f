"""The text of the kernel library's argument errors, in one place.

The stdlib wrappers raise these at launch; tilex.torch's fake rules raise the same text at
trace time (torch._check_with on symbolic sizes), so a bad shape reads the same either way.
Each function takes the values the message shows (shapes as tuples, dtypes as names).
"""
from __future__ import annotations


# ------------------------------------------------------------------- generic argument checks

def not_float(name, dt) -> str:
    return f"{name}: expected a float tensor (f32, f16 or bf16), got dtype {dt}"


def not_int(name, dt) -> str:
    return f"{name}: expected an integer tensor (int32 or int64), got dtype {dt}"


def wrong_rank(name, ndim, shape) -> str:
    return f"{name}: expected a {ndim}-D tensor, got shape {tuple(shape)}"


def too_few_dims(name, ndim_min, shape) -> str:
    return f"{name}: expected at least {ndim_min} dimension(s), got shape {tuple(shape)}"


def wrong_dtype(name, want, got) -> str:
    return f"{name}: expected dtype {want} (the dtype of the input), got {got}"


def wrong_shape(name, want, got) -> str:
    return f"{name}: expected shape {tuple(want)}, got {tuple(got)}"


def not_contiguous_cache(name) -> str:
    return f"{name}: the cache is written in place and must be contiguous"


def bad_theta(theta) -> str:
    return f"theta: expected a positive base, got {theta}"


# ------------------------------------------------------------------------- per wrapper

def empty_rows(name, shape) -> str:
    return f"{name}: the last dimension (normalized) must not be empty, got shape {tuple(shape)}"


FUSED_ADD_INPLACE_CONTIGUOUS = "fused_add_rms_norm(inplace=True) needs contiguous x and residual"


def odd_gate(shape) -> str:
    return f"x: the last dimension holds [gate | up] and must be even, got shape {tuple(shape)}"


def bad_approximate(approximate) -> str:
    return f"approximate: expected 'none' or 'tanh', got {approximate!r}"


def bad_dim(dim, nd) -> str:
    return f"dim: {dim} is out of range for a {nd}-D tensor"


def bad_layout(layout) -> str:
    return f"layout: expected 'bhsd' or 'bshd', got {layout!r}"


def bad_head_dim(name, d, head_dims) -> str:
    return f"{name}: head size {d} is not supported (use one of {', '.join(map(str, head_dims))})"


def prefill_heads(hq, hkv) -> str:
    return (f"q has {hq} heads, k and v have {hkv}: the query heads must be a multiple "
            "of the KV heads")


def decode_heads(hq, hkv) -> str:
    return (f"q has {hq} heads, the caches have {hkv}: the query heads must be a "
            "multiple of the KV heads")


def bad_block_size(bs) -> str:
    return f"k_cache: block size {bs} must be a power of two up to 256"


def block_table_rows(b, shape) -> str:
    return f"block_table: expected {b} rows (one per sequence), got shape {tuple(shape)}"


def bad_num_splits(ns) -> str:
    return f"num_splits must be in [1, 1024], got {ns}"


def linear_weight(k, shape) -> str:
    return f"weight: expected shape [out, {k}] to match x's last dimension {k}, got {tuple(shape)}"


def matmul_inner(k, shape) -> str:
    return f"b: expected shape [{k}, N] to match a's last dimension {k}, got {tuple(shape)}"


def bmm_shapes(a_shape, b_shape) -> str:
    return (f"bmm: a is [B, M, K] and b [B, K, N] with the same B and K, got a {tuple(a_shape)} and "
            f"b {tuple(b_shape)}")


def qkv_weight(n, k, q_size, kv_size, shape) -> str:
    return (f"weight: expected shape ({n}, {k}) for q_size {q_size} + 2 * kv_size {kv_size} "
            f"and in_features {k}, got {tuple(shape)}")


def gated_weight(name, n, k, shape) -> str:
    return f"{name}: expected shape ({n}, {k}), got {tuple(shape)}"


def gated_k(k) -> str:
    return f"gated_mlp needs in_features % 8 == 0 (16-byte rows for TMA), got {k}"


def rope_k_shape(s, d, q_shape, k_shape) -> str:
    return f"k: expected shape ({s}, Hk, {d}) to match q {tuple(q_shape)}, got {tuple(k_shape)}"


def bad_rotary_dim(d, rotary_dim) -> str:
    return f"rotary_dim: expected an even number in (0, {d}], got {rotary_dim}"


def rope_inplace_contiguous(name) -> str:
    return f"{name}: rope(inplace=True) needs a contiguous tensor"


def qkv_heads(q_size, kv_size, hkv, d) -> str:
    return (f"q_size {q_size} and kv_size {kv_size} must be whole heads of the caches' "
            f"head_dim {d} (kv_size = Hkv * D = {hkv * d})")


def no_out_features(shape) -> str:
    return f"weight: no output features (shape {tuple(shape)}): the norm needs a non-empty row"


EMPTY_VOCAB = "logits: the vocabulary dimension must not be empty"


def bad_temperature(t) -> str:
    return f"temperature: expected >= 0, got {t}"


def bad_top_p(p) -> str:
    return f"top_p: expected a value in (0, 1], got {p}"


def bad_topk_k(k, v) -> str:
    return f"topk: k must be an int from 1 to the last dimension ({v}), got {k!r}"


def topk_too_large(k, max_k) -> str:
    return f"topk: k={k} is more than the {max_k} this kernel supports"
