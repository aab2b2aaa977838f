"""The compiled-graph report: one self-contained HTML file per lowered graph (options={"report": DIR}).

It lists every step in execution order with its kind (library / generated / view / folded / eager),
the ATen nodes it covers with the model source line each came from, the library kernel or the
generated `.tile` source, how often it ran and what it copied; then the eager fallbacks and the
memory plan's peak (with options={"memory": True}), the graph cache's verdict, and with
options={"profile": True} each step's time per call and share; with memory, the live bytes after
each step as bars (the plan's memory over time). Not yet: which buffers share memory.
"""
from __future__ import annotations

import html
from pathlib import Path

_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
th{background:#eee}.library{background:#e6f2ff}.generated{background:#e9f7e9}.eager{background:#fde2e2}
.folded,.view{color:#777}pre{background:#f7f7f7;padding:6px;font-size:12px;margin:2px 0}
code{font-size:12px}.heat{display:flex;align-items:flex-end;gap:1px;height:62px;border-bottom:1px solid #999}
.bar{width:6px;background:#4a7bd0}"""


def _source_line(node) -> str:
    trace = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip().strip("^~ ")]
    return lines[-1] if lines else ""


def render(prog, title: str) -> str:
    """The report of Program `prog` as HTML text."""
    e = html.escape
    counts: dict = {}
    for s in prog.steps:
        counts[s.kind] = counts.get(s.kind, 0) + 1
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>",
           f"<style>{_CSS}</style></head><body><h1>{e(title)}</h1>",
           "<p>steps: " + ", ".join(f"{v} {e(k)}" for k, v in sorted(counts.items())) + "</p>"]
    if prog.cache:
        c = prog.cache
        out.append(f"<p>graph cache: {'hit' if c['hit'] else 'miss'} (fingerprint <code>{e(c['fingerprint'][:16])}"
                   f"</code>), {c['reused']} kernel configuration(s) reused</p>")
    fb = prog.fallbacks()
    out.append("<h2>Eager fallbacks</h2>" + ("<p>none</p>" if not fb else
               "<ul>" + "".join(f"<li><code>{e(n)}</code> {e(t)}</li>" for n, t in fb) + "</ul>"))
    if prog.measure_memory:
        out.append(f"<h2>Memory</h2><p>peak live bytes of the plan (values freed at last use, inputs "
                   f"excluded): {prog.peak_bytes}</p>")
        if prog.live_trace:
            top = max(prog.live_trace) or 1
            bars = "".join(f"<div class='bar' title='step {i}: {b} bytes' style='height:{max(1, round(60 * b / top))}px'>"
                           "</div>" for i, b in enumerate(prog.live_trace))
            out.append(f"<p>live bytes per step (first call):</p><div class='heat'>{bars}</div>")
    total = sum(s.seconds for s in prog.steps)
    if total > 0:
        out.append("<h2>Time</h2><p>" + ", ".join(f"{e(k)} {v:.1%}" for k, v in sorted(prog.time_shares().items()))
                   + " of the profiled time (profile=True; synchronized per step on CUDA)</p>")
    out.append("<h2>Steps</h2><table><tr><th>#</th><th>kind</th><th>kernel</th><th>ATen nodes (source line)"
               "</th><th>calls</th><th>copies</th><th>ms per call</th><th>share</th></tr>")
    for i, s in enumerate(prog.steps):
        nodes = "<br>".join(f"<code>{e(n.name)} = {e(str(n.target))}</code> <small>{e(_source_line(n))}</small>"
                            for n in s.nodes)
        kernel = e(s.label)
        if s.kind == "generated":
            kernel += f"<pre>{e(s.kernel.source)}</pre>"
        elif s.kind == "library":
            kernel = f"tilex.stdlib.{e(s.match.kernel)}"
            if s.fallbacks:
                kernel += f" <small>({s.fallbacks} call(s) declined to eager)</small>"
        out.append(f"<tr class='{e(s.kind)}'><td>{i}</td><td>{e(s.kind)}</td><td>{kernel}</td><td>{nodes}</td>"
                   f"<td>{s.calls}</td><td>{s.copies}</td>"
                   f"<td>{(1e3 * s.seconds / s.calls) if s.calls and total else 0:.3f}</td>"
                   f"<td>{(s.seconds / total) if total else 0:.1%}</td></tr>")
    out.append("</table></body></html>\n")
    return "\n".join(out)


def write(prog, directory, name: str) -> Path:
    """Write the report of `prog` to DIRECTORY/NAME.html (the directory is created); its path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}.html"
    path.write_text(render(prog, f"tilex backend: {name}"), encoding="utf-8")
    return path
