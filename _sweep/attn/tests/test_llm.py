"""examples/llm on the CPU: the engine through the tilex interpreter vs a float64 reference.

Tiny configs (2 layers, hidden 64, 4 query heads, 2 KV heads, head_dim 16, vocab 97), one
Qwen2-style (qkv bias, tied embeddings) and one Llama-style (no bias, untied). A batch of
three prompts of different lengths is prefilled, then 4 decode steps run teacher-forced
through the paged cache (block size 4, so sequences cross block boundaries), and every
logit row is compared with `reference_logits` on the same token sequence.

Bound: relative error max|engine - ref| / max|ref| per row <= 1e-4 in f32 (kernel
accumulation order only) and <= 1e-2 in bf16 (weights, activations and the KV cache
rounded to bf16; the reference uses the same bf16-rounded weights in float64).
Also: the CLI (--json, --dump-logits, checkpoint dirs, tokenizer) and the checkpoint
errors (missing tensor, wrong shape, truncated file) that must name the tensor.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

from llm.backend import NumpyBackend  # noqa: E402
from llm.config import ConfigError, ModelConfig, load_config, named_config  # noqa: E402
from llm.reference import reference_logits  # noqa: E402

NEEDED = ("embedding", "rms_norm", "fused_add_rms_norm", "linear", "rope", "kv_cache_write",
          "attention_decode", "silu_and_mul", "argmax")
RUN = [sys.executable, str(ROOT / "examples" / "llm" / "run.py")]


def _stdlib_or_skip():
    try:
        import tilex.stdlib as lib
    except ImportError as e:  # the library is being written; its modules land one by one
        pytest.skip(f"tilex.stdlib does not import yet ({e})")
    missing = [n for n in NEEDED if not hasattr(lib, n)]
    if missing:
        pytest.skip(f"tilex.stdlib does not have {', '.join(missing)} yet")
    return lib


def _rel_rows(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert np.isfinite(out).all()
    return float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))


# ------------------------------------------------------------------------------- config

def test_config_from_hf_fields():
    cfg = ModelConfig.from_hf({"model_type": "qwen2", "vocab_size": 10, "hidden_size": 32,
                               "intermediate_size": 64, "num_hidden_layers": 1,
                               "num_attention_heads": 4, "num_key_value_heads": 2,
                               "rope_parameters": {"rope_type": "default", "rope_theta": 5e5},
                               "eos_token_id": [3, 4], "tie_word_embeddings": True})
    assert cfg.qkv_bias and cfg.head_dim == 8 and cfg.rope_theta == 5e5
    assert cfg.eos_token_ids == (3, 4) and "lm_head.weight" not in cfg.weight_shapes()
    llama = named_config("llama3-8b")
    assert not llama.qkv_bias and llama.num_params() == 8_030_261_248
    assert named_config("qwen2.5-14b").num_params() == 14_770_033_664
    assert ModelConfig.from_hf(named_config("tiny").to_hf()) == named_config("tiny")


@pytest.mark.parametrize("bad, msg", [
    ({"model_type": "gpt2"}, "model_type 'gpt2'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope type 'yarn'"),
    ({"num_key_value_heads": 3}, "not a multiple"),
    ({"hidden_act": "gelu"}, "hidden_act"),
])
def test_config_rejects(bad, msg):
    d = named_config("tiny-llama").to_hf()
    d.update(bad)
    with pytest.raises(ConfigError, match=msg):
        ModelConfig.from_hf(d)


# ------------------------------------------------------------------------------ weights

def _tiny_checkpoint(tmp_path, name="tiny-llama", shards=1, dtype="bf16"):
    pytest.importorskip("safetensors")
    from llm.weights import random_weights, save_checkpoint

    cfg = named_config(name)
    w = random_weights(cfg, NumpyBackend(), dtype, seed=3)
    return cfg, w, save_checkpoint(w, cfg, tmp_path / f"{name}-{shards}", shards=shards)


@pytest.mark.parametrize("shards,dtype", [(1, "bf16"), (3, "f16"), (2, "f32")])
def test_checkpoint_roundtrip(tmp_path, shards, dtype):
    from llm.weights import load_checkpoint

    cfg, w, d = _tiny_checkpoint(tmp_path, shards=shards, dtype=dtype)
    assert load_config(str(d)) == cfg
    got = load_checkpoint(cfg, d, NumpyBackend(), "bf16")
    assert set(got) == set(cfg.weight_shapes())
    for k, v in w.items():
        np.testing.assert_array_equal(got[k].astype(np.float32), v.astype("bfloat16").astype(np.float32))


def _rewrite(path, mutate):
    """Edit a safetensors file's tensors (NumPy) and write it back."""
    from safetensors.numpy import load_file, save_file

    t = load_file(str(path))
    mutate(t)
    save_file(t, str(path))


def test_missing_tensor_named(tmp_path):
    from llm.weights import WeightError, load_checkpoint

    cfg, _, d = _tiny_checkpoint(tmp_path)
    _rewrite(d / "model.safetensors", lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(WeightError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"):
        load_checkpoint(cfg, d, NumpyBackend(), "bf16")


def test_missing_tensor_sharded_named(tmp_path):
    from llm.weights import WeightError, load_checkpoint

    cfg, _, d = _tiny_checkpoint(tmp_path, shards=2)
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    del idx["weight_map"]["lm_head.weight"]
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(WeightError, match=r"missing tensor 'lm_head\.weight'"):
        load_checkpoint(cfg, d, NumpyBackend(), "bf16")


def test_wrong_shape_named(tmp_path):
    from llm.weights import WeightError, load_checkpoint

    cfg, _, d = _tiny_checkpoint(tmp_path)

    def shrink(t):
        t["model.layers.0.self_attn.k_proj.weight"] = t["model.layers.0.self_attn.k_proj.weight"][:16]
    _rewrite(d / "model.safetensors", shrink)
    with pytest.raises(WeightError, match=r"'model\.layers\.0\.self_attn\.k_proj\.weight'.*shape \[16, 64\].*\[32, 64\]"):
        load_checkpoint(cfg, d, NumpyBackend(), "bf16")


def test_truncated_file_named(tmp_path):
    from llm.weights import WeightError, load_checkpoint, read_header

    cfg, _, d = _tiny_checkpoint(tmp_path)
    f = d / "model.safetensors"
    header, size = read_header(f)
    last = max(header, key=lambda k: header[k]["data_offsets"][1])
    data = f.read_bytes()
    f.write_bytes(data[:-100])
    with pytest.raises(WeightError, match=rf"'{last}'.*truncated"):
        load_checkpoint(cfg, d, NumpyBackend(), "bf16")
    f.write_bytes(data[:20])  # not even the whole header
    with pytest.raises(WeightError, match="truncated"):
        load_checkpoint(cfg, d, NumpyBackend(), "bf16")


def test_cli_reports_weight_error(tmp_path):
    cfg, _, d = _tiny_checkpoint(tmp_path)
    _rewrite(d / "model.safetensors", lambda t: t.pop("model.norm.weight"))
    r = subprocess.run(RUN + [str(d), "--backend", "interp", "--prompt-ids", "1,2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "missing tensor 'model.norm.weight'" in r.stderr


# ------------------------------------------------------------------- engine vs reference

PROMPTS = [[5, 17, 3, 88, 42, 7, 1], [9, 60, 2], [33]]
FORCED = [[11, 12, 13, 14], [21, 22, 23, 24], [31, 32, 33, 34]]


def _engine_vs_reference(name, dtype, prefill_attention="paged", mlp="auto", prompts=PROMPTS, fuse_qkv=True,
                         fuse_norm=True):
    from llm.engine import Engine
    from llm.weights import random_weights

    _stdlib_or_skip()
    cfg, be = named_config(name), NumpyBackend()
    w = random_weights(cfg, be, dtype, seed=7)
    eng = Engine(cfg, w, be, num_blocks=40, block_size=4, max_batch=4, max_seq_len=72, dtype=dtype,
                 prefill_attention=prefill_attention, mlp=mlp, fuse_qkv=fuse_qkv,
                 fuse_norm=fuse_norm)
    steps = len(FORCED[0])
    forced = FORCED[:len(prompts)]
    r = eng.generate(prompts, steps, keep_logits=True, forced_tokens=forced, stop_on_eos=False)
    assert len(r.logits) == steps and r.decode_steps == steps - 1
    assert len(eng.cache.free) == 39  # every block handed back
    errs = []
    for i, p in enumerate(prompts):
        ref = reference_logits(cfg, w, p + forced[i][:steps - 1])
        for st, lg in enumerate(r.logits):
            errs.append(_rel_rows(lg[i], ref[len(p) - 1 + st]))
    return max(errs)


@pytest.mark.parametrize("name", ["tiny", "tiny-llama"])
def test_engine_matches_reference_f32(name):
    assert _engine_vs_reference(name, "f32") <= 1e-4


def test_engine_silu_and_mul_mlp():
    """The MLP as linear on the fused [gate | up] weight + silu_and_mul (no gated_mlp)."""
    assert _engine_vs_reference("tiny-llama", "f32", mlp="silu_and_mul") <= 1e-4


def test_engine_unfused_decode():
    """Decode without the fusions (linear + rope + kv_cache_write instead of
    linear_qkv_rope_cache, linear + fused_add_rms_norm instead of linear_add_rms_norm): the
    same logits; and each fusion alone."""
    assert _engine_vs_reference("tiny", "f32", fuse_qkv=False, fuse_norm=False) <= 1e-4
    assert _engine_vs_reference("tiny-llama", "f32", fuse_qkv=False) <= 1e-4
    assert _engine_vs_reference("tiny-llama", "f32", fuse_norm=False) <= 1e-4


def test_engine_batch1_decode():
    """One sequence, one token per decode step."""
    from llm.engine import Engine
    from llm.weights import random_weights

    _stdlib_or_skip()
    cfg, be = named_config("tiny"), NumpyBackend()
    w = random_weights(cfg, be, "f32", seed=5)
    eng = Engine(cfg, w, be, num_blocks=8, block_size=4, max_batch=1, max_seq_len=16, dtype="f32")
    r = eng.generate([[4]], 4, keep_logits=True, forced_tokens=[[8, 9, 10, 11]], stop_on_eos=False)
    ref = reference_logits(cfg, w, [4, 8, 9, 10])
    assert max(_rel_rows(lg[0], ref[i]) for i, lg in enumerate(r.logits)) <= 1e-4


def test_engine_takes_the_decode_fusions():
    """Decode steps (and a paged prefill of up to 64 tokens) run linear_qkv_rope_cache and
    linear_add_rms_norm, not the calls they replace; a 20..40-token paged prefill takes
    gated_mlp between them."""
    from llm.engine import Engine, Sequence
    from llm.weights import random_weights

    _stdlib_or_skip()
    cfg, be = named_config("tiny"), NumpyBackend()
    w = random_weights(cfg, be, "f32", seed=3)
    eng = Engine(cfg, w, be, num_blocks=24, block_size=4, max_batch=2, max_seq_len=48, dtype="f32",
                 prefill_attention="paged")
    prompts = [list(range(3, 33)), list(range(5, 25))]  # 30 + 20 tokens: gated_mlp, fused QKV and norms
    seqs = [Sequence(list(p)) for p in prompts]
    eng.ops.start_profile()
    logits = eng.prefill(seqs)
    names = {n for n, _ in eng.ops.stop_profile()}
    assert {"linear_qkv_rope_cache", "linear_add_rms_norm", "gated_mlp"} <= names
    assert not names & {"rope", "kv_cache_write", "fused_add_rms_norm"}
    for i, p in enumerate(prompts):
        assert _rel_rows(be.to_numpy(logits)[i], reference_logits(cfg, w, p)[-1]) <= 1e-4
    for s, t in zip(seqs, (7, 9)):
        s.tokens.append(t)
    eng.ops.start_profile()
    eng.decode_step(seqs)
    names = {n for n, _ in eng.ops.stop_profile()}
    assert {"linear_qkv_rope_cache", "linear_add_rms_norm", "silu_and_mul"} <= names
    assert not names & {"rope", "kv_cache_write", "fused_add_rms_norm", "gated_mlp"}


@pytest.mark.parametrize("name", ["tiny", "tiny-llama"])
def test_engine_long_prefill_fused_kernels(name):
    """More than 64 prompt tokens in one prefill: linear_qkv, gated_mlp and dense
    attention_prefill (the prefill kernels); decode rows then take the split paths."""
    prompts = [list(range(3, 63)), [7, 8, 9, 10, 11]]
    assert _engine_vs_reference(name, "f32", "dense", prompts=prompts) <= 1e-4


def test_engine_matches_reference_bf16():
    assert _engine_vs_reference("tiny", "bf16") <= 1e-2


def test_engine_dense_prefill_attention():
    lib = _stdlib_or_skip()
    if not hasattr(lib, "attention_prefill"):
        pytest.skip("tilex.stdlib has no attention_prefill yet")
    assert _engine_vs_reference("tiny-llama", "f32", "dense") <= 1e-4


# ---------------------------------------------------------------------------------- CLI

def _cli(*args, timeout=300):
    r = subprocess.run(RUN + list(args), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_cli_json_greedy_matches_reference(tmp_path):
    _stdlib_or_skip()
    out = json.loads(_cli("tiny", "--random-weights", "--backend", "interp", "--dtype", "f32",
                          "--prompt-ids", "5,17,3;9", "--max-new-tokens", "3", "--no-eos",
                          "--dump-logits", str(tmp_path / "l.npy"), "--json"))
    assert out["backend"] == "interp" and out["prompt_lens"] == [3, 1]
    assert [len(t) for t in out["tokens"]] == [3, 3] and out["decode_steps"] == 2
    for k in ("prefill_ms", "decode_tok_s"):
        assert out[k] > 0
    logits = np.load(tmp_path / "l.npy")
    assert logits.shape == (3, 2, 97)
    # greedy: each token is the argmax of the logits that produced it
    assert (logits.argmax(-1).T == np.array(out["tokens"])).all()
    from llm.backend import NumpyBackend as NB
    from llm.weights import random_weights

    cfg = named_config("tiny")
    ref = reference_logits(cfg, random_weights(cfg, NB(), "f32", seed=0), [5, 17, 3] + out["tokens"][0][:2])
    assert _rel_rows(logits[:, 0], ref[2:]) <= 1e-4


def test_cli_checkpoint_dir_with_tokenizer(tmp_path):
    _stdlib_or_skip()
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    cfg, _, d = _tiny_checkpoint(tmp_path, name="tiny-llama", shards=2)
    vocab = {f"w{i}": i for i in range(97)}
    tok = tokenizers.Tokenizer(WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(d / "tokenizer.json"))
    out = json.loads(_cli(str(d), "--backend", "interp", "--prompt", "w5 w6 w7", "--prompt-ids",
                          "5,6,7", "--max-new-tokens", "2", "--no-eos", "--json"))
    assert out["prompt_lens"] == [3, 3]
    assert out["tokens"][0] == out["tokens"][1]  # same prompt, as ids and as text
    assert out["text"][0] == " ".join(f"w{t}" for t in out["tokens"][0])
