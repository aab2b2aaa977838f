"""CUDA graphs for static shapes (options={"cuda_graphs": True}): a Program captured once and
replayed, so a call costs one graph launch instead of a launch per kernel (decode).

Call 1 runs the program normally (kernels compile, constants fold, the SDPA mask check decides).
Call 2 captures it: inputs whose storage is the same as in call 1 (the weights) are used in place,
the others are copied into static buffers that later calls refill. Each replay's outputs are cloned
out of the graph's memory, so results stay valid after the next call. Inputs with symbolic sizes,
CPU tensors, or a weight that moved since capture run the program without a graph.
"""
from __future__ import annotations

import logging

import torch

log = logging.getLogger("tilex.backend")


class GraphRunner:
    def __init__(self, prog):
        self.prog = prog
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
        if self.graph is None:
            self._capture(args)
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
        self.borrowed = [a.data_ptr() == p for a, p in zip(args, self.warm_ptrs)]
        self.static = [a if b else a.clone() for a, b in zip(args, self.borrowed)]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.prog(*self.static)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.prog(*self.static)


def _clone(v):
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, (list, tuple)):
        return type(v)(_clone(x) for x in v)
    return v
