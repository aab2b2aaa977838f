"""Pass 4, check_constraints: turn `where` clauses into compile-time facts.

Needs: infer_shapes. Guarantees: each constraint is a bool scalar over shape symbols;
a constraint with no symbol left (only compile-time parameters) is decided now, and a
false one is an error; `kernel.facts` records what later passes may assume about the
symbols: known divisors (`N % 8 == 0`) and lower bounds (`K >= 64`). Every constraint is
also checked again at launch. Later passes ask `facts.proves(sym, d)`; what they asked and could not be
proven is kept in `facts.wanted`: the facts launch-time specialization (tilex.specialize) tries.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .. import ast as A
from ..diagnostics import CompileError
from ..exprs import fold, unparse


@dataclass
class Facts:
    divisors: dict[str, int] = field(default_factory=dict)  # symbol -> known divisor
    lower: dict[str, int] = field(default_factory=dict)  # symbol -> known minimum
    wanted: dict[str, int] = field(default_factory=dict)  # symbol -> a divisor a pass asked for and did not get

    def divisor(self, sym: str) -> int:
        return self.divisors.get(sym, 1)

    def proves(self, sym: str, d: int) -> bool:
        """True when `sym % d == 0` is known; else the wish is recorded in `wanted` (the lcm of those asked)."""
        if self.divisor(sym) % d == 0:
            return True
        from math import lcm

        self.wanted[sym] = lcm(self.wanted.get(sym, 1), d)
        return False

    def minimum(self, sym: str) -> int:
        return self.lower.get(sym, 0)


def check_constraints(program: A.Program) -> A.Program:
    return replace(program, kernels=tuple(_kernel(k) for k in program.kernels))


def _kernel(k: A.Kernel) -> A.Kernel:
    for e in k.where + k.grid:
        _no_division_by_zero(e, k)
    facts = Facts()
    for c in k.where:
        v = fold(c)
        if v is not None:
            if not v:
                raise CompileError(f"constraint '{unparse(c)}' is false for these compile-time parameters", c.span,
                                   ("values: " + ", ".join(f"{n} = {x}" for n, x in k.defines),) if k.defines else ())
            continue
        for part in _conjuncts(c):
            _learn(part, facts)
    return replace(k, facts=facts)


_DIVISIONS = (A.BinOpKind.FLOORDIV, A.BinOpKind.MOD, A.BinOpKind.DIV)


def _no_division_by_zero(e: A.Expr, k: A.Kernel) -> None:
    """A header divisor that is the constant 0 (`cdiv(N, 0)`, `N // 0`, `N % 0`) is an error here: the launch
    (and the --host launcher) would divide by zero."""
    todo = [e]
    while todo:
        n = todo.pop()
        divisor = None
        if isinstance(n, A.BinOp):
            todo += [n.lhs, n.rhs]
            divisor = n.rhs if n.op in _DIVISIONS else None
        elif isinstance(n, A.UnaryOp):
            todo.append(n.operand)
        elif isinstance(n, A.Call):
            todo += list(n.args)
            divisor = n.args[1] if n.func == "cdiv" and len(n.args) == 2 else None
        if divisor is not None and fold(divisor) == 0:
            raise CompileError(f"division by zero in '{unparse(n)}'", n.span,
                               ("compile-time parameters: " + ", ".join(f"{a} = {v}" for a, v in k.defines),)
                               if k.defines else ())


def _conjuncts(e: A.Expr):
    if isinstance(e, A.BinOp) and e.op is A.BinOpKind.AND:
        yield from _conjuncts(e.lhs)
        yield from _conjuncts(e.rhs)
    else:
        yield e


def _learn(e: A.Expr, facts: Facts) -> None:
    if not isinstance(e, A.BinOp) or not e.op.is_compare:
        return
    lhs, rhs, op = e.lhs, e.rhs, e.op
    # SYM % c == 0
    if op is A.BinOpKind.EQ and isinstance(rhs, A.IntLit) and rhs.value == 0 and isinstance(lhs, A.BinOp) \
            and lhs.op is A.BinOpKind.MOD and isinstance(lhs.lhs, A.Name) and isinstance(lhs.rhs, A.IntLit) and lhs.rhs.value > 0:
        sym, d = lhs.lhs.id, lhs.rhs.value
        old = facts.divisors.get(sym, 1)
        from math import gcd

        facts.divisors[sym] = old * d // gcd(old, d)
        return
    if isinstance(lhs, A.Name) and isinstance(rhs, A.IntLit):
        sym, c = lhs.id, rhs.value
        if op is A.BinOpKind.GE:
            facts.lower[sym] = max(facts.lower.get(sym, 0), c)
        elif op is A.BinOpKind.GT:
            facts.lower[sym] = max(facts.lower.get(sym, 0), c + 1)
        elif op is A.BinOpKind.EQ:
            facts.lower[sym] = c
            facts.divisors[sym] = c if c > 0 else 1
