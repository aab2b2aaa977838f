"""The compiled-model report (report.py) and `tilex report`, on CPU: the tiny Qwen2 compiled with
options={"report": DIR}; the HTML is opened in real headless Chromium (a screenshot kept at
out/report_screenshot.png, checked to be a PNG of the window's size that is not blank; the DOM it
built holds every kernel's name), and `tilex report` re-renders it from the cache's records."""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import tilex.backend  # noqa: E402,F401

OUT = Path(__file__).resolve().parent.parent / "out"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
SIZE = (1280, 1600)


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def compiled_report(tmp_path_factory):
    from test_backend_hf import tiny

    root = tmp_path_factory.mktemp("report")
    cache_dir, rep = root / "cache", root / "html"
    old = os.environ.get("TILEX_CACHE_DIR")
    os.environ["TILEX_CACHE_DIR"] = str(cache_dir)
    try:
        torch._dynamo.reset()
        model = tiny("qwen2", layers=1)
        progs = []
        cm = torch.compile(model, backend="tilex", options={"programs": progs, "report": str(rep), "memory": True})
        ids = torch.randint(0, 96, (1, 8), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            cm(ids, use_cache=False)
    finally:
        if old is None:
            os.environ.pop("TILEX_CACHE_DIR", None)
        else:
            os.environ["TILEX_CACHE_DIR"] = old
        torch._dynamo.reset()
    (path,) = rep.glob("graph_*.html")
    return progs[0], path, cache_dir, root


def test_report_content(compiled_report):
    prog, path, _, _ = compiled_report
    text = path.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text  # no network
    assert "<script src" not in text and "<link" not in text
    gen = [s for s in prog.steps if s.kind == "generated"]
    lib = {s.match.kernel for s in prog.steps if s.kind == "library"}
    assert gen and {"linear", "rms_norm", "attention_prefill", "gated_mlp", "embedding"} <= lib
    import html as H

    for s in gen:
        assert H.escape(s.kernel.source) in text                        # the generated .tile
    for k in lib:
        assert f"tilex.stdlib.{k}" in text
    assert "RB=" in text and "CB=" in text and "miss</span>" in text    # configuration, cache verdict
    assert "time per kernel: not measured" in text                       # CPU: the interpreter ran
    assert any(n.meta.get("stack_trace") and "modeling_qwen2" in n.meta["stack_trace"] for n in prog.gm.graph.nodes)
    assert "self.q_proj(hidden_states)" in text                          # a model source line
    plan = prog.arena.last_plan
    assert text.count("<rect class='buf'") == len(plan.buffers) > 5     # the heatmap: one rectangle per buffer
    assert any(b for b in plan.shared().values())                        # some buffers share bytes...
    assert "buffers that share memory" in text                           # ...and the report lists them


def _png_pixels(data: bytes):
    """(width, height, RGB(A) array) of a non-interlaced 8-bit PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    assert depth == 8 and ctype in (2, 6) and interlace == 0
    bpp = 3 if ctype == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, 1 + w * bpp)
    img = np.zeros((h, w * bpp), dtype=np.int32)
    prev = np.zeros(w * bpp, dtype=np.int32)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        cur = np.zeros_like(line)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) & 255
        else:
            for x in range(w * bpp):
                a = cur[x - bpp] if x >= bpp else 0
                b, c = prev[x], prev[x - bpp] if x >= bpp else 0
                if f == 1:
                    p = a
                elif f == 3:
                    p = (a + b) // 2
                else:
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    p = a if pa <= pb and pa <= pc else b if pb <= pc else c
                cur[x] = (line[x] + p) & 255
        img[y], prev = cur, cur
    return w, h, img.reshape(h, w, bpp)


def _chromium(*args, tmp):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
           f"--user-data-dir={tmp}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (.ci/run installs Debian's chromium; "
                                            "elsewhere: apt-get install chromium)")
def test_report_in_headless_chromium(compiled_report, tmp_path):
    prog, path, _, _ = compiled_report
    OUT.mkdir(exist_ok=True)
    shot = OUT / "report_screenshot.png"
    if shot.exists():
        shot.unlink()
    r = _chromium(f"--screenshot={shot}", f"--window-size={SIZE[0]},{SIZE[1]}", path.as_uri(), tmp=tmp_path / "u1")
    assert shot.is_file(), r.stderr[-2000:]
    w, h, img = _png_pixels(shot.read_bytes())
    assert (w, h) == SIZE
    rgb = img[..., :3]
    not_white = (rgb.min(axis=-1) < 235).mean()
    colours = len(np.unique(rgb.reshape(-1, 3) // 16, axis=0))
    assert not_white > 0.03 and colours > 8, (not_white, colours)          # text, tables and the heatmap drawn
    r = _chromium("--dump-dom", path.as_uri(), tmp=tmp_path / "u2")
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    assert "<svg" in dom and "memory heatmap" in dom
    for s in prog.steps:
        if s.kind == "generated":
            assert s.kernel.name in dom
        elif s.kind == "library":
            assert f"tilex.stdlib.{s.match.kernel}" in dom


def test_tilex_report_command_over_the_cache(compiled_report, tmp_path):
    from typer.testing import CliRunner

    from tilex.cli import app

    prog, path, cache_dir, _ = compiled_report
    fp = prog.cache["fingerprint"]
    assert (cache_dir / "graphs" / f"{fp}.json").is_file() and (cache_dir / "reports" / f"{fp}.json").is_file()
    r = CliRunner().invoke(app, ["report", "--cache", str(cache_dir), "-o", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    (out,) = (tmp_path / "rep").glob("graph_*.html")
    assert str(out) in r.output and fp[:12] in out.name
    text = out.read_text()
    for s in prog.steps:
        if s.kind == "generated":
            assert s.kernel.name in text
    assert "<rect class='buf'" in text
    r = CliRunner().invoke(app, ["report", "--cache", str(tmp_path / "empty")])
    assert r.exit_code == 2 and "no reports/ folder" in r.output
