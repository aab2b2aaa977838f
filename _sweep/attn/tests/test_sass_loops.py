"""benchmarks/sass_loops.py's SASS parsing and fast-path walk, on a small hand-written listing."""
from __future__ import annotations

import importlib.util
import pathlib

spec = importlib.util.spec_from_file_location(
    "sass_loops", pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "sass_loops.py")
S = importlib.util.module_from_spec(spec)
spec.loader.exec_module(S)

LISTING = """
.L_x_1:
        /*0000*/                   IADD3 R1, R1, 0x40, RZ ;
        /*0010*/               @P0 BRA `(.L_x_2) ;
        /*0020*/                   ISETP.GE.AND P1, PT, R1, R2, PT ;
        /*0030*/                   FFMA R3, R3, R4, R5 ;
        /*0040*/                   BRA `(.L_x_3) ;
.L_x_2:
        /*0050*/                   LDGSTS.E.BYPASS.128 [R9], desc[UR6][R4.64] ;
        /*0060*/              @!PT LDS RZ, [RZ] ;
.L_x_3:
        /*0070*/                   DEPBAR.LE SB0, 0x1 ;
        /*0080*/                   FMUL R3, R3, R3 ;
        /*0090*/               @P2 BRA `(.L_x_1) ;
        /*00a0*/                   EXIT ;
"""


def test_parse_and_fast_path():
    ins, labels = S.parse(LISTING)
    assert len(ins) == 11 and labels == {".L_x_1": 0, ".L_x_2": 5, ".L_x_3": 7}
    assert S.opcode("@!P1 BRA `(.L_x_3)") == "BRA" and S.target("@P2 BRA `(.L_x_1)") == ".L_x_1"
    # the predicated branch is taken (its target reaches the cp.async), the slow block is skipped,
    # the never-executed padding is not counted
    hot = S.hot_path(ins, labels, 0, 9)
    assert sum(hot.values()) == 6
    assert hot == {"integer/address": 1, "control": 3, "memory": 1, "float": 1}
