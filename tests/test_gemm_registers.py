"""The register split of warp-specialized wgmma kernels (codegen/matmul.py `register_split`): setmaxnreg moves
registers through a pool of the block's own (PTX ISA: `setmaxnreg.inc` blocks until the CTA's pool holds what it
asks), so the producer's `setmaxnreg.dec` and the consumers' `setmaxnreg.inc` must together fit in what the block
held at launch. Four consumer warpgroups (BM=256, 640 threads: 96 registers each at launch) asked 112: three
warpgroups got their registers, the fourth waited forever, and the producer with it (the session-18 hang of
linear_persistent_tma at BM=256 on the H200). Checked on the generated CUDA (CPU) and against ptxas's own count."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tilex.codegen.matmul import register_split
from tilex.pipeline import Options
from tilex.translate import translate

LINEAR = Path(__file__).resolve().parents[1] / "stdlib_kernels" / "linear.tile"
REGISTER_FILE = 65536  # 32-bit registers of an sm_90 SM

# (kernel, defines): one, two and four consumer warpgroups; persistent (with and without TMA stores) and not
CASES = [("linear_persistent_tma", dict(BM=64, BN=128, STAGES=6)), ("linear_persistent_tma", dict(BM=128, BN=128)),
         ("linear_persistent_tma", dict(BM=256, BN=128)), ("linear_persistent_tma3", dict()),
         ("linear_persistent", dict(BM=256, BN=128)), ("linear", dict(BM=256, BN=128)),
         ("linear", dict(BM=128, BN=256)), ("gated_mlp_persistent", dict(BM=256, BN=64))]


def _cuda(kernel: str, defines: dict) -> str:
    return translate(LINEAR.read_text(), str(LINEAR), Options(defines=defines, arch="sm_90a", kernel=kernel)).cuda


def _split(cuda: str) -> dict:
    """What the generated kernel asks: its launch bounds, the producer's first thread (= consumer threads), the
    setmaxnreg counts."""
    threads, blocks = re.search(r"__launch_bounds__\((\d+)(?:, (\d+))?\)", cuda).groups()
    consumers = int(re.search(r"if \(threadIdx\.x >= (\d+)\) \{  // the producer warpgroup", cuda).group(1))
    (dec,), (inc,) = (set(re.findall(rf"tilex_setmaxnreg_{a}<(\d+)>\(\);", cuda)) for a in ("dec", "inc"))
    return dict(threads=int(threads), blocks=int(blocks or 1), consumers=consumers, producers=int(threads) - consumers,
                dec=int(dec), inc=int(inc))


def _asked(s: dict) -> int:
    """Registers the block holds after every warpgroup's setmaxnreg."""
    return s["producers"] * s["dec"] + s["consumers"] * s["inc"]


@pytest.mark.parametrize("kernel,defines", CASES)
def test_setmaxnreg_fits_in_what_the_block_holds_at_launch(kernel, defines):
    """At most __launch_bounds__(T, B)'s registers per thread (REGISTER_FILE / (T B), in steps of 8) for the T
    threads, less the producer's share, go to the consumers."""
    s = _split(_cuda(kernel, defines))
    held = min(255, REGISTER_FILE // (s["threads"] * s["blocks"])) // 8 * 8
    assert _asked(s) <= s["threads"] * held, (s, held)
    for r in (s["dec"], s["inc"]):
        assert 24 <= r <= 256 and r % 8 == 0, s  # the PTX operand's range
    assert s["dec"] <= held <= s["inc"] or s["inc"] == 240, s  # .dec lowers, .inc raises (or holds 240)


def test_register_split_table():
    """Four consumer warpgroups take 104 (not 112: 5120 + 512 x 112 > 640 x 96); two 232 (the pool exactly);
    one 240; two blocks of 384 threads per SM hold 80 at launch and give the consumers 96."""
    assert register_split(512) == (40, 104)
    assert register_split(256) == (40, 232) and 128 * 40 + 256 * 232 == 384 * 168
    assert register_split(128) == (40, 240)
    assert register_split(256, min_blocks=2) == (40, 96) and 128 * 40 + 256 * 96 <= 384 * 80


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("kernel,defines", [c for c in CASES if c[1].get("BM") == 256] + [CASES[1], CASES[0]])
def test_setmaxnreg_fits_in_ptxas_count(tmp_path, kernel, defines):
    """ptxas's own register count for the kernel (what a block holds at launch) covers what setmaxnreg asks,
    and the consumers do not spill at their count."""
    cuda = _cuda(kernel, defines)
    s = _split(cuda)
    cu = tmp_path / "k.cu"
    cu.write_text(cuda)
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    info = r.stderr.split(f"'{kernel}'")[-1]
    used = int(re.search(r"Used (\d+) registers", info).group(1))
    assert _asked(s) <= s["threads"] * used, (s, used)
    assert "0 bytes spill stores" in info, info
