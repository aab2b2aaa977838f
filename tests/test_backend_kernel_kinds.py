"""Classifying profiled CUDA kernel names as tilex generated / library, copies or torch's (kernel_kinds.py)."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("torch")

from tilex.backend import kernel_kinds as K  # noqa: E402


def test_library_names_are_the_tile_files_kernels():
    names = K.library_names()
    for n in ("linear", "linear_bias", "linear_persistent", "gated_mlp", "rms_norm", "fused_add_rms_norm",
              "attention_prefill", "embedding", "argmax", "softmax"):
        assert n in names
    assert names == tuple(sorted(names, key=lambda n: (-len(n), n)))


@pytest.mark.parametrize("name,kind", [
    ("fused_d0dd7c2ba2", "generated"), ("cache_write", "generated"), ("masked_attention", "generated"),
    ("copy_into", "generated"),
    ("fused_add_rms_norm", "library"), ("linear_persistent", "library"), ("linear_bias", "library"),
    ("gated_mlp_persistent", "library"), ("attention_prefill", "library"), ("rms_norm", "library"),
    ("Memcpy DtoD (Device -> Device)", "copy"), ("Memset (Device)", "copy"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)", "torch"),
    ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "torch"), ("triton_poi_fused_add_0", "torch"),
    ("fused_xyz", "torch"), ("linearize", "torch"),
])
def test_kind(name, kind):
    assert K.kind(name) == kind


def test_generated_names_match_tilegen():
    """tilegen names a group `fused_` + 10 hex digits of its text: the pattern here must match what it makes."""
    import torch
    from torch._functorch.aot_autograd import aot_function

    from tilex.backend.program import Program

    got = []
    aot_function(lambda x: torch.sigmoid(x) * 2.0 + 1.0,
                 fw_compiler=lambda g, _: got.append(g) or g)(torch.randn(4, 8))
    names = [s.kernel.name for s in Program.lower(got[0]).steps if s.kind == "generated"]
    assert names and all(re.fullmatch(r"fused_[0-9a-f]{10}", n) and K.kind(n) == "generated" for n in names)


def test_shares_and_summary():
    table = {"fused_0123456789": (2, 30.0), "linear_bias": (3, 60.0), "Memcpy HtoD": (1, 5.0),
             "void at::native::fill_kernel(int)": (1, 5.0)}
    s = K.shares({k: t for k, (_, t) in table.items()})
    assert s == {"generated": (30.0, 0.3), "library": (60.0, 0.6), "copy": (5.0, 0.05), "torch": (5.0, 0.05)}
    d = K.summary(table, top=2)
    assert d["kernel_us"] == 100.0 and d["launches"] == 7 and d["torch_kernels"] == ["void at::native::fill_kernel(int)"]
    assert d["top"] == [("linear_bias", 3, 60.0), ("fused_0123456789", 2, 30.0)]
    assert d["share"]["library"] == 0.6


def test_cachegen_templates_are_named_as_listed():
    import torch

    from tilex.backend import cachegen as G
    from tilex.backend import decodeattn as D

    srcs = [G.cache_write_source(torch.bfloat16, torch.int64), G.copy_into_source(torch.float32, torch.bfloat16),
            G.masked_attention_source(torch.bfloat16, torch.bool), D.mask_table_source(torch.bool),
            D.q_rows_source(torch.bfloat16)]
    names = {n for s in srcs for n in re.findall(r"^\s*kernel\s+(\w+)", s, re.M)}
    assert names == set(K.CACHEGEN)
