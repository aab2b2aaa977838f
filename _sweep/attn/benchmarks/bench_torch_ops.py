"""tilex.torch on the GPU: a toy decoder layer (decode step) written with torch.ops.tilex, compiled with
torch.compile(mode="reduce-overhead") (PyTorch's CUDA graphs), against the same tilex.stdlib calls captured
directly in one torch.cuda.CUDAGraph; plus the eager per-call host time of an op against the library call.

    python benchmarks/bench_torch_ops.py [--tokens 1,16] [--hidden 4096] [--reps 200]

Prints, per token count, ms per layer for both and their ratio (compiled / direct; expected ~1.0: both
replay a CUDA graph of the same kernels), then the host time per eager call (torch.ops.tilex.rms_norm vs
tilex.stdlib.rms_norm, small input: dispatcher + fake-free eager path overhead). Needs a GPU (not run here).
"""
from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import tilex.torch  # noqa: F401  (registers torch.ops.tilex)
from tilex import stdlib as S

ops = torch.ops.tilex


class ToyDecoderLayer(nn.Module):
    """Llama-style decoder layer for decode tokens: norm, fused qkv + rope + cache write, paged attention,
    o_proj + residual + norm, gated MLP, down_proj. Weights are frozen parameters, the paged caches buffers
    (mutated in place: static inputs of the CUDA graph)."""

    def __init__(self, hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=11008, blocks=256, block_size=16,
                 dtype=torch.bfloat16, device="cuda"):
        super().__init__()
        self.q_size, self.kv_size = heads * head_dim, kv_heads * head_dim
        p = lambda *s: nn.Parameter(torch.randn(*s, dtype=dtype, device=device) * s[-1] ** -0.5,  # noqa: E731
                                    requires_grad=False)
        self.ln1, self.ln2 = p(hidden), p(hidden)
        self.qkv, self.o = p(self.q_size + 2 * self.kv_size, hidden), p(hidden, self.q_size)
        self.gate, self.up, self.down = p(inter, hidden), p(inter, hidden), p(hidden, inter)
        self.register_buffer("k_cache", torch.zeros(blocks, block_size, kv_heads, head_dim, dtype=dtype, device=device))
        self.register_buffer("v_cache", torch.zeros_like(self.k_cache))
        for cache in (self.k_cache, self.v_cache):  # fixed addresses: CUDA graphs may write them in place
            torch._dynamo.mark_static_address(cache)

    def forward(self, x, res, positions, slots, table, lens):
        h, res = ops.fused_add_rms_norm(x, res, self.ln1, 1e-6)
        q = ops.linear_qkv_rope_cache(h, self.qkv, self.q_size, self.kv_size, positions, self.k_cache,
                                      self.v_cache, slots, 10000.0, None)
        o = ops.attention_decode(q, self.k_cache, self.v_cache, table, lens, None, None)
        h, res = ops.linear_add_rms_norm(o.view(x.shape[0], self.q_size), self.o, res, self.ln2, 1e-6)
        return ops.linear(ops.gated_mlp(h, self.gate, self.up), self.down), res

    def direct(self, x, res, positions, slots, table, lens):
        """The same layer on tilex.stdlib called directly (no torch op layer)."""
        h, res = S.fused_add_rms_norm(x, res, self.ln1, 1e-6)
        q = S.linear_qkv_rope_cache(h, self.qkv, self.q_size, self.kv_size, positions, self.k_cache, self.v_cache,
                                    slots, 10000.0)
        o = S.attention_decode(q, self.k_cache, self.v_cache, table, lens)
        h, res = S.linear_add_rms_norm(o.view(x.shape[0], self.q_size), self.o, res, self.ln2, 1e-6)
        return S.linear(S.gated_mlp(h, self.gate, self.up), self.down), res


def layer_inputs(layer, tokens, context=200, seed=0):
    """One decode token per sequence; sequence t owns cache blocks [t * per, (t + 1) * per)."""
    dev, dt = layer.ln1.device, layer.ln1.dtype
    g = torch.Generator(device=dev).manual_seed(seed)
    hidden = layer.ln1.shape[0]
    bs = layer.k_cache.shape[1]
    per = layer.k_cache.shape[0] // tokens
    assert per * bs > context, "not enough cache blocks for the context"
    x = torch.randn(tokens, hidden, device=dev, dtype=dt, generator=g)
    res = torch.randn(tokens, hidden, device=dev, dtype=dt, generator=g)
    positions = torch.full((tokens,), context, device=dev, dtype=torch.int64)
    table = (torch.arange(tokens, device=dev)[:, None] * per + torch.arange(per, device=dev)).to(torch.int32)
    slots = (table[:, context // bs].long() * bs + context % bs)
    lens = torch.full((tokens,), context + 1, device=dev, dtype=torch.int32)
    return x, res, positions, slots, table, lens


def _time(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def direct_graph(layer, inputs):
    """layer.direct captured in a torch.cuda.CUDAGraph (after a warm-up that compiles the kernels)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            layer.direct(*inputs)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layer.direct(*inputs)
    return graph, out


def host_time(fn, reps=2000):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / reps * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", default="1,16")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--inter", type=int, default=11008)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--copy-inputs", action="store_true",
                    help="leave the per-step inputs unmarked: the compiled graph then copies them in before each "
                         "replay (by default they are static addresses, as an engine's persistent input buffers "
                         "and as in the direct graph)")
    a = ap.parse_args()
    torch.manual_seed(0)
    layer = ToyDecoderLayer(hidden=a.hidden, inter=a.inter)
    compiled = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
    print(f"{'tokens':>6} {'direct graph ms':>16} {'compiled ms':>12} {'ratio':>7} {'max |diff|':>11} "
          f"{'compiled host us':>17} {'replay host us':>15}")
    for tokens in map(int, a.tokens.split(",")):
        inputs = layer_inputs(layer, tokens)
        if not a.copy_inputs:
            for t in inputs:
                torch._dynamo.mark_static_address(t)
        graph, (y_direct, _) = direct_graph(layer, inputs)
        for _ in range(3):  # cudagraph trees: warm-up runs, then record, then replays
            y_comp, _ = compiled(*inputs)
        graph.replay()
        torch.cuda.synchronize()
        diff = (y_comp.float() - y_direct.float()).abs().max().item()
        ms_direct = _time(graph.replay, a.reps)
        ms_comp = _time(lambda: compiled(*inputs), a.reps)
        # host time of one call, without synchronising: above the GPU time, the compiled call is host-bound
        # (cudagraph trees' Python per call), whatever the kernels
        us_comp, us_replay = host_time(lambda: compiled(*inputs), 500), host_time(graph.replay, 500)
        print(f"{tokens:>6} {ms_direct:>16.4f} {ms_comp:>12.4f} {ms_comp / ms_direct:>7.3f} {diff:>11.3g} "
              f"{us_comp:>17.1f} {us_replay:>15.1f}")
    x = torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    us_op = host_time(lambda: ops.rms_norm(x, w, 1e-6))
    us_lib = host_time(lambda: S.rms_norm(x, w, 1e-6))
    print(f"eager host time per call, rms_norm [4, 1024] bf16: torch.ops.tilex {us_op:.1f} us, "
          f"tilex.stdlib {us_lib:.1f} us (+{us_op - us_lib:.1f} us for the op layer)")


if __name__ == "__main__":
    main()
