"""The additive-mask convention shared by the attention patterns and the kernels they lower to."""

# An additive mask value at or below this removes its key exactly: with the diagonal allowed (a causal row), the
# row maximum is a finite score, and exp(score + v - max) underflows to 0 in f32 for any |score| < 1e29. HF builds
# its additive masks with torch.finfo(dtype).min (-3.4e38 in bf16/f32, -65504 in f16: f16's is not below it).
MASKED_AT = -1e30
