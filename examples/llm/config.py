"""Model configuration: the Llama / Qwen2 family, read from a Hugging Face `config.json`.

`ModelConfig.from_hf(dict)` takes the fields the engine needs and rejects what it does not
implement (rope scaling other than the default, sliding windows in use, other model types).
`named_config(name)` gives the shapes used for random-weight runs and tests.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")


class ConfigError(ValueError):
    """A config.json that the engine cannot run, with the field named."""


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    qkv_bias: bool = False
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 4096
    eos_token_ids: tuple = ()
    bos_token_id: int | None = None
    model_type: str = "llama"
    dtype: str = "bf16"  # the dtype the checkpoint is stored in (weights are cast to the run dtype)
    name: str = field(default="", compare=False)

    def __post_init__(self):
        for f in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                  "num_kv_heads", "head_dim", "max_position_embeddings"):
            if not _is_int(getattr(self, f)):
                raise ConfigError(f"config field {f} must be an integer, got {getattr(self, f)!r}")
            if getattr(self, f) <= 0:
                raise ConfigError(f"config field {f} must be positive, got {getattr(self, f)}")
        if not self.rms_norm_eps > 0:
            raise ConfigError(f"rms_norm_eps must be positive, got {self.rms_norm_eps}")
        if not self.rope_theta > 0:
            raise ConfigError(f"rope_theta must be positive, got {self.rope_theta}")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(f"num_attention_heads ({self.num_heads}) is not a multiple of "
                              f"num_key_value_heads ({self.num_kv_heads})")

    # -- derived sizes -----------------------------------------------------------------
    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor the checkpoint must hold, by its Hugging Face name, with its shape."""
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (v, h)
        for n in range(self.num_layers):
            p = f"model.layers.{n}."
            shapes[p + "input_layernorm.weight"] = (h,)
            shapes[p + "post_attention_layernorm.weight"] = (h,)
            shapes[p + "self_attn.q_proj.weight"] = (self.q_size, h)
            shapes[p + "self_attn.k_proj.weight"] = (self.kv_size, h)
            shapes[p + "self_attn.v_proj.weight"] = (self.kv_size, h)
            shapes[p + "self_attn.o_proj.weight"] = (h, self.q_size)
            if self.qkv_bias:
                shapes[p + "self_attn.q_proj.bias"] = (self.q_size,)
                shapes[p + "self_attn.k_proj.bias"] = (self.kv_size,)
                shapes[p + "self_attn.v_proj.bias"] = (self.kv_size,)
            shapes[p + "mlp.gate_proj.weight"] = (i, h)
            shapes[p + "mlp.up_proj.weight"] = (i, h)
            shapes[p + "mlp.down_proj.weight"] = (h, i)
        return shapes

    def num_params(self) -> int:
        total = 0
        for s in self.weight_shapes().values():
            n = 1
            for d in s:
                n *= d
            total += n
        return total

    def kv_bytes_per_token(self, itemsize: int = 2) -> int:
        return 2 * self.num_layers * self.kv_size * itemsize

    # -- Hugging Face config.json --------------------------------------------------------
    @classmethod
    def from_hf(cls, cfg: dict, name: str = "") -> "ModelConfig":
        if not isinstance(cfg, dict):
            raise ConfigError(f"config.json must hold a JSON object, got a {type(cfg).__name__}")
        g = _Fields(cfg)
        mt = g.str("model_type", "llama")
        if mt not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(f"model_type '{mt}' is not supported (this engine runs: "
                              f"{', '.join(SUPPORTED_MODEL_TYPES)})")
        for req in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads"):
            if req not in cfg:
                raise ConfigError(f"config.json has no '{req}'")
        hidden = g.int("hidden_size")
        heads = g.int("num_attention_heads")
        kv = g.int("num_key_value_heads", None) or heads
        head_dim = g.int("head_dim", None)
        if head_dim is None:
            if heads <= 0 or hidden % heads:
                raise ConfigError(f"config.json has no 'head_dim' and hidden_size ({hidden}) is not a multiple of "
                                  f"num_attention_heads ({heads})")
            head_dim = hidden // heads
        # transformers >= 5 keeps rope_theta inside rope_parameters; older files at top level
        rope = g.dict("rope_parameters") or g.dict("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise ConfigError(f"rope type '{rope_type}' (rope_scaling / rope_parameters) is not "
                              "supported; only the default rotary embedding is")
        theta = _Fields(rope, "rope_parameters").float("rope_theta", None) if "rope_theta" in rope else None
        if theta is None:
            theta = g.float("rope_theta", 10000.0)
        if g.float("partial_rotary_factor", 1.0) != 1.0:
            raise ConfigError("partial_rotary_factor != 1 is not supported")
        if mt == "qwen2":
            bias = True  # Qwen2 always has q/k/v biases
        else:
            bias = g.bool("attention_bias", False)
        if g.bool("mlp_bias", False):
            raise ConfigError("mlp_bias = true is not supported")
        act = g.str("hidden_act", "silu")
        if act != "silu":
            raise ConfigError(f"hidden_act '{act}' is not supported (only silu)")
        eos = cfg.get("eos_token_id")
        eos = () if eos is None else (tuple(eos) if isinstance(eos, list) else (eos,))
        if not all(_is_int(e) and e >= 0 for e in eos):
            raise ConfigError(f"config.json: 'eos_token_id' must be a token id or a list of them, "
                              f"got {cfg.get('eos_token_id')!r}")
        bos = g.int("bos_token_id", None)
        dt = g.str("dtype", None) or g.str("torch_dtype", None) or "bfloat16"
        dt = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}.get(dt, "bf16")
        return cls(
            vocab_size=g.int("vocab_size"), hidden_size=hidden,
            intermediate_size=g.int("intermediate_size"),
            num_layers=g.int("num_hidden_layers"), num_heads=heads, num_kv_heads=kv,
            head_dim=head_dim, rms_norm_eps=g.float("rms_norm_eps", 1e-6),
            rope_theta=theta, qkv_bias=bias,
            tie_word_embeddings=g.bool("tie_word_embeddings", False),
            max_position_embeddings=g.int("max_position_embeddings", 4096),
            eos_token_ids=tuple(eos), bos_token_id=bos,
            model_type=mt, dtype=dt, name=name,
        )

    def to_hf(self) -> dict:
        """The config.json fields of this model (what `from_hf` reads back)."""
        d = {
            "model_type": self.model_type,
            "architectures": ["Qwen2ForCausalLM" if self.model_type == "qwen2" else "LlamaForCausalLM"],
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim, "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta, "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings, "hidden_act": "silu",
            "torch_dtype": {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[self.dtype],
        }
        if self.model_type != "qwen2":
            d["attention_bias"] = self.qkv_bias
        if self.eos_token_ids:
            d["eos_token_id"] = list(self.eos_token_ids) if len(self.eos_token_ids) > 1 else self.eos_token_ids[0]
        if self.bos_token_id is not None:
            d["bos_token_id"] = self.bos_token_id
        return d


_REQUIRED = object()


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Fields:
    """Typed reads of config.json fields: a wrong type is a ConfigError naming the field."""

    def __init__(self, cfg: dict, where: str = "config.json"):
        self.cfg, self.where = cfg, where

    def _get(self, key, default):
        v = self.cfg.get(key, default)
        if v is _REQUIRED:
            raise ConfigError(f"{self.where} has no '{key}'")
        return v

    def _bad(self, key, want, v):
        return ConfigError(f"{self.where}: '{key}' must be {want}, got {type(v).__name__} {v!r}"[:300])

    def int(self, key, default=_REQUIRED):
        v = self._get(key, default)
        if v is None and default is None:
            return None
        if isinstance(v, float) and v.is_integer():  # 64.0; but never 64.7 silently truncated
            v = int(v)
        if not _is_int(v):
            raise self._bad(key, "an integer", v)
        return v

    def float(self, key, default=_REQUIRED):
        v = self._get(key, default)
        if v is None and default is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
            raise self._bad(key, "a finite number", v)
        return float(v)

    def bool(self, key, default=_REQUIRED):
        v = self._get(key, default)
        if v is None:
            return bool(default) if default is not _REQUIRED else False
        if not isinstance(v, bool):
            raise self._bad(key, "true or false", v)
        return v

    def str(self, key, default=_REQUIRED):
        v = self._get(key, default)
        if v is None and default is None:
            return None
        if not isinstance(v, str):
            raise self._bad(key, "a string", v)
        return v

    def dict(self, key):
        v = self.cfg.get(key)
        if v is not None and not isinstance(v, dict):
            raise self._bad(key, "an object (or null)", v)
        return v


def _named() -> dict[str, dict]:
    return {
        # Meta-Llama-3-8B: GQA 32/8, theta 500k, untied, no biases
        "llama3-8b": dict(model_type="llama", vocab_size=128256, hidden_size=4096,
                          intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                          num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-5,
                          rope_theta=500000.0, tie_word_embeddings=False,
                          max_position_embeddings=8192, bos_token_id=128000,
                          eos_token_id=[128001, 128009]),
        # Meta-Llama-3-70B: GQA 64/8 (141 GB in bf16: tensor parallelism, examples/llm/tp_run.py)
        "llama3-70b": dict(model_type="llama", vocab_size=128256, hidden_size=8192,
                           intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                           num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-5,
                           rope_theta=500000.0, tie_word_embeddings=False,
                           max_position_embeddings=8192, bos_token_id=128000,
                           eos_token_id=[128001, 128009]),
        # Qwen2.5-14B: GQA 40/8, theta 1e6, qkv biases, untied
        "qwen2.5-14b": dict(model_type="qwen2", vocab_size=152064, hidden_size=5120,
                            intermediate_size=13824, num_hidden_layers=48, num_attention_heads=40,
                            num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-5,
                            rope_theta=1000000.0, tie_word_embeddings=False,
                            max_position_embeddings=32768, bos_token_id=151643,
                            eos_token_id=151643),
        # tiny: Qwen2-style (qkv bias), tied embeddings; runs in the NumPy interpreter
        "tiny": dict(model_type="qwen2", vocab_size=97, hidden_size=64, intermediate_size=128,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=16, rms_norm_eps=1e-6, rope_theta=10000.0,
                     tie_word_embeddings=True, max_position_embeddings=512, eos_token_id=96),
        # tiny-llama: Llama-style (no bias), untied embeddings
        "tiny-llama": dict(model_type="llama", vocab_size=97, hidden_size=64,
                           intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
                           rope_theta=500000.0, tie_word_embeddings=False,
                           max_position_embeddings=512, eos_token_id=96),
    }


NAMED_CONFIGS = tuple(_named())


def named_config(name: str) -> ModelConfig:
    table = _named()
    if name not in table:
        raise ConfigError(f"no named config '{name}' (known: {', '.join(table)})")
    return ModelConfig.from_hf(table[name], name=name)


def load_config(path_or_name: str) -> ModelConfig:
    """A named config, a config.json file, or a checkpoint directory holding config.json."""
    if path_or_name in _named():
        return named_config(path_or_name)
    p = Path(path_or_name)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ConfigError(f"'{path_or_name}' is neither a named config ({', '.join(NAMED_CONFIGS)}) "
                          "nor a directory or file with a config.json")
    try:
        cfg = json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}: not valid JSON ({e})") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read it ({e.strerror or e})") from None
    return ModelConfig.from_hf(cfg, name=str(path_or_name))


def config_dict(cfg: ModelConfig) -> dict:
    return asdict(cfg)
