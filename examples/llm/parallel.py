"""Tensor parallelism: the process group and the sharding plan (as data).

    group = init_group(backend)            # torchrun / env:// : NCCL on the GPU, gloo on the CPU
    tp = TensorParallel(cfg, group)        # checks that cfg shards over group.world ranks
    weights = random_weights_shard(cfg, backend, "bf16", tp.plan)   # or load_checkpoint_shard
    engine = Engine(cfg, weights, backend, tp=tp)

Megatron-style split of the Llama / Qwen2 layer over N ranks:

* q/k/v (weights and biases) by output rows: rank r owns query heads [r Hq/N, (r+1) Hq/N) and
  the KV heads they read. N <= Hkv: Hkv/N KV heads each (N must divide Hkv); N > Hkv: one KV
  head, replicated on the N/Hkv ranks that share it (N must be a multiple of Hkv).
* gate/up by output rows, down by input columns (N must divide intermediate_size); o by input
  columns (the rank's heads). One all-reduce (sum) after o_proj and one after down_proj.
* LM head and input embedding by vocabulary rows (ceil(V/N) per rank, the last shard
  zero-padded; tied embeddings share the one shard). The logits are all-gathered to
  [rows, V], so every rank holds the same logits and picks the same token. The embedding
  looks up `ids - first vocabulary row of the rank` (`Batch.ids_local`): an id outside the
  shard reads a zero row (the embedding kernel's rule), and an all-reduce sums the one
  non-zero row per token (exact in any dtype).
* Replicated: the norms only.

The row-parallel layers change the fused epilogue: o_proj/down_proj + residual + RMSNorm
(`linear_add_rms_norm`) cannot norm a partial sum, so TP runs `linear` (its split-K sum
inside), the all-reduce, then `fused_add_rms_norm` (residual + norm after the all-reduce).
The column-parallel QKV + rope + cache write (`linear_qkv_rope_cache`) needs no
communication: it runs unchanged on the rank's heads and its own KV cache.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import numpy as np

from .config import ModelConfig

# NVLink multicast stays off on these machines, also in processes started with their own
# environment (torchrun inherits os.environ): set before torch.distributed / NCCL start.
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                    "NVSHMEM_DISABLE_NVLS": "1"}


def set_no_multicast_env(env=None) -> dict:
    """Put NO_MULTICAST_ENV into `env` (default os.environ), overriding other values; returns it."""
    env = os.environ if env is None else env
    env.update(NO_MULTICAST_ENV)
    return env


class TPError(ValueError):
    """A model that does not shard over the requested ranks, or a bad process group."""


# -- the plan ------------------------------------------------------------------------------

# HF name suffix -> how it is split: (dimension, what is split); None = replicated.
SHARDING = {
    "self_attn.q_proj.weight": (0, "q"), "self_attn.q_proj.bias": (0, "q"),
    "self_attn.k_proj.weight": (0, "kv"), "self_attn.k_proj.bias": (0, "kv"),
    "self_attn.v_proj.weight": (0, "kv"), "self_attn.v_proj.bias": (0, "kv"),
    "self_attn.o_proj.weight": (1, "q"),
    "mlp.gate_proj.weight": (0, "inter"), "mlp.up_proj.weight": (0, "inter"),
    "mlp.down_proj.weight": (1, "inter"),
    "lm_head.weight": (0, "vocab"),
    "embed_tokens.weight": (0, "vocab"), "input_layernorm.weight": None,
    "post_attention_layernorm.weight": None, "norm.weight": None,
}


def rule_of(name: str):
    for suffix, rule in SHARDING.items():
        if name.endswith(suffix):
            return rule
    raise TPError(f"tensor '{name}' has no sharding rule")


@dataclass(frozen=True)
class ShardPlan:
    """Which rows / columns of each tensor rank `rank` of `world` holds."""
    cfg: ModelConfig
    world: int
    rank: int

    def __post_init__(self):
        cfg, n = self.cfg, self.world
        if not (isinstance(n, int) and n >= 1):
            raise TPError(f"tensor-parallel world size must be a positive integer, got {n!r}")
        if not (isinstance(self.rank, int) and 0 <= self.rank < n):
            raise TPError(f"rank {self.rank!r} is not in [0, {n})")
        if cfg.num_heads % n:
            raise TPError(f"{n} ranks do not divide the {cfg.num_heads} attention heads "
                          f"(num_attention_heads must be a multiple of the TP size)")
        hkv = cfg.num_kv_heads
        if n <= hkv and hkv % n:
            raise TPError(f"{n} ranks do not divide the {hkv} KV heads (num_key_value_heads)")
        if n > hkv and n % hkv:
            raise TPError(f"{n} ranks exceed the {hkv} KV heads but are not a multiple of them "
                          "(each KV head must be replicated on the same number of ranks)")
        if cfg.intermediate_size % n:
            raise TPError(f"{n} ranks do not divide intermediate_size {cfg.intermediate_size}")

    # -- sizes ---------------------------------------------------------------------------
    @property
    def q_heads(self) -> int:
        return self.cfg.num_heads // self.world

    @property
    def kv_heads(self) -> int:
        return max(1, self.cfg.num_kv_heads // self.world)

    @property
    def kv_first(self) -> int:
        """The first KV head of this rank (its query heads read it and the next ones)."""
        hkv, n = self.cfg.num_kv_heads, self.world
        return self.rank * self.kv_heads if n <= hkv else self.rank // (n // hkv)

    @property
    def vocab_rows(self) -> int:
        """LM-head rows per rank (the last rank's shard is padded with zero rows to this)."""
        return -(-self.cfg.vocab_size // self.world)

    def local_config(self) -> ModelConfig:
        """The config of one rank's layer: its heads and its part of the MLP (vocab stays full)."""
        return dataclasses.replace(self.cfg, num_heads=self.q_heads, num_kv_heads=self.kv_heads,
                                   intermediate_size=self.cfg.intermediate_size // self.world)

    def span(self, what: str) -> tuple[int, int]:
        """[begin, end) of this rank along a split dimension."""
        cfg, r, d = self.cfg, self.rank, self.cfg.head_dim
        if what == "q":
            return r * self.q_heads * d, (r + 1) * self.q_heads * d
        if what == "kv":
            return self.kv_first * d, (self.kv_first + self.kv_heads) * d
        if what == "inter":
            i = cfg.intermediate_size // self.world
            return r * i, (r + 1) * i
        if what == "vocab":
            v = self.vocab_rows
            return min(r * v, cfg.vocab_size), min((r + 1) * v, cfg.vocab_size)
        raise TPError(f"unknown split '{what}'")

    def shard_spec(self, name: str):
        """(dimension, begin, end, padded length) of `name`'s shard, or None when replicated."""
        rule = rule_of(name)
        if rule is None:
            return None
        dim, what = rule
        b, e = self.span(what)
        return dim, b, e, (self.vocab_rows if what == "vocab" else e - b)

    def shard_shapes(self) -> dict[str, tuple[int, ...]]:
        """name -> the shape of this rank's array (lm_head included when embeddings are tied)."""
        shapes = dict(self.cfg.weight_shapes())
        if self.cfg.tie_word_embeddings:
            shapes["lm_head.weight"] = shapes["model.embed_tokens.weight"]
        out = {}
        for name, shape in shapes.items():
            spec = self.shard_spec(name)
            if spec is not None:
                shape = list(shape)
                shape[spec[0]] = spec[3]
            out[name] = tuple(shape)
        return out


def shard_array(a, spec, xp_pad):
    """This rank's part of a full array (NumPy or torch) by `spec`, zero-padded to its length.

    xp_pad(part, rows): the array with `rows` zero rows appended (only the vocab split pads)."""
    if spec is None:
        return a
    dim, b, e, length = spec
    part = a[b:e] if dim == 0 else a[:, b:e]
    if length > e - b:
        part = xp_pad(part, length - (e - b))
    return part


# -- process groups -----------------------------------------------------------------------

class SingleProcess:
    """World size 1 without torch.distributed: the collectives are identities."""
    rank, world = 0, 1

    def all_reduce(self, x):
        return x

    def all_gather_last(self, x):
        return x


class TorchGroup:
    """torch.distributed's default group: NCCL for torch CUDA tensors (the collectives are
    enqueued in order with torch's current stream, so they are captured in the decode step's
    CUDA graph), gloo for the interpreter's NumPy arrays (wrapped as torch CPU tensors)."""

    def __init__(self, backend):
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():
            raise TPError("torch.distributed is not initialized (launch with torchrun, or call init_group)")
        self.torch, self.dist, self.gpu = torch, dist, backend.is_gpu()
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        kind = dist.get_backend()
        if self.gpu and kind != "nccl":
            raise TPError(f"the cuda backend needs the nccl process group, got {kind}")
        if not self.gpu and kind != "gloo":
            raise TPError(f"the interpreter backend needs the gloo process group, got {kind}")

    def _cpu(self, x):
        """A torch CPU tensor sharing the NumPy array `x`'s memory (bf16 through its bits)."""
        t = self.torch
        if x.dtype.name == "bfloat16":
            return t.from_numpy(x.view(np.int16)).view(t.bfloat16)
        return t.from_numpy(x)

    def all_reduce(self, x):
        """Sum over ranks, in place; returns x."""
        if self.gpu:
            self.dist.all_reduce(x)
            return x
        t = self._cpu(x)
        if t.dtype in (self.torch.bfloat16, self.torch.float16):  # summed in f32, rounded once
            f = t.float()
            self.dist.all_reduce(f)
            t.copy_(f)
        else:
            self.dist.all_reduce(t)
        return x

    def all_gather_last(self, x):
        """[..., n] from every rank -> [..., world * n], rank order."""
        if self.gpu:
            out = self.torch.empty((self.world,) + tuple(x.shape), dtype=x.dtype, device=x.device)
            self.dist.all_gather_into_tensor(out, x.contiguous())
            return self.torch.cat(out.unbind(0), dim=-1)
        t = self._cpu(np.ascontiguousarray(x))
        parts = [self.torch.empty_like(t) for _ in range(self.world)]
        self.dist.all_gather(parts, t)
        return np.concatenate([np.asarray(p.view(self.torch.int16).numpy()).view(x.dtype)
                               if t.dtype == self.torch.bfloat16 else p.numpy() for p in parts], axis=-1)


def init_group(backend, init_method: str | None = None, rank: int | None = None,
               world: int | None = None) -> TorchGroup:
    """torch.distributed's default group for `backend` (nccl on the GPU, gloo on the CPU).

    Without arguments it reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR/PORT); `init_method` (e.g. "file:///tmp/x") with rank and world starts one
    without torchrun. On the GPU each process takes the device LOCAL_RANK (default: rank)."""
    set_no_multicast_env()
    import torch
    import torch.distributed as dist

    kind = "nccl" if backend.is_gpu() else "gloo"
    if not dist.is_initialized():
        if init_method is None and "WORLD_SIZE" not in os.environ:
            raise TPError("no process group: launch with torchrun --nproc_per_node=N, or pass init_method")
        if backend.is_gpu():
            local = int(os.environ.get("LOCAL_RANK", rank if rank is not None else 0))
            if local >= torch.cuda.device_count():
                raise TPError(f"rank {local} has no GPU: {torch.cuda.device_count()} visible")
            torch.cuda.set_device(local)
            backend.device = torch.device("cuda", local)
        kw = {} if init_method is None else dict(init_method=init_method, rank=rank, world_size=world)
        dist.init_process_group(kind, **kw)
    return TorchGroup(backend)


class TensorParallel:
    """A process group and the plan of its rank: what Model and Engine take as `tp`."""

    def __init__(self, cfg: ModelConfig, group, world: int | None = None):
        if world is not None and world != group.world:
            raise TPError(f"--tp {world} but the process group has {group.world} processes "
                          f"(launch with torchrun --nproc_per_node={world})")
        self.group, self.cfg = group, cfg
        self.plan = ShardPlan(cfg, group.world, group.rank)
        self.rank, self.world = group.rank, group.world

    def all_reduce(self, x):
        return self.group.all_reduce(x)

    def gather_logits(self, logits, backend):
        """This rank's [rows, ceil(V/N)] logits -> every rank's [rows, V] (padding cut off)."""
        full = self.group.all_gather_last(logits)
        v = self.cfg.vocab_size
        if int(full.shape[-1]) == v:
            return full
        cut = full[:, :v]
        return cut.contiguous() if backend.is_gpu() else np.ascontiguousarray(cut)
