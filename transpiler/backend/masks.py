"""The additive-mask convention shared by the attention patterns and the kernels they lower to."""

# An additive mask value at or below this removes its key: exp(score + v - max) is 0 in f32 (it underflows below
# exp(-103.9)) whenever the row allows some key and its scores lie within 65400 of each other, which every finite
# bf16/f16 attention score of a real model does. The value is f16's lowest, -65504: HF builds additive masks with
# torch.finfo(dtype).min (-3.4e38 in bf16/f32, -65504 in f16) and PyTorch's cuDNN SDPA turns a bool mask into
# where(mask, 0, -65504) (-65536 once rounded to bf16), so all of these stay on the kernels that skip the key.
MASKED_AT = -65504.0
