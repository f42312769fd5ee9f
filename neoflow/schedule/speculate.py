"""schedule/speculate: selects that may evaluate both sides become `Blend`s.

C prints a select as `c ? a : b`, which is a branch: gcc vectorises a loop
around it only through loop if-conversion, which NeoFlow turns off (gcc 12
miscompiles if-converted conditional loads; see build/compiler.py). A
`Blend` evaluates both sides and picks bits, with no branch, so the loop
vectorises -- relu, ELU, masks. A float select becomes one when evaluating
either side where the condition does not hold is harmless: every read
under it is unchecked and proved in bounds over the ranges of the loops
around it (not just where the condition holds), and it divides no integer
by a non-constant. `where(j >= 128, h[j - 128], 0)` stays a select unless
loop partitioning (schedule/loop_partition.py) has decided its condition.

Hands on: a loop-IR statement with the same meaning (`speculate`).
"""
from ..te import dtype as dt
from ..te.arith import interval
from ..te.expr import Binary, Const, Select
from .loop_ir import Allocate, Blend, CDiv, For, IfThenElse, Let, Load, Seq, Store, map_expr, nodes


def speculate(stmt, ranges=None):
    """`stmt` with its safe float selects turned into Blends; `ranges`
    ({Var: (lo, hi)} inclusive) bounds the variables bound outside it.

    >>> speculate(For(j, Const(0), Const(8), "vectorized",
    ...                Store(o, j, Select(Load(a, j) > 0.0, Load(a, j), 0.0))))  # doctest: +SKIP
    """
    ranges = dict(ranges or {})
    if isinstance(stmt, Seq):
        return Seq([speculate(s, ranges) for s in stmt.stmts])
    if isinstance(stmt, For):
        lo, hi = interval(stmt.begin, ranges), interval(stmt.end, ranges)
        inner = dict(ranges)
        if lo is not None and hi is not None:
            inner[stmt.var] = (lo[0], hi[1] - 1)
        return For(stmt.var, stmt.begin, stmt.end, stmt.kind, speculate(stmt.body, inner),
                   stmt.unroll, stmt.reduction)
    if isinstance(stmt, Let):
        inner = dict(ranges)
        bounds = interval(stmt.value, ranges)
        if bounds is not None:
            inner[stmt.var] = bounds
        return Let(stmt.var, _expr(stmt.value, ranges), speculate(stmt.body, inner))
    if isinstance(stmt, Allocate):
        return Allocate(stmt.buffer, speculate(stmt.body, ranges))
    if isinstance(stmt, Store):
        return Store(stmt.buffer, stmt.index, _expr(stmt.value, ranges))
    if isinstance(stmt, IfThenElse):
        return IfThenElse(stmt.cond, speculate(stmt.then, ranges),
                          None if stmt.else_ is None else speculate(stmt.else_, ranges))
    return stmt


def _expr(e, ranges):
    def blend(n):
        if (isinstance(n, Select) and dt.is_float(n.dtype)
                and _safe(n.t, ranges) and _safe(n.f, ranges)):
            return Blend(n.cond, n.t, n.f)
        return n
    return map_expr(e, blend)


def _safe(e, ranges):
    """Whether evaluating `e` anywhere in `ranges` reads only in bounds and cannot trap."""
    for n in nodes(e):
        if isinstance(n, Load):
            bounds = interval(_floor_form(n.index), ranges)
            if n.checks or bounds is None or bounds[0] < 0 or bounds[1] >= n.buffer.size:
                return False
        elif _divides(n) and not (isinstance(n.b, Const) and n.b.value != 0):
            return False
    return True


def _floor_form(e):
    """`e` with its CDivs (C division of non-negative integers) as the floor
    divisions they equal, which `interval` bounds (a gather at `(j + 1) / 2`)."""
    def floor(n):
        if isinstance(n, CDiv):
            return Binary("floordiv" if n.op == "div" else "mod", n.a, n.b, n.dtype)
        return n
    return map_expr(e, floor)


def _divides(n):
    """Whether `n` is an integer division or modulo (which traps on a zero divisor)."""
    return isinstance(n, CDiv) or (isinstance(n, Binary) and n.op in ("floordiv", "mod")
                                   and dt.is_int(n.dtype))
