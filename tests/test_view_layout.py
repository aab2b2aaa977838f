"""A broadcast view (`l[:, None]`) read in a register layout its variable's array does not have is a
compile-time error, not wrong registers (H200, session 17: attention_prefill_short.tile at BK=32 read a row sum
of an mma.sync product at a wgmma product's 64 slots, past its 4 registers, and gave NaN)."""
from pathlib import Path

import pytest

import tilex
from tilex.diagnostics import CompileError
from tilex.pipeline import Options

ROOT = Path(__file__).resolve().parents[1]


def _short(bk_rule: str) -> str:
    src = (ROOT / "stdlib_kernels" / "attention_prefill_short.tile").read_text()
    assert "BK % 64 == 0" in src
    return src.replace("BK % 64 == 0", bk_rule)


def test_view_in_another_products_layout_is_a_clear_error():
    with pytest.raises(CompileError) as got:
        tilex.translate(_short("BK % 32 == 0"), options=Options(defines={"BK": 32}, arch="sm_90a"))
    msg = str(got.value)
    assert "not supported yet: 'l[:, None]' is read in a register layout that 'l' does not have" in msg


def test_same_kernel_at_its_supported_tiling_translates():
    out = tilex.translate(_short("BK % 64 == 0"), options=Options(defines={"BK": 64}, arch="sm_90a"))
    assert "attention_prefill_short" in out.cuda
