"""CUDA graphs for static shapes (options={"cuda_graphs": True}): a Program captured once and
replayed, so a call costs one graph launch instead of a launch per kernel (decode).

Call 1 runs the program normally (kernels compile, constants fold, the SDPA mask check decides).
Call 2 runs it once more on the graph's static inputs (the warm-up, on a side stream: that run is
call 2's result) and then captures it (capturing runs nothing). Calls 3.. refill the static inputs
and replay. So every call applies the graph's own in-place writes exactly once: HF's StaticCache
writes its rows and adds the new tokens to its `cumulative_length` counter in place, and a capture
call that also replayed (the rule before session 18) wrote the cache twice and advanced the counter
by two, so every later token read a stale row (wrong from the 4th generated token on the H200).

Used in place (their addresses baked into the graph): the inputs AOTAutograd calls static
(parameters, buffers, tensors marked with mark_static_address: `static` indices) and the inputs the
graph mutates (the KV cache, the counter) when their storage is the one of call 1; without `static`
indices, every input whose storage is the same as in call 1. The others (token ids, positions, masks)
are copied into static buffers that later calls refill. Each replay's outputs are cloned out of the
graph's memory, so results stay valid after the next call (one read and write of the outputs per call: 0.3 GB,
~0.09 ms on an H200 for the 512 x 152064 bf16 logits of a 1x512 prefill). With `options={"cuda_graphs":
"borrow"}` (or `CudaGraphs(clone_outputs=False)`) a replay returns the graph's own output memory uncopied, as
Inductor's mode="reduce-overhead" does, and with the same safety: each replay hands out new tensor objects over
that memory (their own storage objects), and the next replay of the graph first expires them, so a kept result
that was overwritten raises on any access (`STALE`, below) instead of reading the new values. torch's access error
is per tensor: a view a caller took of a result before the next call is not covered (benchmarks/probe_borrow.py,
H200), nor would be an output view AOTAutograd rebuilt outside the graph over a handed-out base (not seen in
the HF models, whose logits the graph returns itself). A handed-out tensor keeps the graph's output tensor
alive, so a result kept after the compiled function is dropped still reads its own values. An output that is the
memory of an input used in place (a cache updated in place) is returned as it is. A torch without the two
private storage calls this rests on gets copies instead (with a warning).
No graph (the program runs as it is):
symbolic sizes or CPU tensors, a mutated input that is not used in place, a program that decides on
the host from an input that can change between calls (`Program.host_decisions`), a used-in-place
input whose storage moved since capture, or a capture that failed.

`GraphRunner(..., graphs=...)` takes the object that warms up, captures and says which calls can be
captured (`CudaGraphs` here); tests pass one with the same semantics on CPU tensors.
"""
from __future__ import annotations

import logging

import torch

log = logging.getLogger("tilex.backend")


class CudaGraphs:
    """torch.cuda's graphs: the calls GraphRunner makes. clone_outputs=False: replays return the graph's
    output tensors themselves (overwritten by the next replay) instead of copies."""

    def __init__(self, clone_outputs: bool = True):
        self.clone_outputs = bool(clone_outputs)

    @staticmethod
    def can_borrow() -> bool:
        """Whether this torch has the two private calls borrowed outputs rest on (CUDA builds since 2.1)."""
        return (hasattr(torch._C, "_construct_storage_from_data_pointer")
                and hasattr(torch._C, "_set_storage_access_error_msg"))

    @staticmethod
    def share(storage):
        """A new storage object over `storage`'s memory (not owning it: the graph's output tensor keeps it)."""
        return torch._C._construct_storage_from_data_pointer(storage.data_ptr(), storage.device, storage.nbytes())

    @staticmethod
    def expire(t, msg: str) -> None:
        """Make any later access of t's data raise RuntimeError(msg) (t's own storage object only)."""
        torch._C._set_storage_access_error_msg(t, msg)

    @staticmethod
    def eligible(args) -> bool:
        return all(isinstance(a, torch.Tensor) and a.is_cuda for a in args)

    @staticmethod
    def warm_up(fn):
        """fn() on a side stream (what capture will record must have run once outside it); the current
        stream waits for it, and its outputs are marked as used there (they are call 2's result)."""
        cur = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            out = fn()
        cur.wait_stream(side)
        _each_tensor(out, lambda t: t.record_stream(cur))
        return out

    @staticmethod
    def capture(fn, static):
        """(graph, outputs) of fn() captured; nothing runs. `static`: the tensors fn reads (unused here)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
        return graph, out


class GraphRunner:
    def __init__(self, prog, static: list | None = None, mutated: set | None = None, graphs=None):
        self.prog = prog
        self.graphs = graphs or CudaGraphs()
        self.clone_outputs = bool(getattr(self.graphs, "clone_outputs", True))
        # borrow mode's storage calls: the graphs object's own (tests), else torch's (resolved once, not per replay)
        self._share, self._expire, self._can_borrow = (getattr(self.graphs, a, getattr(CudaGraphs, a))
                                                       for a in ("share", "expire", "can_borrow"))
        self.static_idx = None if static is None else set(static)
        self.mutated = set(mutated or ())
        decided = getattr(prog, "host_decisions", lambda: [])()
        self.disabled = bool(decided)
        if decided:
            log.warning("tilex backend: cuda_graphs is off for this graph: %s decide(s) on the host from values "
                        "that can change between calls", ", ".join(decided))
        self.calls = 0
        self.warm_ptrs = None
        self.graph = None
        self.static = None
        self.borrowed = None
        self.out = None
        self.own = None      # per output: True unless its memory is an input used in place (handed out, expired)
        self.handed = []     # the last replay's handed-out outputs (views a caller took share their storage objects)
        self.expired = 0     # handed-out outputs expired by later replays (borrow mode)
        self.replays = 0

    def __call__(self, *args):
        if not self.graphs.eligible(args):
            return self.prog(*args)  # symbolic sizes or CPU tensors: no graph
        self.calls += 1
        if self.calls == 1:
            self.warm_ptrs = [a.data_ptr() for a in args]
            return self.prog(*args)
        if self.disabled:
            return self.prog(*args)
        if self.graph is None:
            return self._warm_up_and_capture(args)
        for a, s, b in zip(args, self.static, self.borrowed):
            if b:
                if a.data_ptr() != s.data_ptr():
                    log.info("tilex backend: an input used in place moved since the CUDA graph was captured; "
                             "running without it")
                    return self.prog(*args)
            else:
                s.copy_(a)
        if not self.clone_outputs:
            self._expire_handed()
        self.graph.replay()
        self.replays += 1
        return _clone(self.out) if self.clone_outputs else self._hand_out()

    def _expire_handed(self) -> None:
        for t in self.handed:
            self._expire(t, STALE)
        self.expired += len(self.handed)
        self.handed = []

    def _hand_out(self):
        """The graph's outputs as new tensor objects over the same memory (one new storage object per storage);
        outputs over the memory of an input used in place as they are. The next replay expires them."""
        flat = []
        _each_tensor(self.out, flat.append)
        if self.own is None and not self._can_borrow():
            log.warning("tilex backend: this torch lacks the storage calls cuda_graphs='borrow' needs; replays "
                        "return copies of the outputs")
            self.clone_outputs = True
            return _clone(self.out)
        if self.own is None:
            inputs = {s.untyped_storage().data_ptr() for s, b in zip(self.static, self.borrowed) if b}
            self.own = [t.untyped_storage().data_ptr() not in inputs for t in flat]
        storages, new = {}, []
        for t, own in zip(flat, self.own):
            if not own:
                new.append(t)
                continue
            st = t.untyped_storage()
            shared = storages.get(st.data_ptr())
            if shared is None:
                shared = storages[st.data_ptr()] = self._share(st)
            a = torch.empty(0, dtype=t.dtype, device=t.device).set_(shared, t.storage_offset(), t.shape, t.stride())
            a._tilex_graph_output = t  # its memory stays allocated while `a` lives, even after the runner is gone
            self.handed.append(a)
            new.append(a)
        it = iter(new)
        return _rebuild(self.out, it)

    def _warm_up_and_capture(self, args):
        """Call 2: the program once on the static inputs (its result, its in-place writes: once), then captured."""
        same = [a.data_ptr() == p for a, p in zip(args, self.warm_ptrs)]
        self.borrowed = in_place(same, self.static_idx, self.mutated)
        if self.borrowed is None:
            log.info("tilex backend: a mutated input moved between calls 1 and 2; running without a CUDA graph")
            self.disabled = True
            return self.prog(*args)
        self.static = [a if b else a.clone() for a, b in zip(args, self.borrowed)]
        out = self.graphs.warm_up(lambda: self.prog(*self.static))
        try:
            self.graph, self.out = self.graphs.capture(lambda: self.prog(*self.static), self.static)
        except Exception as e:  # noqa: BLE001 - e.g. a sync during capture: the program still runs
            log.warning("tilex backend: CUDA graph capture failed (%s: %s); running without a CUDA graph",
                        type(e).__name__, e)
            self.graph, self.disabled = None, True
        return _clone(out)  # an output may alias a static input buffer that the next call refills


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


def _each_tensor(v, fn) -> None:
    if isinstance(v, torch.Tensor):
        fn(v)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _each_tensor(x, fn)


STALE = ("tilex backend: this tensor is an output of a CUDA-graph replay (cuda_graphs='borrow') that a later call "
         "of the same compiled graph has overwritten; clone() the outputs you keep across calls, or compile with "
         "cuda_graphs=True (replays return copies)")


def _rebuild(v, it):
    """v's structure with each tensor replaced by the next of `it` (the order _each_tensor visits them)."""
    if isinstance(v, torch.Tensor):
        return next(it)
    if isinstance(v, (list, tuple)):
        return type(v)(_rebuild(x, it) for x in v)
    return v


def _clone(v):
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, (list, tuple)):
        return type(v)(_clone(x) for x in v)
    return v
