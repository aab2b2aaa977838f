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
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise WeightError(f"{path.name}: truncated safetensors file ({size} bytes, no header)")
            (n,) = struct.unpack("<Q", head)
            if 8 + n > size:
                raise WeightError(f"{path.name}: truncated safetensors file: the header says "
                                  f"{n} bytes of JSON but the file has {size} bytes")
            raw = f.read(n)
    except OSError as e:
        raise WeightError(f"{path}: cannot read the checkpoint file ({e.strerror or e})") from None
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WeightError(f"{path.name}: not a safetensors file (bad JSON header: {e})") from None
    if not isinstance(header, dict):
        raise WeightError(f"{path.name}: not a safetensors file (the header is a JSON {type(header).__name__}, "
                          "not an object of tensors)")
    header.pop("__metadata__", None)
    data_size = size - 8 - n
    for name, info in header.items():
        _check_entry(path, name, info)
    spans = sorted((info["data_offsets"][0], info["data_offsets"][1], name) for name, info in header.items())
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise WeightError(f"{path.name}: tensors '{n0}' (bytes {b0}-{e0}) and '{n1}' (bytes {b1}-{e1}) "
                              "overlap in the data section")
    return header, data_size


def _check_entry(path: Path, name: str, info) -> None:
    """One header entry: {"dtype": str, "shape": [ints >= 0], "data_offsets": [begin, end]}, else WeightError."""
    what = f"tensor '{name}' in {path.name}"
    if not isinstance(info, dict):
        raise WeightError(f"{what}: the header entry is a JSON {type(info).__name__}, not an object")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in info:
            raise WeightError(f"{what}: the header entry has no '{key}'")
    if not isinstance(info["dtype"], str):
        raise WeightError(f"{what}: 'dtype' must be a string, got {info['dtype']!r}")
    shape = info["shape"]
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        raise WeightError(f"{what}: 'shape' must be a list of non-negative integers, got {shape!r}")
    off = info["data_offsets"]
    if not (isinstance(off, list) and len(off) == 2 and all(_is_uint(o) for o in off) and off[0] <= off[1]):
        raise WeightError(f"{what}: 'data_offsets' must be [begin, end] with 0 <= begin <= end, got {off!r}")


def _is_uint(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def checkpoint_files(ckpt_dir: Path) -> dict[str, Path]:
    """tensor name -> the file that holds it (from the index for a sharded checkpoint)."""
    ckpt_dir = Path(ckpt_dir)
    index = ckpt_dir / INDEX_FILE
    if index.is_file():
        try:
            data = json.loads(index.read_bytes())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise WeightError(f"{INDEX_FILE}: unreadable index ({type(e).__name__}: {e})") from None
        except OSError as e:
            raise WeightError(f"{index}: cannot read the index ({e.strerror or e})") from None
        wm = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(wm, dict):
            got = "no 'weight_map'" if not isinstance(data, dict) or "weight_map" not in data \
                else f"'weight_map' is a JSON {type(wm).__name__}"
            raise WeightError(f"{INDEX_FILE}: 'weight_map' must be an object of tensor name -> file name ({got})")
        for k, v in wm.items():
            if not isinstance(v, str) or not v or Path(v).name != v:
                raise WeightError(f"{INDEX_FILE}: tensor '{k}' maps to {v!r}, not a file name in {ckpt_dir}")
        return {k: ckpt_dir / v for k, v in wm.items()}
    single = ckpt_dir / SINGLE_FILE
    if single.is_file():
        header, _ = read_header(single)
        return {k: single for k in header}
    raise WeightError(missing_checkpoint(ckpt_dir))


TORCH_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "consolidated.00.pth")


def missing_checkpoint(ckpt_dir: Path) -> str:
    """Why `ckpt_dir` holds no safetensors checkpoint, for the message."""
    ckpt_dir = Path(ckpt_dir)
    for name in (SINGLE_FILE, INDEX_FILE):
        p = ckpt_dir / name
        if p.exists() and not p.is_file():
            return f"{p} is not a file (a directory?): it must be the safetensors checkpoint"
    torch_files = [n for n in TORCH_FILES if (ckpt_dir / n).exists()]
    if torch_files:
        return (f"{ckpt_dir} has {torch_files[0]} but no {SINGLE_FILE}: this engine reads safetensors "
                "checkpoints only; convert it (transformers: model.save_pretrained(dir, safe_serialization=True))")
    return f"{ckpt_dir}: no {SINGLE_FILE} and no {INDEX_FILE} (pass --random-weights to run without a checkpoint)"


def has_checkpoint(ckpt_dir) -> bool:
    p = Path(ckpt_dir)
    return p.is_dir() and ((p / SINGLE_FILE).is_file() or (p / INDEX_FILE).is_file())


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
        info = header[name]  # its entry is well formed (read_header checks every entry)
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


def read_checkpoint(cfg: ModelConfig, ckpt_dir, backend, read=lambda f, name: f.get_tensor(name)):
    """Yield (HF name, array on `backend`) for every weight, file by file, each taken by `read(opened file,
    name)` (the whole tensor; a loader of shards passes a get_slice reader). Validates first (module doc);
    a tensor the headers passed but that cannot be read is a WeightError naming it."""
    import ml_dtypes  # noqa: F401  # registers 'bfloat16' with NumPy for safetensors' np reader
    from safetensors import safe_open

    where = validate_checkpoint(cfg, Path(ckpt_dir))
    by_file: dict[Path, list[str]] = {}
    for name in cfg.weight_shapes():
        by_file.setdefault(where[name], []).append(name)
    for path, names in by_file.items():
        if backend.is_gpu():
            opener = safe_open(str(path), framework="pt", device=str(backend.device))
        else:
            opener = safe_open(str(path), framework="np")
        with opener as f:
            for name in names:
                try:
                    t = read(f, name)
                except Exception as e:  # anything the pre-check could not see
                    raise WeightError(f"tensor '{name}' in {path.name}: cannot be read "
                                      f"({type(e).__name__}: {e})") from None
                yield name, t


def load_checkpoint(cfg: ModelConfig, ckpt_dir, backend, dtype: str) -> dict:
    """HF name -> array on `backend`, cast to `dtype`. Validates first (see module doc)."""
    return {name: backend.cast(t, dtype) for name, t in read_checkpoint(cfg, ckpt_dir, backend)}


def random_draws(cfg: ModelConfig, backend, seed: int = 0, std: float = 0.02):
    """Yield (HF name, f32 array): Normal(0, std) matrices and biases, RMSNorm weights 1 + Normal(0, std), in
    the order of cfg.weight_shapes() from one generator (what random_weights and its sharded form draw)."""
    if backend.is_gpu():
        import torch

        rng = torch.Generator(device=backend.device)
        rng.manual_seed(seed)
    else:
        rng = np.random.default_rng(seed)
    for name, shape in cfg.weight_shapes().items():
        w = backend.randn(shape, "f32", std, rng)
        yield name, (w + 1.0 if name.endswith("norm.weight") else w)


def random_weights(cfg: ModelConfig, backend, dtype: str, seed: int = 0, std: float = 0.02) -> dict:
    """Normal(0, std) matrices and biases; RMSNorm weights 1 + Normal(0, std). HF names."""
    return {name: backend.cast(w, dtype) for name, w in random_draws(cfg, backend, seed, std)}


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
