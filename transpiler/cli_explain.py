"""`tilex explain`: what each kernel becomes (symbols, params, grid, threads, shared memory, its tensor-core and
streamed loops, every tile's place and layout), and with --shape the configuration tilex chooses for those sizes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from .cli_common import (ARCH_OPT, DEFINE_OPT, FILE_ARG, KERNEL_OPT, check_arch, console, defines_of, errors, fmt,
                         json_safe, options_of, read_tile, shapes_of, write_out)


def explain(
    file: Path = FILE_ARG,
    kernel: Optional[str] = KERNEL_OPT,
    define: Optional[List[str]] = DEFINE_OPT,
    arch: str = ARCH_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print the same data as one JSON list (one object per kernel)."),
    shape: Optional[List[str]] = typer.Option(
        None, "--shape", "-s", metavar="SYM=VAL[,SYM=VAL...]",
        help="Sizes of the shape symbols: explain the configuration tilex chooses for them (parameters left to "
             "tilex, launch facts the sizes allow with aligned pointers), with every candidate's model score."),
    top: int = typer.Option(8, "--top", metavar="N", help="With --shape: how many scored candidates to print."),
) -> None:
    """Show what each kernel becomes: symbols, params, constraints, launch grid, threads,
    shared memory, each tensor-core loop's strategy (wgmma or mma.sync, tiles, stages, warps,
    why not wgmma), each pipeline loop that streams tiles through shared memory (which, how
    many stages) and how its products run (wgmma or mma.sync, why not wgmma), each pipeline loop
    with products that is none of these and why it is not a tensor-core main loop, and every tile
    with its dtype, shape, memory space, layout and registers per thread."""
    defines = defines_of(define)
    check_arch(arch)
    with errors(json_mode=as_json):
        from .explain import explain as do_explain
        from .pipeline import compile_program

        name, source = read_tile(file)
        if shape:
            data = _explain_shapes(source, name, defines, kernel, arch, shape)
        else:
            program = compile_program(source, name, options_of(defines, kernel, arch))
            data = do_explain(program)
            for d, k in zip(data, program.kernels, strict=True):  # parameters left to tilex: chosen at nominal sizes
                left = [c.name for c in k.cparams if c.auto and c.name not in defines]
                if left:
                    d["nominal"] = left
        if as_json:
            write_out(json.dumps(json_safe(data), indent=2) + "\n")
        else:
            _print_explain(data, top)


def _explain_shapes(source: str, name: str, defines: dict, kernel: Optional[str], arch: str,
                    shape: List[str]) -> list:
    """explain() of each kernel as a launch at these sizes compiles it: the chosen configuration (with the
    candidates and their scores under "autoconfig") and the launch facts the sizes allow (under "facts")."""
    from .explain import explain as do_explain
    from .pipeline import Options, compile_program
    from .specialize import launch_choice

    shapes = shapes_of(shape)
    parsed = compile_program(source, name, options_of(defines, kernel, arch), stop_after="parse")
    out = []
    for kd in parsed.kernels:
        syms = list(dict.fromkeys(d.id for p in kd.params for d in (p.type.dims or ()) if hasattr(d, "id")
                                  and d.id not in {c.name for c in kd.cparams}))
        missing = [s for s in syms if s not in shapes]
        if missing:
            raise typer.BadParameter(f"kernel '{kd.name}' needs a size for {', '.join(missing)}",
                                     param_hint="'--shape'")
        sizes = {s: int(shapes[s]) for s in syms}
        fixed = {n: v for n, v in defines.items() if n in {c.name for c in kd.cparams}}
        auto = any(c.auto and c.name not in fixed for c in kd.cparams)
        choice, facts, k = launch_choice(source, name, kd.name, sizes, arch, fixed, auto,
                                         lambda wanted: _facts_of(wanted, sizes))
        if isinstance(k, Exception):
            raise k
        chosen = {**fixed, **(choice.defines if choice else {})}
        program = compile_program(source, name, Options(defines=chosen, arch=arch, kernel=kd.name, assume=facts))
        (data,) = do_explain(program)
        data["shapes"] = sizes
        data["facts"] = [f"{s} % {d} == 0" for s, d in facts]
        data["autoconfig"] = choice.as_dict() if choice else None
        out.append(data)
    return out


def _facts_of(wanted: dict, sizes: dict) -> tuple:
    """The wanted facts `(SYM, D)` the sizes satisfy, pointers 16-byte aligned assumed (a launch of fresh tensors)."""
    return tuple((s, int(d)) for s, d in sorted(wanted.items()) if s in sizes and sizes[s] % d == 0)


def _print_autoconfig(con, k: dict, top: int) -> None:
    """The --shape part of `tilex explain`: sizes, launch facts, the chosen configuration and why."""
    con.print(f"  sizes:       {', '.join(f'{s}={v}' for s, v in k['shapes'].items())}"
              f"   launch facts: {', '.join(k['facts']) or 'none'} (pointers 16-byte aligned assumed)", markup=False)
    ac = k.get("autoconfig")
    if not ac:
        return
    chosen = " ".join(f"{n}={v}" for n, v in ac["chosen"].items())
    con.print(f"  chosen:      {chosen}  (by the {ac['by']}; model bucket "
              f"{','.join(f'{s}={v}' for s, v in ac['bucket'].items())}; space "
              + ", ".join(f"{n} in {tuple(v)}" for n, v in ac["space"].items()) + ")", markup=False)
    ok = [c for c in ac["candidates"] if "time_us" in c]
    bad = [c for c in ac["candidates"] if "time_us" not in c]
    for c in ok[:top]:
        cfg = " ".join(f"{n}={v}" for n, v in c["defines"].items())
        con.print(f"  {'*' if c['status'] == 'chosen' else ' '} {c['time_us']:10.1f} us  {cfg:<32} {c['strategy']:<7} "
                  f"stages {c['stages']}, {c['programs']} programs, {c['per_sm']}/SM, {c['waves']:.2f} waves, "
                  f"{c['threads']} threads, {c['smem_bytes']} B smem, ~{c['regs_per_thread']} regs, "
                  f"eff {c['eff']:.2f}, {c['limit']}-bound", markup=False)
    if len(ok) > top:
        con.print(f"    ... {len(ok) - top} more scored candidates (--top N, or --json)")
    reasons: dict = {}
    for c in bad:
        reasons.setdefault(c.get("reason", "?"), []).append(" ".join(f"{n}={v}" for n, v in c["defines"].items()))
    for why, cfgs in reasons.items():
        con.print(f"  rejected ({len(cfgs)}): {why}  [{cfgs[0]}{', ...' if len(cfgs) > 1 else ''}]", markup=False)


def _print_explain(data: list[dict], top: int = 8) -> None:
    from rich.table import Table

    con = console()
    for i, k in enumerate(data):
        if i:
            con.print()
        defs = ", ".join(f"{n}={v}" for n, v in k["defines"].items())
        con.print(f"kernel {k['kernel']}" + (f"<{defs}>" if defs else "") + f"  ({k['file']}:{k['line']})",
                  style="bold")
        if "shapes" in k:
            _print_autoconfig(con, k, top)
        elif k.get("nominal"):
            con.print(f"  note:        {', '.join(k['nominal'])} left to tilex: chosen here for every size 4096 and no "
                      "launch facts; --shape M=..,N=.. shows the choice for your sizes", markup=False)
        con.print(f"  symbols:     {', '.join(k['symbols']) or '-'}")
        for p in k["params"]:
            t = p["dtype"] if p["dims"] is None else f"{p['dtype']}[{', '.join(str(d) for d in p['dims'])}]"
            t = ("out " if p["out"] else "") + t + (f" = {p['default']}" if p["default"] is not None else "")
            con.print(f"  param        {p['name']}: {t}")
        for c in k["constraints"]:
            con.print(f"  where        {c}")
        con.print(f"  grid:        ({', '.join(k['grid'])}{',' if len(k['grid']) == 1 else ''})")
        con.print(f"  threads:     {fmt(k['threads'])} per block")
        for loop in k.get("matmul_loops", []):
            con.print(f"  matmul loop: {_site(loop)}: {loop['strategy']} {'x'.join(map(str, loop['tile']))}, "
                      f"{loop['stages']} stages, {loop['warps']} warps"
                      + (f" + {loop['producer_warps']} producer warps" if loop['producer_warps'] else "")
                      + (f" ({loop['note']})" if loop['note'] else ""), markup=False)
            if loop.get("batch"):  # batched operands: the ring reads one batch's matrix (TMA: N-D maps, box 1 there)
                by = "N-D TMA maps, box 1 on the batch axes" if loop["strategy"] == "wgmma" else "cp.async from the batch's matrix"
                ops = ", ".join(f"{t}[{', '.join(ix)}, ...]" for t, ix in loop["batch"].items())
                con.print(f"  batched:     line {loop['line']}: {ops} ({by})", markup=False)
        for loop in k.get("streamed_loops", []):
            regs, swz = set(loop["into_registers"]), set(loop.get("swizzled", ()))
            names = ", ".join(n + (" (into registers)" if n in regs else " (128-byte swizzled)" if n in swz else "")
                              for n in loop["tiles"])
            if loop["tiles"]:
                fewer = f" of {loop['asked']} asked: the ring did not fit" if loop["stages"] != loop["asked"] else ""
                by = ("TMA" if loop.get("tma") else "cp.async"
                      + (f" (not TMA: {loop['tma_note']})" if loop.get("tma_note") else ""))
                con.print(f"  streamed:    line {loop['line']}: {names} by {by}, {loop['stages']} stages{fewer}, "
                          f"{loop['stages'] - 1} iteration{'s' if loop['stages'] > 2 else ''} ahead", markup=False)
            if loop.get("products"):
                how = {"wgmma": "wgmma (sm_90a), one warpgroup per 64 rows",
                       "mma": "mma.sync m16n8k16"}[loop["products"]]
                note = loop.get("products_note") or ""
                note = f" ({note})" if note.startswith("not a tensor-core main loop") else f" (not wgmma: {note})" if note else ""
                con.print(f"  products:    line {loop['line']}: {how}{note}", markup=False)
        for loop in k.get("unplanned_loops", []):
            con.print(f"  pipeline:    {_site(loop)}: not a tensor-core main loop: {loop['why']}", markup=False)
        smem = k["smem_bytes"]
        con.print(f"  shared mem:  {fmt(smem)}" + (" bytes" if smem is not None else "")
                  + ("" if k["threads"] is not None else "   (not annotated: memory pass did not run)"))
        for key, v in k["info"].items():
            con.print(f"  {key}: {v}")
        if not k["tiles"]:
            continue
        table = Table(show_header=True, header_style="bold", title=None)
        for col, just in (("line", "right"), ("expression", "left"), ("dtype", "left"), ("shape", "left"),
                          ("space", "left"), ("layout", "left"), ("regs", "right")):
            table.add_column(col, justify=just, overflow="fold")
        for t in k["tiles"]:
            expr = t["expr"] if t["name"] is None else f"{t['name']} = {t['expr']}"
            table.add_row(str(t["line"]), expr, t["dtype"] or "-",
                          "[" + ", ".join(str(d) for d in t["shape"]) + "]",
                          t["space"] or "-", t["layout"] or "-", fmt(t["regs_per_thread"]))
        con.print(table)


def _site(loop: dict) -> str:
    """Where an explained loop is: `line N`, or for one inlined from a fn `FILE:N (in fn F, inlined at ...)`."""
    via = "".join(f" ({w})" for w in loop.get("inlined_at", ())[:1])  # the fn it is in, the call
    return (f"{loop['file']}:{loop['line']}" if "file" in loop else f"line {loop['line']}") + via
