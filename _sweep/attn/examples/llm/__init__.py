"""A small inference engine for the Llama / Qwen2 family on tilex kernels (see README.md)."""
