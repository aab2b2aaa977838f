"""Issue 22 for examples/llm: checkpoints, config.json, safetensors headers, tokenizer and command line.

A missing or unreadable checkpoint is an error unless --random-weights; every malformed file gets a
message naming the file and the field or tensor, never a traceback.
"""
from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

from llm.backend import NumpyBackend  # noqa: E402
from llm.config import ConfigError, ModelConfig, load_config, named_config  # noqa: E402
from llm.loader import TokenizerError, load_model, load_tokenizer  # noqa: E402
from llm.weights import WeightError, load_checkpoint  # noqa: E402

RUN = [sys.executable, str(ROOT / "examples" / "llm" / "run.py")]


def _checkpoint(tmp_path, shards=1):
    pytest.importorskip("safetensors")
    from llm.weights import random_weights, save_checkpoint

    cfg = named_config("tiny-llama")
    w = random_weights(cfg, NumpyBackend(), "f32", seed=5)
    return cfg, save_checkpoint(w, cfg, tmp_path / f"ck{shards}", shards=shards)


def _edit_header(path: Path, edit) -> None:
    """Rewrite a safetensors file's JSON header (edit(header) -> new header), keeping its data."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = edit(json.loads(raw[8:8 + n]))
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])


def _cli(*args, timeout=300):
    return subprocess.run(RUN + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- 1: no silent random weights
def test_config_only_directory_is_an_error_unless_random(tmp_path):
    d = tmp_path / "cfgonly"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(named_config("tiny").to_hf()))
    with pytest.raises(WeightError, match=r"no model\.safetensors and no model\.safetensors\.index\.json.*--random-weights"):
        load_model(str(d), NumpyBackend(), "f32")
    with pytest.raises(WeightError, match="no model.safetensors"):
        load_model(str(d / "config.json"), NumpyBackend(), "f32")  # a config.json names its directory
    cfg, w, tok = load_model(str(d), NumpyBackend(), "f32", random=True)
    assert set(w) == set(cfg.weight_shapes()) and tok is None


def test_pytorch_bin_only_directory_says_safetensors_is_required(tmp_path):
    d = tmp_path / "bin"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(named_config("tiny").to_hf()))
    (d / "pytorch_model.bin").write_bytes(b"\x80\x02not really a pickle")
    with pytest.raises(WeightError, match=r"pytorch_model\.bin but no model\.safetensors: .*safetensors checkpoints only"):
        load_model(str(d), NumpyBackend(), "f32")


def test_safetensors_name_that_is_a_directory(tmp_path):
    d = tmp_path / "dir"
    (d / "model.safetensors").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(named_config("tiny").to_hf()))
    with pytest.raises(WeightError, match=r"model\.safetensors is not a file"):
        load_model(str(d), NumpyBackend(), "f32")


def test_named_config_needs_random_weights():
    with pytest.raises(WeightError, match="'tiny' is a named config: .*--random-weights"):
        load_model("tiny", NumpyBackend(), "f32")


def test_cli_missing_checkpoint_exit_1(tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(named_config("tiny").to_hf()))
    (d / "pytorch_model.bin").write_bytes(b"x")
    r = _cli(d, "--backend", "interp", "--prompt-ids", "1,2")
    assert r.returncode == 1 and "safetensors" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = _cli("tiny", "--backend", "interp", "--prompt-ids", "1,2")
    assert r.returncode == 1 and "--random-weights" in r.stderr and "Traceback" not in r.stderr, r.stderr


# ---------------------------------------------------------------- 11: config.json types
BASE = named_config("tiny-llama").to_hf()


@pytest.mark.parametrize("key, value, msg", [
    ("hidden_size", "64", "'hidden_size' must be an integer, got str '64'"),
    ("hidden_size", None, "'hidden_size' must be an integer, got NoneType"),
    ("hidden_size", 64.7, "'hidden_size' must be an integer, got float 64.7"),
    ("num_key_value_heads", [2], "'num_key_value_heads' must be an integer, got list"),
    ("rope_scaling", "linear", "'rope_scaling' must be an object"),
    ("rope_theta", "1e4", "'rope_theta' must be a finite number"),
    ("rms_norm_eps", None, "'rms_norm_eps' must be a finite number"),
    ("tie_word_embeddings", "false", "'tie_word_embeddings' must be true or false"),
    ("eos_token_id", {"a": 1}, "'eos_token_id' must be a token id or a list"),
    ("max_position_embeddings", 512.5, "'max_position_embeddings' must be an integer"),
    ("model_type", ["llama"], "'model_type' must be a string"),
])
def test_config_field_types(tmp_path, key, value, msg):
    cfg = dict(BASE, **{key: value})
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace("[", r"\[")):
        load_config(str(p))


def test_config_whole_file_errors(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must hold a JSON object, got a list"):
        load_config(str(p))
    p.write_bytes(b'{"hidden_size": "\xff\xfe"}')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(str(p))


def test_integer_valued_float_is_accepted():
    assert ModelConfig.from_hf(dict(BASE, hidden_size=64.0)).hidden_size == 64


# ---------------------------------------------------------------- 12: safetensors headers
@pytest.mark.parametrize("edit, msg", [
    (lambda h: [1, 2], "the header is a JSON list"),
    (lambda h: {**h, "model.norm.weight": {k: v for k, v in h["model.norm.weight"].items() if k != "data_offsets"}},
     "tensor 'model.norm.weight' in model.safetensors: the header entry has no 'data_offsets'"),
    (lambda h: {**h, "model.norm.weight": {k: v for k, v in h["model.norm.weight"].items() if k != "shape"}},
     "tensor 'model.norm.weight' in model.safetensors: the header entry has no 'shape'"),
    (lambda h: {**h, "model.norm.weight": [1]}, "tensor 'model.norm.weight' .*header entry is a JSON list"),
    (lambda h: {**h, "model.norm.weight": {**h["model.norm.weight"], "shape": [-64]}}, "'shape' must be a list"),
    (lambda h: {**h, "model.norm.weight": {**h["model.norm.weight"], "data_offsets": [8, 4]}}, "'data_offsets' must be"),
    (lambda h: {**h, "model.norm.weight": {**h["model.norm.weight"], "dtype": 7}}, "'dtype' must be a string"),
])
def test_malformed_safetensors_header(tmp_path, edit, msg):
    cfg, d = _checkpoint(tmp_path)
    _edit_header(d / "model.safetensors", edit)
    with pytest.raises(WeightError, match=msg):
        load_checkpoint(cfg, d, NumpyBackend(), "f32")


def test_overlapping_tensors_are_named(tmp_path):
    cfg, d = _checkpoint(tmp_path)

    def overlap(h):
        a, b = "model.norm.weight", "model.layers.0.input_layernorm.weight"
        h[b] = {**h[b], "data_offsets": list(h[a]["data_offsets"])}  # same bytes, same size
        return h

    _edit_header(d / "model.safetensors", overlap)
    with pytest.raises(WeightError, match="overlap in the data section"):
        load_checkpoint(cfg, d, NumpyBackend(), "f32")


@pytest.mark.parametrize("index, msg", [
    ({"weight_map": ["a", "b"]}, "'weight_map' must be an object .*is a JSON list"),
    ([1], "'weight_map' must be an object"),
    ({"metadata": {}}, "no 'weight_map'"),
    ({"weight_map": {"model.norm.weight": 3}}, "maps to 3, not a file name"),
    ({"weight_map": {"model.norm.weight": "../x.safetensors"}}, "not a file name"),
])
def test_malformed_index(tmp_path, index, msg):
    cfg, d = _checkpoint(tmp_path, shards=2)
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightError, match=msg):
        load_checkpoint(cfg, d, NumpyBackend(), "f32")


def test_valid_checkpoints_still_load(tmp_path):
    for shards in (1, 2):
        cfg, d = _checkpoint(tmp_path, shards)
        got, w, _ = load_model(str(d), NumpyBackend(), "f32")
        assert got == cfg and set(w) == set(cfg.weight_shapes())


# ---------------------------------------------------------------- 13: tokenizer only when needed
def test_garbage_tokenizer_is_needed_only_for_text(tmp_path, capsys):
    cfg, d = _checkpoint(tmp_path)
    (d / "tokenizer.json").write_text("{ this is not a tokenizer")
    assert load_tokenizer(str(d)) is None
    assert "cannot load the tokenizer" in capsys.readouterr().err
    with pytest.raises(TokenizerError, match="cannot load the tokenizer"):
        load_tokenizer(str(d), required=True)
    with pytest.raises(TokenizerError, match="need a tokenizer.json"):
        load_tokenizer("tiny", required=True)


def test_cli_prompt_ids_run_with_a_garbage_tokenizer(tmp_path):
    pytest.importorskip("tilex.stdlib")
    cfg, d = _checkpoint(tmp_path)
    (d / "tokenizer.json").write_text("garbage")
    r = _cli(d, "--backend", "interp", "--dtype", "f32", "--prompt-ids", "1,2", "--max-new-tokens", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert "warning" in r.stderr and "tokenizer" in r.stderr
    assert len(json.loads(r.stdout)["tokens"][0]) == 1
    r = _cli(d, "--backend", "interp", "--prompt", "hello")
    assert r.returncode == 1 and "cannot load the tokenizer" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------- 16: command line values
@pytest.mark.parametrize("args, msg", [
    (["--block-size", "0"], "--block-size must be at least 1, got 0"),
    (["--max-new-tokens", "-1"], "--max-new-tokens must be at least 1, got -1"),
    (["--batch", "0"], "--batch must be at least 1"),
    (["--top-p", "0"], "--top-p must be in (0, 1]"),
    (["--temperature", "-1"], "--temperature must be >= 0"),
    (["--dump-logits", "/nonexistent-dir-22/x.npy"], "directory /nonexistent-dir-22 does not exist"),
])
def test_cli_bad_values_fail_before_the_run(args, msg):
    r = _cli("tiny", "--random-weights", "--backend", "interp", "--prompt-ids", "1,2", *args, timeout=60)
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr
