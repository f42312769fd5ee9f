"""schedule/loop_partition: index-set splitting of loops (TVM's LoopPartition).

A serial or vectorised loop over constant bounds whose body tests its own
variable -- `where(j >= 128 & j <= 255, dh[i, j - 128], 0)`, the gradient
of a concatenation; `j <= 127` -- is cut where those tests change value,
and each piece gets the body with the tests decided: no select on the
index is left, so the reads the select guarded become plain in-bounds
loads and the piece vectorises. Only tests on that variable alone (affine,
compared with < <= > >= == or !=, anywhere in a condition) cut a loop; at most MAX_PIECES pieces per loop. Parallel
loops and loops reducing into a scalar are left whole.

Hands on: a loop-IR statement with the same meaning (`partition_loops`).
"""
from ..te import dtype as dt
from ..te.arith import linear_form
from ..te.expr import Binary, Const, Select, Unary
from .loop_ir import For, IfThenElse, Seq, map_body, map_stmt, nodes

MAX_PIECES = 8
_TESTS = {"lt": lambda x: x < 0, "le": lambda x: x <= 0, "gt": lambda x: x > 0,
          "ge": lambda x: x >= 0, "eq": lambda x: x == 0, "ne": lambda x: x != 0}


def partition_loops(stmt):
    """`stmt` with every eligible loop cut into pieces (see the module docstring).

    >>> s = For(j, Const(0), Const(8), "vectorized",
    ...         Store(out, j, Select(j < 4, Load(a, j), Load(b, j - 4))))  # doctest: +SKIP
    >>> partition_loops(s)     # two loops: [0, 4) reads a, [4, 8) reads b   # doctest: +SKIP
    """
    stmt = map_body(stmt, partition_loops)
    return _split(stmt) if isinstance(stmt, For) else stmt


def _split(loop):
    if (loop.kind not in ("serial", "vectorized") or loop.reduction is not None
            or not isinstance(loop.begin, Const) or not isinstance(loop.end, Const)):
        return loop
    begin, end = loop.begin.value, loop.end.value
    tests = [t for t in _tests(loop.body) if _slope(t, loop.var) is not None]
    cuts = {begin, end}
    for t in tests:
        cuts |= set(_switches(t, loop.var, begin, end))
    cuts = sorted(cuts)
    if len(cuts) <= 2 or len(cuts) > MAX_PIECES + 1:
        return loop
    pieces = []
    for lo, hi in zip(cuts, cuts[1:]):
        decided = {id(t): _truth(t, loop.var, lo) for t in tests}
        pieces.append(For(loop.var, Const(lo, dt.INDEX), Const(hi, dt.INDEX), loop.kind,
                          _decide(loop.body, decided), loop.unroll))
    return Seq(pieces)


def _slope(test, var):
    """(coefficient of var, constant) if `test` compares an affine function of
    `var` alone with zero (after moving everything to one side); else None."""
    if not isinstance(test, Binary) or test.op not in _TESTS:
        return None
    a, b = linear_form(test.a), linear_form(test.b)
    if a is None or b is None:
        return None
    form = a - b
    if set(form.terms) != {var}:
        return None
    return form.terms[var], form.const


def _holds(test, var, value):
    coef, const = _slope(test, var)
    return _TESTS[test.op](coef * value + const)


def _truth(test, var, value):
    return Const(bool(_holds(test, var, value)), dt.BOOL)


def _switches(test, var, begin, end):
    """The values v in (begin, end) where `test` differs from its value at v - 1
    (an affine inequality switches at most once, an (in)equality twice)."""
    if test.op in ("eq", "ne"):
        coef, const = _slope(test, var)
        if const % coef:
            return []
        root = -const // coef
        return [v for v in (root, root + 1) if begin < v < end]
    lo, hi = begin, end - 1
    if _holds(test, var, lo) == _holds(test, var, hi):
        return []
    first = _holds(test, var, lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _holds(test, var, mid) == first:
            lo = mid
        else:
            hi = mid
    return [hi]


# walking and rewriting the body ---------------------------------------------------

def _tests(stmt):
    """The comparisons inside the select and if conditions under `stmt`
    (through &, | and ~)."""
    out, seen = [], set()
    stack = [n.cond for n in nodes(stmt) if isinstance(n, (Select, IfThenElse))]
    while stack:
        c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        if isinstance(c, Binary) and c.op in ("and", "or"):
            stack += [c.a, c.b]
        elif isinstance(c, Unary) and c.op == "not":
            stack.append(c.a)
        elif isinstance(c, Binary) and c.op in _TESTS:
            out.append(c)
    return out


def _decide(stmt, decided):
    """`stmt` with the tests in `decided` ({id(test): Const}) replaced and the
    selects and ifs they settle resolved."""
    return _settle_ifs(map_stmt(
        stmt, lambda n: decided[id(n)] if id(n) in decided else _fold(n)))


def _settle_ifs(stmt):
    """`stmt` with each if whose condition is a constant replaced by the branch taken."""
    stmt = map_body(stmt, _settle_ifs)
    if isinstance(stmt, IfThenElse) and isinstance(stmt.cond, Const):
        taken = stmt.then if stmt.cond.value else stmt.else_
        return Seq([]) if taken is None else taken
    return stmt


def _fold(e):
    """Selects, conjunctions and negations over decided (constant) conditions."""
    if isinstance(e, Select) and isinstance(e.cond, Const):
        return e.t if e.cond.value else e.f
    if isinstance(e, Binary) and e.op in ("and", "or"):
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(x, Const):
                if e.op == "and":
                    return y if x.value else x
                return x if x.value else y
    if isinstance(e, Unary) and e.op == "not" and isinstance(e.a, Const):
        return Const(not e.a.value, dt.BOOL)
    return e
