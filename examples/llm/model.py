"""The transformer forward pass, written only in `tilex.stdlib` calls.

One forward serves prefill and decode. Tokens of all sequences are packed along one axis
([T, hidden], no padding); attention reads K/V back through the paged cache, so a prefill
token is a "query with a block table and a length" exactly like a decode token
(`attention_decode`, one row per token). With `prefill_attention="dense"` (the engine's
default) prefill instead calls `attention_prefill` once per sequence on its rows of q, k, v
viewed as [1, S, H, D] (the token-major "bshd" layout: no copies), writing in place.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from .config import ModelConfig

SPLIT_MLP_ROWS = 16  # up to this many tokens: the MLP as split-K linear + silu_and_mul; more: gated_mlp
FUSED_QKV_ROWS = 64  # more tokens than this: linear_qkv; up to it, split-K linears per projection
FUSED_ROPE_ROWS = 64  # up to this many decode tokens: linear_qkv_rope_cache (split-K, two kernels; its limit)
FUSED_NORM_ROWS = 64  # up to this many tokens: o/down_proj + residual + norm as linear_add_rms_norm


class Ops:
    """`tilex.stdlib`, optionally timing every call (for --profile)."""

    def __init__(self, lib=None, backend=None):
        if lib is None:
            import tilex.stdlib as lib
        self.lib = lib
        self.backend = backend
        self.records = None  # list of (name, start, end) while profiling

    def has(self, name: str) -> bool:
        return hasattr(self.lib, name)

    def __getattr__(self, name):
        fn = getattr(self.lib, name)
        if self.records is None:
            return fn
        backend, records = self.backend, self.records

        def timed(*args, **kwargs):
            if backend is not None and backend.is_gpu():
                torch = backend.torch
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                out = fn(*args, **kwargs)
                b.record()
                records.append((name, a, b))
            else:
                t0 = time.perf_counter()
                out = fn(*args, **kwargs)
                records.append((name, t0, time.perf_counter()))
            return out

        return timed

    def start_profile(self):
        self.records = []

    def stop_profile(self) -> list[tuple[str, float]]:
        """(stdlib function, milliseconds) for every call since start_profile."""
        recs, self.records = self.records or [], None
        if self.backend is not None and self.backend.is_gpu():
            self.backend.synchronize()
            return [(n, a.elapsed_time(b)) for n, a, b in recs]
        return [(n, (b - a) * 1e3) for n, a, b in recs]


@dataclass
class Batch:
    """Device-side metadata of one forward call (all int32).

    ids, positions, slot_mapping: [T]; block_table: [T, max_blocks] and seq_lens: [T] give
    each query row its sequence's blocks and the number of keys it sees (position + 1);
    last_idx: [B] rows whose logits are wanted (None: every row, as in decode).
    seq_ranges: host (start, end) of each sequence's tokens, for dense prefill attention.
    ids_local: [T] ids - the rank's first vocabulary row (tensor parallel only).
    """
    ids: object
    positions: object
    slot_mapping: object
    block_table: object
    seq_lens: object
    last_idx: object = None
    seq_ranges: tuple = ()
    ids_local: object = None


class Layer:
    __slots__ = ("ln1", "ln2", "w_qkv", "b_qkv", "wq", "wk", "wv", "bq", "bk", "bv", "wo",
                 "w_gate", "w_up", "w_gate_up", "w_down")


class Model:
    def __init__(self, cfg: ModelConfig, weights: dict, backend, ops: Ops,
                 prefill_attention: str = "dense", mlp: str = "auto", fuse_qkv: bool = True,
                 fuse_norm: bool = True, tp=None):
        """`weights`: Hugging Face names -> arrays on `backend` in the run dtype.

        `tp` (parallel.TensorParallel): `cfg` is then the rank's local config
        (`tp.plan.local_config()`), `weights` its shard (lm_head included when tied); the
        row-parallel projections are all-reduced and the logits all-gathered over the vocabulary.

        q/k/v and gate/up are concatenated into one weight each, and `weights`' entries are
        replaced by views of it (so no second copy stays alive once the caller's originals
        are gone).
        """
        if prefill_attention not in ("paged", "dense"):
            raise ValueError("prefill_attention must be 'paged' or 'dense'")
        self.cfg, self.backend, self.ops, self.tp = cfg, backend, ops, tp
        self.prefill_attention = prefill_attention
        self.fuse_qkv = fuse_qkv  # decode: linear_qkv_rope_cache instead of linear + rope + kv_cache_write
        self.fuse_norm = fuse_norm  # decode: linear_add_rms_norm instead of linear + fused_add_rms_norm
        self.scale = 1.0 / math.sqrt(cfg.head_dim)
        self.embed = weights["model.embed_tokens.weight"]
        self.lm_head = self.embed if cfg.tie_word_embeddings and tp is None else weights["lm_head.weight"]
        self.final_norm = weights["model.norm.weight"]
        if mlp not in ("auto", "gated_mlp", "silu_and_mul"):
            raise ValueError("mlp must be 'auto', 'gated_mlp' or 'silu_and_mul'")
        # gated_mlp: one kernel for both projections and the activation; silu_and_mul: one
        # linear on the fused [gate | up] weight, then the activation. "auto" takes gated_mlp
        # for more than SPLIT_MLP_ROWS tokens (prefill) and the pair for fewer (decode: the
        # linear splits K over the SMs and streams the weights at bandwidth, which the fused
        # kernel cannot do since silu needs complete sums).
        if mlp == "gated_mlp" and not ops.has("gated_mlp"):
            raise ValueError("mlp='gated_mlp' needs tilex.stdlib.gated_mlp, which this library lacks")
        self.mlp = mlp
        self.use_gated_mlp = ops.has("gated_mlp") and mlp != "silu_and_mul"
        self.layers = []
        for n in range(cfg.num_layers):
            p = f"model.layers.{n}."
            L = Layer()
            L.ln1 = weights[p + "input_layernorm.weight"]
            L.ln2 = weights[p + "post_attention_layernorm.weight"]
            # q, k, v weights (and biases) in one [q + 2 kv, H] array; q, k, v are row
            # views of it. One token (decode at batch 1) runs one linear on the fused
            # weight (a [1, N] output slices into contiguous q, k, v); more than 64 (prefill)
            # one linear_qkv (one GEMM storing three contiguous outputs); 2..64 three linears,
            # split over K, which stream the weights faster at so few rows.
            names = [p + f"self_attn.{n}_proj.weight" for n in "qkv"]
            L.w_qkv = backend.cat([weights[n] for n in names], 0)
            L.b_qkv = None
            if cfg.qkv_bias:
                bnames = [p + f"self_attn.{n}_proj.bias" for n in "qkv"]
                L.b_qkv = backend.cat([weights[n] for n in bnames], 0)
            qs, ks = cfg.q_size, cfg.kv_size
            cuts = ((0, qs), (qs, qs + ks), (qs + ks, qs + 2 * ks))
            L.wq, L.wk, L.wv = (L.w_qkv[a:b] for a, b in cuts)
            L.bq = L.bk = L.bv = None
            if cfg.qkv_bias:
                L.bq, L.bk, L.bv = (L.b_qkv[a:b] for a, b in cuts)
            for n, view in zip(names, (L.wq, L.wk, L.wv)):
                weights[n] = view
            if cfg.qkv_bias:
                for n, view in zip(bnames, (L.bq, L.bk, L.bv)):
                    weights[n] = view
            L.wo = weights[p + "self_attn.o_proj.weight"]
            g, u = weights[p + "mlp.gate_proj.weight"], weights[p + "mlp.up_proj.weight"]
            # one [2I, H] weight: linear gives [gate | up], silu_and_mul consumes it; its row
            # halves (contiguous views) are gated_mlp's two weights
            L.w_gate_up = backend.cat([g, u], 0)
            i = cfg.intermediate_size
            L.w_gate, L.w_up = L.w_gate_up[:i], L.w_gate_up[i:]
            # the dict now holds views of the fused weight, so the originals can be freed
            weights[p + "mlp.gate_proj.weight"], weights[p + "mlp.up_proj.weight"] = L.w_gate, L.w_up
            del g, u
            L.w_down = weights[p + "mlp.down_proj.weight"]
            self.layers.append(L)

    def weight_arrays(self):
        """Every weight array once (views of fused weights left out): for memory accounting."""
        seen = {}
        for a in [self.embed, self.lm_head, self.final_norm]:
            seen[id(a)] = a
        for L in self.layers:
            for s in Layer.__slots__:
                if s in ("wq", "wk", "wv", "bq", "bk", "bv", "w_gate", "w_up"):  # views of fused weights
                    continue
                a = getattr(L, s)
                if a is not None:
                    seen[id(a)] = a
        return list(seen.values())

    # -- pieces -------------------------------------------------------------------------
    def _rope(self, q, k, positions):
        out = self.ops.rope(q, k, positions, self.cfg.rope_theta)
        return (q, k) if out is None else out  # in-place variants return nothing

    def uses_gated_mlp(self, tokens: int) -> bool:
        """Whether a forward over `tokens` rows runs the MLP as one gated_mlp kernel."""
        if not self.use_gated_mlp:
            return False
        return self.mlp == "gated_mlp" or tokens > SPLIT_MLP_ROWS

    def uses_fused_qkv(self, tokens: int, prefill: bool) -> bool:
        """Whether a forward over `tokens` rows runs linear_qkv_rope_cache (decode shapes whose
        attention reads k and v from the cache) instead of linear(s) + rope + kv_cache_write."""
        if not self.fuse_qkv or not self.ops.has("linear_qkv_rope_cache"):
            return False
        return tokens <= FUSED_ROPE_ROWS and not (prefill and self.prefill_attention == "dense")

    def _mlp_act(self, x, L):
        """silu(x @ w_gate.T) * (x @ w_up.T): the MLP up to down_proj."""
        ops = self.ops
        if self.uses_gated_mlp(int(x.shape[0])):
            return ops.gated_mlp(x, L.w_gate, L.w_up)
        return ops.silu_and_mul(ops.linear(x, L.w_gate_up))

    def _linear_add_norm(self, a, w, residual, norm_w):
        """(rms_norm(a @ w.T + residual) * norm_w, a @ w.T + residual): o_proj or down_proj, the
        residual add and the next norm; two kernels for decode rows (linear_add_rms_norm)."""
        eps = self.cfg.rms_norm_eps
        if self.tp is not None:  # a partial sum per rank: the residual + norm after the all-reduce
            return self.ops.fused_add_rms_norm(self.tp.all_reduce(self.ops.linear(a, w)), residual, norm_w, eps)
        if self.fuse_norm and int(a.shape[0]) <= FUSED_NORM_ROWS and self.ops.has("linear_add_rms_norm"):
            return self.ops.linear_add_rms_norm(a, w, residual, norm_w, eps)
        return self.ops.fused_add_rms_norm(self.ops.linear(a, w), residual, norm_w, eps)

    def _qkv(self, x, L, T):
        """q [T, Hq, D], k and v [T, Hkv, D] from the fused [q | k | v] weight."""
        cfg, ops = self.cfg, self.ops
        hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        if T == 1:  # one linear; its [1, N] output slices into contiguous q, k, v
            qkv = ops.linear(x, L.w_qkv, L.b_qkv)
            qs, ks = cfg.q_size, cfg.kv_size
            return (qkv[:, :qs].reshape(T, hq, d), qkv[:, qs:qs + ks].reshape(T, hkv, d),
                    qkv[:, qs + ks:].reshape(T, hkv, d))
        if T > FUSED_QKV_ROWS and ops.has("linear_qkv"):  # prefill: one GEMM, three outputs
            q, k, v = ops.linear_qkv(x, L.w_qkv, cfg.q_size, cfg.kv_size, L.b_qkv)
            return q.reshape(T, hq, d), k.reshape(T, hkv, d), v.reshape(T, hkv, d)
        return (ops.linear(x, L.wq, L.bq).reshape(T, hq, d), ops.linear(x, L.wk, L.bk).reshape(T, hkv, d),
                ops.linear(x, L.wv, L.bv).reshape(T, hkv, d))

    def _attention(self, q, k, v, kc, vc, b: Batch, prefill: bool):
        if not (prefill and self.prefill_attention == "dense"):
            return self.ops.attention_decode(q, kc, vc, b.block_table, b.seq_lens, scale=self.scale)
        # dense prefill: per sequence, its rows of q, k, v ([S, H, D], contiguous) viewed as
        # [1, S, H, D] (token-major layout: no copies); each writes its rows of `o` in place
        o = self.backend.empty_like(q)
        rows = int(q.shape[0])
        for s, e in b.seq_ranges:
            if s == 0 and e == rows:  # one sequence: its rows are the whole array (a view, no slice)
                one = lambda t: t.reshape((1,) + tuple(t.shape))  # noqa: E731
            else:
                one = lambda t: t[s:e].reshape((1, e - s) + tuple(int(n) for n in t.shape[1:]))  # noqa: E731
            self.ops.attention_prefill(one(q), one(k), one(v), causal=True, scale=self.scale,
                                       out=one(o), layout="bshd")
        return o

    # -- the forward --------------------------------------------------------------------
    def forward(self, b: Batch, k_cache, v_cache, prefill: bool):
        """Logits [rows, vocab] for the rows of `b.last_idx` (all rows when it is None).

        Writes this call's K/V into the paged caches ([layers, blocks, block_size, Hkv, D]).
        """
        cfg, ops = self.cfg, self.ops
        T = b.ids.shape[0]
        hq, d, eps = cfg.num_heads, cfg.head_dim, cfg.rms_norm_eps
        if self.tp is None:
            h = ops.embedding(b.ids, self.embed)
        else:  # a vocabulary shard: zero rows for the ids of other ranks, summed over ranks
            h = self.tp.all_reduce(ops.embedding(b.ids_local, self.embed))
        x, residual = ops.rms_norm(h, self.layers[0].ln1, eps), h
        for n, L in enumerate(self.layers):
            if self.uses_fused_qkv(T, prefill):
                # decode: projections, RoPE and the cache write in two kernels; attention
                # reads k and v from the cache
                q = ops.linear_qkv_rope_cache(x, L.w_qkv, cfg.q_size, cfg.kv_size, b.positions,
                                              k_cache[n], v_cache[n], b.slot_mapping, cfg.rope_theta, L.b_qkv)
                k = v = None
            else:
                q, k, v = self._qkv(x, L, T)
                q, k = self._rope(q, k, b.positions)
                ops.kv_cache_write(k, v, k_cache[n], v_cache[n], b.slot_mapping)
            o = self._attention(q, k, v, k_cache[n], v_cache[n], b, prefill)
            x, residual = self._linear_add_norm(o.reshape(T, hq * d), L.wo, residual, L.ln2)
            # down_proj, the residual add and the next layer's input norm (the final norm after the last)
            nxt = self.layers[n + 1].ln1 if n + 1 < len(self.layers) else self.final_norm
            x, residual = self._linear_add_norm(self._mlp_act(x, L), L.w_down, residual, nxt)
        if b.last_idx is not None:
            x = ops.embedding(b.last_idx, x)  # gather the last token of each sequence
        logits = ops.linear(x, self.lm_head)
        return logits if self.tp is None else self.tp.gather_logits(logits, self.backend)
