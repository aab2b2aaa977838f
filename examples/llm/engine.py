"""The serving loop: paged KV cache, batched prefill, decode steps (CUDA graph), sampling.

    engine = Engine(cfg, weights, backend)
    result = engine.generate([[1, 2, 3], [4, 5]], max_new_tokens=16)

Paged cache: K and V live in two arrays [layers, num_blocks, block_size, Hkv, D]. A
sequence owns a list of blocks (allocated as it grows); token at position p sits in slot
blocks[p // block_size] * block_size + p % block_size. Block 0 is never handed out: rows
of the decode batch that have finished (or padding rows) write and read there, so the
captured decode step always runs the same fixed-size batch.

Decode step on the GPU: all per-step metadata (ids, positions, slots, lengths, block
table, and under TP the ids shifted to the rank's vocabulary shard) is one pinned int32 host
buffer copied to one device buffer of fixed address; the
forward (and the greedy argmax) is captured once per batch size with
`torch.cuda.graph` and replayed every step. Sampling with temperature runs after the
replay (its seed changes every step).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .config import ModelConfig
from .model import Batch, Model, Ops


class CacheFull(RuntimeError):
    pass


class PagedKVCache:
    def __init__(self, cfg: ModelConfig, backend, dtype: str, num_blocks: int, block_size: int = 16):
        if num_blocks < 2:
            raise ValueError("num_blocks must be >= 2 (block 0 is the scratch block)")
        self.block_size, self.num_blocks = block_size, num_blocks
        shape = (cfg.num_layers, num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
        self.k = backend.zeros(shape, dtype)
        self.v = backend.zeros(shape, dtype)
        self.free = list(range(num_blocks - 1, 0, -1))  # pop() hands out 1, 2, 3, ...
        self.nbytes = backend.nbytes(self.k) + backend.nbytes(self.v)

    def ensure(self, blocks: list, n_tokens: int):
        """Grow `blocks` to hold n_tokens tokens."""
        need = -(-n_tokens // self.block_size)
        while len(blocks) < need:
            if not self.free:
                raise CacheFull(f"KV cache full ({self.num_blocks - 1} blocks of {self.block_size} tokens)")
            blocks.append(self.free.pop())

    def release(self, blocks: list):
        self.free.extend(reversed(blocks))
        blocks.clear()

    def slot(self, blocks, pos: int) -> int:
        return blocks[pos // self.block_size] * self.block_size + pos % self.block_size


@dataclass
class Sequence:
    prompt: list
    tokens: list = field(default_factory=list)  # prompt + generated
    blocks: list = field(default_factory=list)
    generated: list = field(default_factory=list)
    finish_reason: str | None = None

    def __post_init__(self):
        self.tokens = list(self.prompt)


@dataclass
class GenerateResult:
    tokens: list            # generated ids per sequence
    finish_reasons: list    # "eos" | "length"
    prefill_ms: float
    decode_ms: float
    decode_steps: int
    decode_tokens: int      # tokens produced by decode steps (all sequences)
    logits: list = None     # per step [B, vocab] float32 host arrays when keep_logits
    profile: dict = None

    @property
    def decode_tok_s(self) -> float:
        return self.decode_tokens / (self.decode_ms / 1e3) if self.decode_ms > 0 else 0.0

    @property
    def decode_step_tok_s(self) -> float:
        """Steps per second: tokens per second of one sequence."""
        return self.decode_steps / (self.decode_ms / 1e3) if self.decode_ms > 0 else 0.0


class Engine:
    def __init__(self, cfg: ModelConfig, weights: dict, backend, *, num_blocks: int = 256,
                 block_size: int = 16, max_batch: int = 64, max_seq_len: int | None = None,
                 use_graph: bool = True, prefill_attention: str = "dense", dtype: str = "bf16",
                 graph_prefill: bool = False, mlp: str = "auto", ops: Ops | None = None,
                 fuse_qkv: bool = True, fuse_norm: bool = True, tp=None):
        """`tp`: a parallel.TensorParallel; `weights` are then this rank's shard, the model and
        the KV cache hold the rank's heads, and every rank returns the same full logits."""
        self.cfg, self.backend, self.dtype, self.tp = cfg, backend, dtype, tp
        self.ops = ops or Ops(backend=backend)
        local = cfg if tp is None else tp.plan.local_config()
        if tp is not None and tp.cfg != cfg:
            raise ValueError("tp was planned for another model config")
        self.model = Model(local, weights, backend, self.ops, prefill_attention, mlp, fuse_qkv, fuse_norm,
                           tp=tp)
        self.cache = PagedKVCache(local, backend, dtype, num_blocks, block_size)
        self.max_batch = max_batch
        self.max_seq_len = max_seq_len or min(cfg.max_position_embeddings, (num_blocks - 1) * block_size)
        self.max_blocks = -(-self.max_seq_len // block_size)
        self.use_graph = use_graph and backend.is_gpu()
        self.graphs = {}  # (batch, greedy) -> (graph, logits, next_ids)
        self.graph_prefill = graph_prefill and self.use_graph
        self.prefill_graphs = {}  # prompt lengths -> (graph, device metadata, logits)
        self._pool = None
        mb, nb = max_batch, self.max_blocks
        # decode metadata: [ids | positions | slots | seq_lens | ids_local] (5 x max_batch) + block
        # table; ids_local = ids - the first vocabulary row of this rank's embedding shard (TP)
        self._vocab_lo = 0 if tp is None else tp.plan.span("vocab")[0]
        self._meta_len = 5 * mb + mb * nb
        if backend.is_gpu():
            import torch

            self._meta_host = torch.zeros(self._meta_len, dtype=torch.int32).pin_memory()
            self._meta_np = self._meta_host.numpy()
            self._meta_dev = torch.zeros(self._meta_len, dtype=torch.int32, device=backend.device)
        else:
            self._meta_np = np.zeros(self._meta_len, np.int32)
            self._meta_dev = self._meta_np  # the interpreter reads host memory directly

    # -- metadata -----------------------------------------------------------------------
    def _decode_views(self, arr, B):
        mb, nb = self.max_batch, self.max_blocks
        return (arr[0:mb][:B], arr[mb:2 * mb][:B], arr[2 * mb:3 * mb][:B], arr[3 * mb:4 * mb][:B],
                arr[5 * mb:].reshape(mb, nb)[:B], arr[4 * mb:5 * mb][:B])

    def _decode_batch(self, B) -> Batch:
        ids, pos, slots, lens, table, ids_local = self._decode_views(self._meta_dev, B)
        return Batch(ids=ids, positions=pos, slot_mapping=slots, block_table=table, seq_lens=lens,
                     ids_local=None if self.tp is None else ids_local)

    def _fill_decode_meta(self, seqs, B):
        ids, pos, slots, lens, table, ids_local = self._decode_views(self._meta_np, B)
        table[...] = 0
        for i in range(B):
            s = seqs[i] if i < len(seqs) else None
            if s is None or s.finish_reason is not None:  # inactive row: scratch block 0
                ids[i], pos[i], slots[i], lens[i] = 0, 0, -1, 1  # slot -1: nothing written
                continue
            p = len(s.tokens) - 1
            self.cache.ensure(s.blocks, p + 1)
            ids[i], pos[i], slots[i], lens[i] = s.tokens[-1], p, self.cache.slot(s.blocks, p), p + 1
            table[i, :len(s.blocks)] = s.blocks
        ids_local[...] = ids - self._vocab_lo
        if self.backend.is_gpu():
            self._meta_dev.copy_(self._meta_host, non_blocking=True)

    def _prefill_batch(self, seqs) -> Batch:
        host, ranges = self._prefill_host(seqs)
        dev = {k: self.backend.from_numpy(v) for k, v in host.items()}
        return Batch(**dev, seq_ranges=ranges)

    def _prefill_host(self, seqs):
        bs = self.cache.block_size
        lens = [len(s.tokens) for s in seqs]
        T = sum(lens)
        ids = np.empty(T, np.int32)
        pos = np.empty(T, np.int32)
        slots = np.empty(T, np.int32)
        table = np.zeros((T, self.max_blocks), np.int32)
        last, ranges, t = [], [], 0
        for s, n in zip(seqs, lens):
            if n > self.max_seq_len:
                raise ValueError(f"prompt of {n} tokens exceeds max_seq_len {self.max_seq_len}")
            self.cache.ensure(s.blocks, n)
            ids[t:t + n] = s.tokens
            pos[t:t + n] = np.arange(n)
            blk = np.asarray(s.blocks, np.int64)
            slots[t:t + n] = blk[np.arange(n) // bs] * bs + np.arange(n) % bs
            table[t:t + n, :len(s.blocks)] = s.blocks
            ranges.append((t, t + n))
            t += n
            last.append(t - 1)
        host = dict(ids=ids, positions=pos, slot_mapping=slots, block_table=table,
                    seq_lens=pos + 1, last_idx=np.asarray(last, np.int32))
        if self.tp is not None:
            host["ids_local"] = ids - np.int32(self._vocab_lo)
        return host, tuple(ranges)

    # -- steps --------------------------------------------------------------------------
    def prefill(self, seqs, all_positions: bool = False) -> object:
        """Run the prompts of `seqs` (from position 0); logits [len(seqs), vocab] of each
        last token, or [total tokens, vocab] with all_positions."""
        if self.graph_prefill and not all_positions:
            return self._prefill_graphed(seqs)
        b = self._prefill_batch(seqs)
        if all_positions:
            b.last_idx = None
        return self.model.forward(b, self.cache.k, self.cache.v, prefill=True)

    def _prefill_graphed(self, seqs):
        """Prefill replayed from a CUDA graph captured for these prompt lengths (benchmarks
        repeat one shape; each new shape costs a warm-up run and a capture)."""
        import torch

        host, ranges = self._prefill_host(seqs)
        key = tuple(e - s for s, e in ranges)
        if key not in self.prefill_graphs:
            dev = {k: self.backend.from_numpy(v) for k, v in host.items()}
            b = Batch(**dev, seq_ranges=ranges)
            self._capture_graph(("prefill", key), lambda: self.model.forward(
                b, self.cache.k, self.cache.v, prefill=True), dev)
            self.prefill_graphs[key] = self.graphs.pop(("prefill", key))
        g, dev, logits = self.prefill_graphs[key]
        for k, v in host.items():
            dev[k].copy_(torch.from_numpy(v), non_blocking=True)
        g.replay()
        return logits

    def _capture_graph(self, key, fn, keep):
        """Warm up `fn` on a side stream (compiles kernels), capture it, store
        (graph, keep, output) under self.graphs[key]. All graphs share one memory pool:
        they never run at the same time and their outputs stay referenced."""
        import torch

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=self._pool, capture_error_mode="thread_local"):
            out = fn()
        torch.cuda.synchronize()
        self.graphs[key] = (g, keep, out)

    def _decode_forward(self, B, greedy):
        logits = self.model.forward(self._decode_batch(B), self.cache.k, self.cache.v, prefill=False)
        return logits, (self.ops.argmax(logits) if greedy else None)

    def _capture(self, B, greedy):
        """Warm up (compiles every kernel) and capture the decode step of batch B."""
        self._fill_decode_meta([], B)  # all rows on the scratch block: harmless to run
        self._capture_graph((B, greedy), lambda: self._decode_forward(B, greedy), None)
        g, _, (logits, nxt) = self.graphs[(B, greedy)]
        self.graphs[(B, greedy)] = (g, logits, nxt)

    def decode_step(self, seqs, greedy=True, batch_size=None):
        """One token for every active sequence: returns (logits [B, vocab], next ids or None).

        `batch_size` pads the batch (rows past len(seqs) are inactive).
        """
        B = batch_size or len(seqs)
        if B > self.max_batch:
            raise ValueError(f"batch of {B} exceeds max_batch {self.max_batch}")
        if self.use_graph and (B, greedy) not in self.graphs:
            self._capture(B, greedy)
        self._fill_decode_meta(seqs, B)
        if self.use_graph:
            g, logits, nxt = self.graphs[(B, greedy)]
            g.replay()
            return logits, nxt
        return self._decode_forward(B, greedy)

    def warmup(self, batch_sizes=(1,), greedy=True):
        for B in batch_sizes:
            if self.use_graph:
                self._capture(B, greedy)
            else:
                self._fill_decode_meta([], B)
                self._decode_forward(B, greedy)
        self.backend.synchronize()

    # -- generation ---------------------------------------------------------------------
    def _pick(self, logits, nxt, temperature, top_p, seed):
        if nxt is None:
            if temperature > 0:
                nxt = self.ops.sample(logits, temperature, top_p, seed)
            else:
                nxt = self.ops.argmax(logits)
        return self.backend.to_numpy(nxt).astype(np.int64).reshape(-1)

    def generate(self, prompts, max_new_tokens: int, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int = 0, stop_on_eos: bool = True, keep_logits: bool = False,
                 forced_tokens=None, profile: bool = False) -> GenerateResult:
        """Generate up to max_new_tokens for each prompt (token id lists).

        forced_tokens: optional [B][n] ids fed instead of the sampled ones (teacher forcing;
        the logits then follow the forced sequence).
        """
        if not prompts:
            raise ValueError("no prompts")
        if len(prompts) > self.max_batch:
            raise ValueError(f"{len(prompts)} prompts exceed max_batch {self.max_batch}")
        for p in prompts:
            if not p:
                raise ValueError("empty prompt")
            if len(p) + max_new_tokens > self.max_seq_len:
                raise ValueError(f"prompt of {len(p)} + {max_new_tokens} new tokens exceeds "
                                 f"max_seq_len {self.max_seq_len}")
            bad = [t for t in p if not 0 <= t < self.cfg.vocab_size]
            if bad:
                raise ValueError(f"token id {bad[0]} out of range [0, {self.cfg.vocab_size})")
        be, B = self.backend, len(prompts)
        greedy = temperature <= 0
        eos = set(self.cfg.eos_token_ids) if stop_on_eos else set()
        seqs = [Sequence(list(p)) for p in prompts]
        logits_log = [] if keep_logits else None
        prof = {} if profile else None
        if self.use_graph and (B, greedy) not in self.graphs and max_new_tokens > 1 and not profile:
            self._capture(B, greedy)  # before the clock starts
        try:
            be.synchronize()
            if profile:
                self.ops.start_profile()
            t0 = time.perf_counter()
            logits = self.prefill(seqs)
            nxt = self._pick(logits, None, temperature, top_p, seed)
            be.synchronize()
            prefill_ms = (time.perf_counter() - t0) * 1e3
            if profile:
                prof["prefill"] = self.ops.stop_profile()
            self._accept(seqs, nxt, logits, logits_log, forced_tokens, 0, eos, max_new_tokens)
            steps, dec_tokens = 0, 0
            t1 = time.perf_counter()
            while any(s.finish_reason is None for s in seqs):
                active = sum(s.finish_reason is None for s in seqs)
                use_graph = self.use_graph
                if profile and steps == 0:  # one eager step, every call timed
                    self.use_graph = False
                    self.ops.start_profile()
                logits, nxt_dev = self.decode_step(seqs, greedy=greedy, batch_size=B)
                nxt = self._pick(logits, nxt_dev, temperature, top_p, seed + 1 + steps)
                if profile and steps == 0:
                    prof["decode"] = self.ops.stop_profile()
                    self.use_graph = use_graph
                steps += 1
                dec_tokens += active
                self._accept(seqs, nxt, logits, logits_log, forced_tokens, steps, eos, max_new_tokens)
            be.synchronize()
            decode_ms = (time.perf_counter() - t1) * 1e3
        finally:
            for s in seqs:
                self.cache.release(s.blocks)
        return GenerateResult(tokens=[s.generated for s in seqs],
                              finish_reasons=[s.finish_reason for s in seqs],
                              prefill_ms=prefill_ms, decode_ms=decode_ms, decode_steps=steps,
                              decode_tokens=dec_tokens, logits=logits_log, profile=prof)

    def _accept(self, seqs, nxt, logits, logits_log, forced, step, eos, max_new):
        if logits_log is not None:
            lg = self.backend.to_numpy(logits).astype(np.float32)
            for i, s in enumerate(seqs):  # rows of finished sequences are meaningless
                if s.finish_reason is not None:
                    lg[i] = np.nan
            logits_log.append(lg[:len(seqs)])
        for i, s in enumerate(seqs):
            if s.finish_reason is not None:
                continue
            tok = int(nxt[i]) if forced is None else int(forced[i][step])
            s.generated.append(tok)
            s.tokens.append(tok)
            if tok in eos:
                s.finish_reason = "eos"
            elif len(s.generated) >= max_new:
                s.finish_reason = "length"
