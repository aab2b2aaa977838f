"""The configuration model against measured times (CPU tier).

tests/data/gemm_sweep_h200.json holds what `benchmarks/sweep_gemm.py` measured on an H200 (median ms of every
candidate configuration that built and matched torch; trimmed to kernel, defines, S and ms). For each swept shape
the configuration `linear` runs (`path_choice` and its tiles, the decode paths' configurations) must be one of the
measured best six and within TOL of the fastest. (The run was cut before examples/matmul.tile's shapes: none here.) These are measured data, not
expected answers: a model change that picks worse configurations fails here; a re-sweep refreshes the file.
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
DATA = json.loads((ROOT / "tests" / "data" / "gemm_sweep_h200.json").read_text(encoding="utf-8"))
LN = importlib.import_module("tilex.stdlib.linear")
TOL = 1.10  # the pick may be at most 10% slower than the best measured candidate


def _key(kernel: str, defines: dict, s=None) -> tuple:
    return kernel, tuple(sorted((k, v) for k, v in defines.items() if k != "PROGRAMS")), s


def _measured(row) -> dict:
    return {_key(r["kernel"], r["defines"], r.get("S")): r["ms"] for r in row["results"]}


def _ids(rows):
    return [f"{r['family']}-{'x'.join(map(str, r['shape']))}" for r in rows]


LINEAR = [r for r in DATA["rows"] if r["family"] == "linear"]


def linear_pick(m: int, k: int, n: int) -> tuple:
    """The measured-table key of what tilex.stdlib.linear runs on the GPU at M x K x N (no bias)."""
    if LN._use_split_kernels(m, n, k):
        return _key("linear_splitk", LN._SPLITK, max(1, LN._splits(m, n, k)))
    if LN._use_swap(m, k, True):
        return _key("linear_swap", LN._swap_config(n))
    path, tiles, s, _ = LN.path_choice("linear", "bf16", m, n, k)
    if path == "splitk":
        return _key("linear_splitk_tiles", tiles, s)
    cfg = LN._model_config("linear", "bf16", m, n, k, LN._SPACE, {})
    if cfg == LN._LARGE and m > 64 and LN._PERSISTENT:
        return _key("linear_persistent", cfg)
    return _key("linear", cfg)


@pytest.mark.parametrize("row", LINEAR, ids=_ids(LINEAR))
def test_linear_picks_a_measured_near_best_configuration(row):
    m, k, n = row["shape"]
    got = _measured(row)
    pick = linear_pick(m, k, n)
    assert pick in got, f"the pick {pick} was not measured at {row['shape']}"
    best = min(got.values())
    assert got[pick] <= TOL * best, (f"{row['shape']}: pick {pick} {got[pick] * 1e3:.1f} us, best "
                                     f"{min(got, key=got.get)} {best * 1e3:.1f} us")


def test_the_data_is_measured_against_cublas():
    """Every row has cuBLAS's time and candidates that ran (a sweep that recorded only failures is no data)."""
    assert len(LINEAR) >= 10
    for row in DATA["rows"]:
        assert row["cublas_ms"] > 0 and len(row["results"]) >= 3
        assert all(r["ms"] > 0 for r in row["results"])


# session 19: the persistent kernels with TMA-stored, 192- and 160-column tiles at issue 17's losing shapes
TMA_DATA = json.loads((ROOT / "tests" / "data" / "gemm_tma_h200.json").read_text(encoding="utf-8"))
PATH_KERNEL = {"persistent3": "linear_persistent_tma3", "persistent5": "linear_persistent_tma5", "tc": "linear",
               "splitk": "linear_splitk_tiles"}


def persistent_pick(m: int, k: int, n: int) -> tuple:
    """(kernel, defines) of what tilex.stdlib.linear's path_choice runs on the GPU at M x K x N (no bias)."""
    path, tiles, s, _ = LN.path_choice("linear", "bf16", m, n, k)
    if path == "persistent":
        kernel = "linear_persistent_tma" if n % 8 == 0 and LN._TMA_STORE else "linear_persistent"
    else:
        kernel = PATH_KERNEL[path]
    return kernel, tuple(sorted(tiles.items()))


@pytest.mark.parametrize("row", TMA_DATA["rows"], ids=["x".join(map(str, r["shape"])) for r in TMA_DATA["rows"]])
def test_linear_picks_a_measured_near_best_persistent_kernel(row):
    """The wrapper's pick, with the TMA-store / 128x192 / 128x160 paths on, is one of the measured candidates and
    within TOL of the fastest (H200: the picks were the fastest at 5 of the 7 shapes, 5-8% off at the two M=256 ones,
    where 6 stages beat the model's 4)."""
    m, k, n = row["shape"]
    got = {(r["kernel"], tuple(sorted(r["defines"].items()))): r["ms"] for r in row["results"]}
    pick = persistent_pick(m, k, n)
    assert pick in got, f"the pick {pick} was not measured at {row['shape']}"
    best = min(got.values())
    assert got[pick] <= TOL * best, (f"{row['shape']}: pick {pick} {got[pick] * 1e3:.1f} us, best "
                                     f"{min(got, key=got.get)} {best * 1e3:.1f} us")


# session 23: the gated MLP's whole tile space at decode and small-batch sizes (benchmarks/sweep_gated.py)
GATED_DATA = json.loads((ROOT / "tests" / "data" / "gated_sweep_h200.json").read_text(encoding="utf-8"))
GATED_TOL = 1.06  # the gated pick may be at most 6% slower than the best measured configuration of its space


def _gated_ids(rows):
    return ["x".join(map(str, r["shape"])) for r in rows]


@pytest.mark.parametrize("row", GATED_DATA["rows"], ids=_gated_ids(GATED_DATA["rows"]))
def test_gated_mlp_picks_a_measured_near_best_configuration(row):
    """Before the step terms (autoconfig_model.STEP_NS_ROW) the pick at M=1 K=2048 N=11008 ran 0.50x the best and
    at M=1 K=3584 N=18944 (Qwen2.5-7B's MLP) 0.64x: every candidate tied at the DRAM floor."""
    m, k, n = row["shape"]
    space = LN._GATED_SPACE
    got = {tuple(sorted(r["defines"].items())): r["ms"] for r in row["results"]
           if all(r["defines"][p] in vals for p, vals in space.items())}
    LN._CHOSEN.pop(("gated_mlp", "bf16", m, n, k), None)
    pick = tuple(sorted(LN._model_config("gated_mlp", "bf16", m, n, k, space, {}).items()))
    assert pick in got, f"the pick {pick} was not measured at {row['shape']}"
    best = min(got.values())
    assert got[pick] <= GATED_TOL * best, (f"{row['shape']}: pick {dict(pick)} {got[pick] * 1e3:.1f} us, best "
                                           f"{dict(min(got, key=got.get))} {best * 1e3:.1f} us")


def test_the_gated_data_is_measured_against_cublas():
    rows = GATED_DATA["rows"]
    assert len(rows) >= 20 and {r["shape"][0] for r in rows} >= {1, 16, 48}
    for row in rows:
        assert row["cublas_two_ms"] > 0 and len(row["results"]) >= 30
        assert all(r["ms"] > 0 for r in row["results"])
