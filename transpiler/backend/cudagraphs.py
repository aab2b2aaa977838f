"""CUDA graphs for static shapes (options={"cuda_graphs": True}): a Program captured once and
replayed, so a call costs one graph launch instead of a launch per kernel (decode).

Call 1 runs the program normally (kernels compile, constants fold, the SDPA mask check decides).
Call 2 captures it. Used in place (their addresses baked into the graph): the inputs AOTAutograd calls
static (parameters, buffers, tensors marked with mark_static_address: `static` indices) and the inputs
the graph mutates (a KV cache written in place) when their storage is the one of call 1; without
`static` indices, every input whose storage is the same as in call 1 (the old rule). The others
(token ids, positions, masks) are copied into static buffers that later calls refill. Each replay's
outputs are cloned out of the graph's memory, so results stay valid after the next call. Inputs with
symbolic sizes, CPU tensors, a mutated input that is not used in place, or an in-place input that
moved since capture run the program without a graph.

A graph that writes one of its inputs in place (HF's StaticCache at decode) runs without a CUDA graph for
now: on the H200 (session 17) its replays gave tokens different from eager from the fourth generated
token on (tests/test_backend_decode.py::test_generate_cuda_graphs_replays_match_eager), while the same
program without a graph matched eager. The cause is not found yet (a value the first call decides on the
host, e.g. a mask check, frozen into the graph, is the first suspect), so such graphs are refused rather
than replayed wrong.
"""
from __future__ import annotations

import logging

import torch

log = logging.getLogger("tilex.backend")


class GraphRunner:
    def __init__(self, prog, static: list | None = None, mutated: set | None = None):
        self.prog = prog
        self.static_idx = None if static is None else set(static)
        self.mutated = set(mutated or ())
        # see the module docstring: in-place (KV cache) graphs are not replayed until their replays are right
        self.disabled = bool(self.mutated)
        if self.disabled:
            log.warning("tilex backend: cuda_graphs is off for a graph that writes its inputs in place (a KV "
                        "cache): its replays were wrong on the H200; the program runs without a CUDA graph")
        self.calls = 0
        self.warm_ptrs = None
        self.graph = None
        self.static = None
        self.borrowed = None
        self.out = None
        self.replays = 0

    def __call__(self, *args):
        if not all(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            return self.prog(*args)  # symbolic sizes or CPU tensors: no graph
        self.calls += 1
        if self.calls == 1:
            self.warm_ptrs = [a.data_ptr() for a in args]
            return self.prog(*args)
        if self.disabled:
            return self.prog(*args)
        if self.graph is None:
            self._capture(args)
            if self.graph is None:
                return self.prog(*args)
        for a, s, b in zip(args, self.static, self.borrowed):
            if b:
                if a.data_ptr() != s.data_ptr():
                    log.info("tilex backend: a weight moved since the CUDA graph was captured; running without it")
                    return self.prog(*args)
            else:
                s.copy_(a)
        self.graph.replay()
        self.replays += 1
        return _clone(self.out)

    def _capture(self, args):
        same = [a.data_ptr() == p for a, p in zip(args, self.warm_ptrs)]
        self.borrowed = in_place(same, self.static_idx, self.mutated)
        if self.borrowed is None:
            log.info("tilex backend: a mutated input moved between calls 1 and 2; running without a CUDA graph")
            self.disabled = True
            return
        self.static = [a if b else a.clone() for a, b in zip(args, self.borrowed)]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.prog(*self.static)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.prog(*self.static)


def in_place(same: list, static: set | None, mutated: set) -> list | None:
    """Which inputs the captured graph uses in place (same[i]: input i has call 1's storage at call 2):
    static inputs and mutated ones with their storage unchanged (without static indices: every input
    with its storage unchanged). None when a mutated input cannot be used in place (no graph then: its
    writes would land in a copy)."""
    if static is None:
        out = list(same)
    else:
        out = [bool(s) and (i in static or i in mutated) for i, s in enumerate(same)]
    if any(i < len(out) and not out[i] for i in mutated):
        return None
    return out


def _clone(v):
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, (list, tuple)):
        return type(v)(_clone(x) for x in v)
    return v
