"""The compiled-graph report: one self-contained HTML file per lowered graph (inline CSS and SVG, no
network), from options={"report": DIR} or `tilex report` over the cache's graph records.

`describe(prog)` turns a Program into plain data (JSON, kept in the cache's reports/);
`render(data)` turns that into HTML: the cache verdict; the eager fallbacks; each kernel's share of
the time (with profile=True on a GPU; the CPU interpreter's time is not a GPU kernel's, so there it
says "not measured"); the memory plan (the arena's peak next to eager's, a heatmap of the arena's
buffers over the steps, buffers that share bytes drawn in one band, and the live bytes per step);
then every step with its kind, kernel (library function, or the generated `.tile` source, its
configuration and cache hit/miss), the ATen ops it covers with the model's source line, calls,
copies and time per call.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

_CSS = """body{font-family:system-ui,'DejaVu Sans',sans-serif;margin:1.2em 1.6em;color:#1d2330;font-size:14px}
h1{font-size:22px;margin:0 0 .3em}h2{font-size:17px;margin:1.1em 0 .4em;border-bottom:1px solid #d5d9e0}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccd;padding:3px 6px;vertical-align:top}
th{background:#eef0f4;text-align:left}.library{background:#e6f0ff}.generated{background:#e7f6e7}
.eager{background:#fde2e2}.klibrary{background:#e6f0ff}.kgenerated{background:#e7f6e7}.folded,.view{color:#778}pre{background:#f6f7f9;padding:6px;font-size:12px;margin:2px 0;
max-height:22em;overflow:auto}code{font-size:12px}.heat{display:flex;align-items:flex-end;gap:1px;height:62px;
border-bottom:1px solid #999}.bar{width:6px;background:#4a7bd0}.pill{display:inline-block;padding:0 6px;
border-radius:8px;font-size:12px}.hit{background:#cdeccd}.miss{background:#f6d9a8}.kv td:first-child{color:#556}
.share{height:14px;background:#4a7bd0;display:inline-block;vertical-align:middle}.muted{color:#778}
svg text{font-family:inherit}"""
_PALETTE = ["#4a7bd0", "#e07b39", "#3aa35b", "#c9485b", "#8c6bc8", "#2aa3a3", "#b59a2a", "#d162a4"]


def _source_line(node) -> str:
    trace = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip().strip("^~ ")]
    return lines[-1] if lines else ""


def _on_cuda(prog) -> bool:
    import torch

    return any(isinstance(p.meta.get("val"), torch.Tensor) and p.meta["val"].device.type == "cuda"
               for p in prog.placeholders)


def describe(prog, title: str = "") -> dict:
    """Program `prog` as plain data (what `render` draws; JSON-able)."""
    from . import cache as C, memory

    configs: dict = {}
    for name, source, items in sorted(prog.launched):
        configs.setdefault(source, []).append({"defines": dict(items), "cache": {
            "reused": "hit", "built": "miss"}.get(C.ORIGIN.get((source, items)), "unknown")})
    steps, step_of = [], {}
    for i, s in enumerate(prog.steps):
        for n in s.nodes:
            step_of[n] = i
        row = {"kind": s.kind, "label": s.label, "calls": s.calls, "copies": s.copies, "seconds": s.seconds,
               "fallbacks": s.fallbacks,
               "nodes": [{"name": n.name, "target": str(n.target), "line": _source_line(n)} for n in s.nodes]}
        if s.kind == "library":
            row["kernel"] = f"tilex.stdlib.{s.match.kernel}"
            step_of[s.match.root] = i
            if s.match.sources:  # a fused GEMM (epilogue.py): its generated kernels, those launched with configs
                row["kernel"] = s.match.kernel
                row["generated"] = [{"name": name, "source": text, "configs": configs.get(text, [])}
                                    for name, text in s.match.sources]
        elif s.kind == "generated":
            row["kernel"] = s.kernel.name
            row["source"] = s.kernel.source
            row["configs"] = configs.get(s.kernel.source, [])
        steps.append(row)
    data = {"title": title, "cache": dict(prog.cache), "fallbacks": [list(f) for f in prog.fallbacks()],
            "device": "cuda" if _on_cuda(prog) else "cpu", "summary": prog.summary(), "steps": steps,
            "timed": bool(getattr(prog, "profile", False)) and sum(s.seconds for s in prog.steps) > 0}
    mem: dict = {}
    if prog.measure_memory:
        mem["peak_bytes"] = prog.peak_bytes
        mem["live_trace"] = list(prog.live_trace)
    arena = getattr(prog, "arena", None)
    plan = arena.last_plan if arena is not None else None
    if plan is not None:
        shared = plan.shared()
        mem["arena"] = {"bytes": plan.arena_bytes, "naive": plan.naive_bytes, "live_peak": plan.live_peak,
                        "steps": len(prog.steps),
                        "buffers": [{"name": b.value.name, "nbytes": b.nbytes, "start": b.start, "end": b.end,
                                     "offset": b.offset, "placed": b.value in arena.placed,
                                     "shares": [v.name for v in shared[b.value]]} for b in plan.buffers]}
        mem["eager"] = memory.eager_intermediate_bytes(prog.gm, arena.last_binding)
    data["memory"] = mem
    return data


def _fmt_bytes(n) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _heatmap(arena: dict) -> str:
    """SVG: x = step, y = arena offset; one rectangle per buffer over its lifetime."""
    e = html.escape
    bufs, total, steps = arena["buffers"], max(arena["bytes"], 1), max(arena["steps"], 1)
    width, height, left, top = 900, 260, 70, 10
    sx, sy = (width - left - 10) / steps, (height - top - 30) / total
    bands: dict = {}
    for b in sorted(bufs, key=lambda b: b["offset"]):
        bands.setdefault(b["offset"], len(bands))
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
           f"aria-label='memory heatmap'><rect x='{left}' y='{top}' width='{width - left - 10}' "
           f"height='{height - top - 30}' fill='#f4f5f8' stroke='#bbc'/>"]
    for b in bufs:
        x, y = left + b["start"] * sx, top + b["offset"] * sy
        w, h = max(2.0, (b["end"] - b["start"] + 1) * sx), max(2.0, b["nbytes"] * sy)
        color = _PALETTE[bands[b["offset"]] % len(_PALETTE)]
        tip = (f"{b['name']}: {_fmt_bytes(b['nbytes'])} at offset {b['offset']}, steps {b['start']}-{b['end']}"
               + (f"; shares bytes with {', '.join(b['shares'])}" if b["shares"] else ""))
        out.append(f"<rect class='buf' data-name='{e(b['name'])}' x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' "
                   f"height='{h:.1f}' fill='{color}' fill-opacity='{0.85 if b['placed'] else 0.35}' stroke='#fff' "
                   f"stroke-width='0.5'><title>{e(tip)}</title></rect>")
    out.append(f"<text x='{left}' y='{height - 12}' font-size='11'>step 0</text>"
               f"<text x='{width - 10}' y='{height - 12}' font-size='11' text-anchor='end'>step {steps - 1}</text>"
               f"<text x='{left - 6}' y='{top + 10}' font-size='11' text-anchor='end'>0</text>"
               f"<text x='{left - 6}' y='{height - 32}' font-size='11' text-anchor='end'>{e(_fmt_bytes(total))}</text>"
               "</svg>")
    return "".join(out)


def _configs_html(configs: list) -> str:
    """A kernel's launched configurations, each `NAME=VALUE, ...` with its cache verdict as a pill."""
    e = html.escape
    return "; ".join(", ".join(f"{k}={v}" for k, v in c["defines"].items())
                     + f" <span class='pill {e(c['cache'])}'>{e(c['cache'])}</span>" for c in configs)


def render(data: dict) -> str:
    """The report of a described Program (`describe`) as one self-contained HTML page."""
    e = html.escape
    steps = data["steps"]
    counts: dict = {}
    for s in steps:
        counts[s["kind"]] = counts.get(s["kind"], 0) + 1
    cuda = data.get("device") == "cuda"
    timed = data.get("timed") and cuda
    total = sum(s["seconds"] for s in steps) if timed else 0.0
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(data['title'])}</title>",
           f"<style>{_CSS}</style></head><body><h1>{e(data['title'])}</h1>",
           "<p>steps: " + ", ".join(f"{v} {e(k)}" for k, v in sorted(counts.items()))
           + f" &middot; device: {e(data.get('device', '?'))}</p>"]
    c = data.get("cache") or {}
    if c:
        st = c.get("stats") or {}
        out.append(f"<p>graph cache: <span class='pill {'hit' if c['hit'] else 'miss'}'>"
                   f"{'hit' if c['hit'] else 'miss'}</span> (fingerprint <code>{e(c['fingerprint'][:16])}</code>), "
                   f"{c['reused']} kernel configuration(s) reused"
                   + (f"; first call: {st['reused']} kernels reused, {st['built']} built" if st else "") + "</p>")
    kern = [(i, s) for i, s in enumerate(steps) if s["kind"] in ("library", "generated")]
    out.append("<h2>Kernels</h2><table><tr><th>step</th><th>kernel</th><th>ops</th><th>configuration, cache</th>"
               "<th>model source line</th></tr>")
    for i, s in kern:
        cfg = _configs_html(s.get("configs", []))
        line = next((n["line"] for n in s["nodes"] if n["line"]), "")
        out.append(f"<tr class='k{e(s['kind'])}'><td>{i}</td><td><b>{e(s['kernel'])}</b></td><td>{len(s['nodes'])}</td>"
                   f"<td>{cfg or ('library' if s['kind'] == 'library' else '')}</td><td><small>{e(line)}</small></td></tr>")
    out.append("</table>")
    fb = data["fallbacks"]
    out.append("<h2>Eager fallbacks</h2>" + ("<p>none</p>" if not fb else
               "<ul>" + "".join(f"<li><code>{e(n)}</code> {e(t)}</li>" for n, t in fb) + "</ul>"))
    # ---- time
    out.append("<h2>Time</h2>")
    if not timed:
        why = "the CPU runs the NumPy interpreter, not GPU kernels" if not cuda else "run with options={'profile': True}"
        out.append(f"<p class='muted'>time per kernel: not measured ({why})</p>")
    else:
        shares: dict = {}
        for s in steps:
            shares[s["kind"]] = shares.get(s["kind"], 0.0) + s["seconds"] / total
        out.append("<p>" + ", ".join(f"{e(k)} {v:.1%}" for k, v in sorted(shares.items()))
                   + " of the profiled time (profile=True; synchronized per step on CUDA)</p><table>"
                   "<tr><th>kernel</th><th>ms per call</th><th>share</th></tr>")
        top = sorted((s for s in steps if s["kind"] in ("library", "generated", "eager")),
                     key=lambda s: -s["seconds"])
        for s in top:
            sh = s["seconds"] / total
            out.append(f"<tr><td>{e(s['label'])}</td><td>{1e3 * s['seconds'] / max(s['calls'], 1):.3f}</td>"
                       f"<td><span class='share' style='width:{max(1, round(200 * sh))}px'></span> {sh:.1%}</td></tr>")
        out.append("</table>")
    # ---- memory
    mem = data.get("memory") or {}
    if mem:
        out.append("<h2>Memory</h2>")
        a = mem.get("arena")
        if a:
            ev = mem.get("eager") or {}
            out.append(f"<table class='kv'><tr><td>arena (one allocation per call)</td><td>{_fmt_bytes(a['bytes'])} "
                       f"({a['bytes']} bytes), {len(a['buffers'])} buffers</td></tr>"
                       f"<tr><td>the same buffers without reuse</td><td>{_fmt_bytes(a['naive'])}</td></tr>"
                       f"<tr><td>most bytes live at one step</td><td>{_fmt_bytes(a['live_peak'])}</td></tr>"
                       + (f"<tr><td>eager: intermediates' peak (freed at last use) / sum</td><td>"
                          f"{_fmt_bytes(ev['peak'])} / {_fmt_bytes(ev['sum'])}</td></tr>" if ev else "")
                       + "</table><p>buffers over time (x: step, y: arena offset; one colour per band of "
                       "bytes, so rectangles of one colour share memory at different times; faded: planned "
                       "but allocated by the kernel itself)</p>" + _heatmap(a))
            sharing = [b for b in a["buffers"] if b["shares"]]
            if sharing:
                out.append("<details><summary>buffers that share memory</summary><ul>" + "".join(
                    f"<li><code>{e(b['name'])}</code> ({_fmt_bytes(b['nbytes'])}, steps {b['start']}-{b['end']}): "
                    + ", ".join(f"<code>{e(n)}</code>" for n in b["shares"]) + "</li>" for b in sharing)
                    + "</ul></details>")
        if "peak_bytes" in mem:
            out.append(f"<p>peak live bytes of the plan (values freed at last use, inputs excluded): "
                       f"{mem['peak_bytes']}</p>")
            trace = mem.get("live_trace") or []
            if trace:
                hi = max(trace) or 1
                bars = "".join(f"<div class='bar' title='step {i}: {b} bytes' style='height:{max(1, round(60 * b / hi))}px'>"
                               "</div>" for i, b in enumerate(trace))
                out.append(f"<p>live bytes per step (first call):</p><div class='heat'>{bars}</div>")
    # ---- steps
    out.append("<h2>Steps</h2><table><tr><th>#</th><th>kind</th><th>kernel</th><th>ATen ops (model source line)"
               "</th><th>calls</th><th>copies</th><th>ms per call</th><th>share</th></tr>")
    for i, s in enumerate(steps):
        nodes = "<br>".join(f"<code>{e(n['name'])} = {e(n['target'])}</code> <small>{e(n['line'])}</small>"
                            for n in s["nodes"])
        kernel = e(s["label"])
        if s["kind"] == "generated":
            cfg = _configs_html(s.get("configs", []))
            kernel = (f"<b>{e(s['kernel'])}</b> <small>generated, {len(s['nodes'])} ops"
                      + (f"; {cfg}" if cfg else "") + f"</small><pre>{e(s['source'])}</pre>")
        elif s["kind"] == "library":
            kernel = f"<b>{e(s['kernel'])}</b>"
            for gk in s.get("generated", []):  # a fused GEMM's kernels: launched ones with their configurations
                cfg = _configs_html(gk["configs"])
                kernel += (f"<details{' open' if gk['configs'] else ''}><summary><code>{e(gk['name'])}</code> "
                           f"<small>{cfg or 'not launched'}</small></summary><pre>{e(gk['source'])}</pre></details>")
            if s["fallbacks"]:
                kernel += f" <small>({s['fallbacks']} call(s) declined to eager)</small>"
        ms = f"{1e3 * s['seconds'] / s['calls']:.3f}" if timed and s["calls"] else "not measured"
        share = f"{s['seconds'] / total:.1%}" if timed else ""
        out.append(f"<tr class='{e(s['kind'])}'><td>{i}</td><td>{e(s['kind'])}</td><td>{kernel}</td><td>{nodes}</td>"
                   f"<td>{s['calls']}</td><td>{s['copies']}</td><td>{ms}</td><td>{share}</td></tr>")
    out.append("</table></body></html>\n")
    return "\n".join(out)


def write(prog, directory, name: str) -> Path:
    """Write the report of `prog` to DIRECTORY/NAME.html (the directory is created), and keep its data
    in the graph's cache record for `tilex report`; the HTML file's path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    data = describe(prog, f"tilex backend: {name}")
    path = d / f"{name}.html"
    path.write_text(render(data), encoding="utf-8")
    save(prog, data)
    return path


def save(prog, data: dict | None = None) -> None:
    """Keep `describe(prog)` beside the graph's cache record (reports/<fingerprint>.json)."""
    from . import cache as C

    fp = (prog.cache or {}).get("fingerprint")
    if fp:
        data = data if data is not None else describe(prog, f"tilex backend: graph {fp[:12]}")
        C._write_json(C.root() / "reports" / f"{fp}.json", {"format": C.FORMAT, "report": data})


def from_cache(cache_dir, out_dir) -> list:
    """`tilex report`: one HTML file per graph report kept under CACHE_DIR/reports; their paths."""
    src, dst = Path(cache_dir) / "reports", Path(out_dir)
    paths = []
    for f in sorted(src.glob("*.json")):
        try:
            rec = json.loads(f.read_text(encoding="utf-8"))
            data = rec["report"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        fp = f.stem
        data = dict(data, title=f"tilex backend: graph {fp[:12]}")
        dst.mkdir(parents=True, exist_ok=True)
        path = dst / f"graph_{fp[:12]}.html"
        path.write_text(render(data), encoding="utf-8")
        paths.append(path)
    return paths
