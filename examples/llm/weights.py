"""Weights: a Hugging Face safetensors checkpoint (single file or sharded), or random ones.

Every tensor is checked against the config before any data is read: a missing tensor, a
shape that disagrees with the config, an unsupported dtype or a file cut short is a
`WeightError` that names the tensor (and the file). Loading uses the `safetensors`
library; on the cuda backend each tensor goes straight into GPU memory
(`safe_open(..., framework="pt", device="cuda")`).
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from .config import ModelConfig

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
FILE_DTYPES = {"BF16": 2, "F16": 2, "F32": 4}  # dtypes accepted in the checkpoint, with item size


class WeightError(ValueError):
    """A checkpoint that does not match its config: names the tensor and the file."""


def read_header(path: Path) -> tuple[dict, int]:
    """The JSON header of a safetensors file and the size of its data section.

    Raises WeightError when the file is too short to hold its own header.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise WeightError(f"{path.name}: truncated safetensors file ({size} bytes, no header)")
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            raise WeightError(f"{path.name}: truncated safetensors file: the header says "
                              f"{n} bytes of JSON but the file has {size} bytes")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise WeightError(f"{path.name}: not a safetensors file (bad JSON header: {e})") from None
    header.pop("__metadata__", None)
    return header, size - 8 - n


def checkpoint_files(ckpt_dir: Path) -> dict[str, Path]:
    """tensor name -> the file that holds it (from the index for a sharded checkpoint)."""
    ckpt_dir = Path(ckpt_dir)
    index = ckpt_dir / INDEX_FILE
    if index.is_file():
        try:
            wm = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise WeightError(f"{INDEX_FILE}: unreadable index ({type(e).__name__}: {e})") from None
        return {k: ckpt_dir / v for k, v in wm.items()}
    single = ckpt_dir / SINGLE_FILE
    if single.is_file():
        header, _ = read_header(single)
        return {k: single for k in header}
    raise WeightError(f"{ckpt_dir}: no {SINGLE_FILE} and no {INDEX_FILE}")


def validate_checkpoint(cfg: ModelConfig, ckpt_dir: Path) -> dict[str, Path]:
    """Check names, shapes, dtypes and byte ranges of every tensor the config needs."""
    where = checkpoint_files(ckpt_dir)
    headers: dict[Path, tuple[dict, int]] = {}
    for name, shape in cfg.weight_shapes().items():
        if name not in where:
            raise WeightError(f"missing tensor '{name}' (expected shape {list(shape)}) in {ckpt_dir}")
        path = where[name]
        if not path.is_file():
            raise WeightError(f"tensor '{name}': its file {path.name} (from {INDEX_FILE}) does not exist")
        if path not in headers:
            headers[path] = read_header(path)
        header, data_size = headers[path]
        if name not in header:
            raise WeightError(f"missing tensor '{name}': {INDEX_FILE} points at {path.name}, "
                              "which does not hold it")
        info = header[name]
        if tuple(info["shape"]) != tuple(shape):
            raise WeightError(f"tensor '{name}' in {path.name} has shape {list(info['shape'])}, "
                              f"but the config needs {list(shape)}")
        if info["dtype"] not in FILE_DTYPES:
            raise WeightError(f"tensor '{name}' in {path.name} has dtype {info['dtype']}; "
                              f"supported: {', '.join(FILE_DTYPES)}")
        begin, end = info["data_offsets"]
        want = int(np.prod(shape, dtype=np.int64)) * FILE_DTYPES[info["dtype"]]
        if end - begin != want:
            raise WeightError(f"tensor '{name}' in {path.name}: {end - begin} bytes of data for "
                              f"{want} expected from its shape and dtype")
        if end > data_size:
            raise WeightError(f"tensor '{name}' in {path.name} is truncated: its data ends at byte "
                              f"{end} of the data section but the file holds {data_size} "
                              "(file cut short?)")
    return where


def load_checkpoint(cfg: ModelConfig, ckpt_dir, backend, dtype: str) -> dict:
    """HF name -> array on `backend`, cast to `dtype`. Validates first (see module doc)."""
    import ml_dtypes  # noqa: F401  # registers 'bfloat16' with NumPy for safetensors' np reader
    from safetensors import safe_open

    where = validate_checkpoint(cfg, Path(ckpt_dir))
    by_file: dict[Path, list[str]] = {}
    for name in cfg.weight_shapes():
        by_file.setdefault(where[name], []).append(name)
    out = {}
    for path, names in by_file.items():
        if backend.is_gpu():
            opener = safe_open(str(path), framework="pt", device=str(backend.device))
        else:
            opener = safe_open(str(path), framework="np")
        with opener as f:
            for name in names:
                try:
                    t = f.get_tensor(name)
                except Exception as e:  # anything the pre-check could not see
                    raise WeightError(f"tensor '{name}' in {path.name}: cannot be read "
                                      f"({type(e).__name__}: {e})") from None
                out[name] = backend.cast(t, dtype)
    return out


def random_weights(cfg: ModelConfig, backend, dtype: str, seed: int = 0, std: float = 0.02) -> dict:
    """Normal(0, std) matrices and biases; RMSNorm weights 1 + Normal(0, std). HF names."""
    if backend.is_gpu():
        import torch

        rng = torch.Generator(device=backend.device)
        rng.manual_seed(seed)
    else:
        rng = np.random.default_rng(seed)
    out = {}
    for name, shape in cfg.weight_shapes().items():
        w = backend.randn(shape, "f32", std, rng)
        if name.endswith("norm.weight"):
            w = w + 1.0
        out[name] = backend.cast(w, dtype)
    return out


def save_checkpoint(weights_np: dict, cfg: ModelConfig, out_dir, shards: int = 1) -> Path:
    """Write NumPy weights + config.json as a HF checkpoint (one file or `shards` files + index)."""
    from safetensors.numpy import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(cfg.to_hf(), indent=1))
    names = list(weights_np)
    if shards <= 1:
        save_file({k: np.ascontiguousarray(weights_np[k]) for k in names}, str(out_dir / SINGLE_FILE))
        return out_dir
    weight_map = {}
    for s in range(shards):
        part = names[s::shards]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: np.ascontiguousarray(weights_np[k]) for k in part}, str(out_dir / fname))
        weight_map.update({k: fname for k in part})
    (out_dir / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
    return out_dir
