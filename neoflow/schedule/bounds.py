"""schedule/bounds: facts about index expressions under loop ranges and
conditions, on top of te.arith (affine forms, intervals, narrowing).

Lowering asks three things (`Facts`): is this read provably inside its
tensor where it executes (else it gets a run-time check); is this integer
dividend provably non-negative (then C's `/` and `%` are floor division);
does this condition always hold. And (`axis_bounds`) which conjuncts of a
reduction's condition bound one reduce axis affinely: they become loop
bounds instead of an if-guard.

Hands on: booleans and bound expressions (te nodes).
"""
from ..te import dtype as dt
from ..te.arith import Linear, combine_intervals, conjuncts, interval, linear_form, narrow, prove
from ..te.expr import Binary, Cast, Const, Select


class Facts:
    """What holds where `conds` (conditions assumed true) hold: variable ranges
    narrowed by them, and each affine conjunct kept whole as `F >= 0` (the
    narrowed ranges alone lose `h + r - 1 >= 0`, which proves a padded read).

    >>> Facts([(h + r - 1 >= 0) & (h + r - 1 < 8)]).within(h + r - 1, 8)
    True
    """

    def __init__(self, conds):
        ranges, forms = {}, []
        for c in conds:
            for part in conjuncts(c):
                if ranges is not None:
                    ranges = narrow(part, ranges)
                forms.extend(nonnegative_forms(part))
        self.ranges, self.forms = ranges, forms

    def within(self, e, size):
        """True if the integer expression `e` is provably in [0, size)."""
        b = self.bounds(e)
        return b is not None and b[0] >= 0 and b[1] < size

    def nonnegative(self, e):
        """True if the integer expression `e` is provably >= 0."""
        b = self.bounds(e)
        return b is not None and b[0] >= 0

    def bounds(self, e):
        """Inclusive (lo, hi) of the integer expression `e`, or None if unknown.

        Affine parts use the facts too (e = F + (e - F) with F >= 0); `//`
        and `%` by positive constants, sums, casts, min/max and selects
        combine the bounds of their operands.
        """
        if self.ranges is None:
            return None  # the conditions cannot hold: nothing here ever runs
        b = interval(e, self.ranges)
        form = linear_form(e)
        if form is not None:
            lo, hi = b
            for f in self.forms:
                lo = max(lo, interval((form - f).to_expr(), self.ranges)[0])
                hi = min(hi, -interval((form.scale(-1) - f).to_expr(), self.ranges)[0])
            return lo, hi
        if isinstance(e, Cast) and dt.is_int(e.dtype) and dt.is_int(e.a.dtype):
            return self.bounds(e.a)
        if isinstance(e, Select):
            t, f = self.bounds(e.t), self.bounds(e.f)
            return None if t is None or f is None else (min(t[0], f[0]), max(t[1], f[1]))
        if not (isinstance(e, Binary) and dt.is_int(e.dtype)):
            return b
        if e.op in ("floordiv", "mod") and isinstance(e.b, Const) and e.b.value > 0:
            a, c = self.bounds(e.a), e.b.value
            if a is None:
                return (0, c - 1) if e.op == "mod" else None
            if e.op == "floordiv":
                return a[0] // c, a[1] // c
            return (a[0] % c, a[1] % c) if a[0] // c == a[1] // c else (0, c - 1)
        a, c = self.bounds(e.a), self.bounds(e.b)
        if a is None or c is None or e.op not in ("add", "sub", "mul", "max", "min"):
            return b
        return combine_intervals(e.op, a, c)

    def always(self, cond):
        """True if `cond` provably holds."""
        return self.ranges is not None and prove(cond, self.ranges) is True


def nonnegative_forms(cond):
    """Affine forms F (te.arith Linear) with `cond` equivalent to F >= 0 (two
    for ==; none if `cond` is not an affine comparison)."""
    if not (isinstance(cond, Binary) and cond.op in ("lt", "le", "gt", "ge", "eq")):
        return []
    fa, fb = linear_form(cond.a), linear_form(cond.b)
    if fa is None or fb is None:
        return []
    one = Linear(const=1)
    return {"ge": [fa - fb], "gt": [fa - fb - one], "le": [fb - fa], "lt": [fb - fa - one],
            "eq": [fa - fb, fb - fa]}[cond.op]


def axis_bounds(conjunct, axis, available):
    """Loop bounds on reduce `axis` implied by an affine comparison, when every
    other variable in it is in `available` (ids of bound IterVars).

    Returns ([lower bounds], [exclusive upper bounds]) as int64 te
    expressions, or None when the conjunct cannot become a loop bound.

    >>> axis_bounds(h + r - 1 >= 0, r, {id(h)})   # r >= 1 - h
    ([(1 - h)], [])
    """
    if not (isinstance(conjunct, Binary) and conjunct.op in ("lt", "le", "gt", "ge", "eq")):
        return None
    fa, fb = linear_form(conjunct.a), linear_form(conjunct.b)
    if fa is None or fb is None:
        return None
    diff = fa - fb                                    # conjunct: diff (op) 0
    c = diff.terms.get(axis, 0)
    if c == 0 or any(id(v) not in available for v in diff.terms if v is not axis):
        return None
    rest = diff - Linear({axis: c})           # c*axis + rest (op) 0
    neg_rest = rest.scale(-1)                         # c*axis (op) -rest
    lowers, uppers = [], []
    ops = {"eq": ("le", "ge")}.get(conjunct.op, (conjunct.op,))
    for op in ops:
        # c*axis <= x  (or >= x), with x = -rest adjusted for strictness
        x = neg_rest + Linear(const={"lt": -1, "gt": 1}.get(op, 0))
        upper = op in ("lt", "le")
        if c < 0:
            x, upper = x.scale(-1), not upper
        k = abs(c)
        if upper:    # axis <= floor(x / k)
            uppers.append(_plus(_floordiv(x.to_expr(), k), 1))
        else:        # axis >= ceil(x / k) = floor((x + k - 1) / k)
            lowers.append(_floordiv(_plus(x.to_expr(), k - 1), k))
    return lowers, uppers


def _plus(e, n):
    if n == 0:
        return e
    if isinstance(e, Const):
        return Const(e.value + n, dt.INDEX)
    return Binary("add", e, Const(n, dt.INDEX), dt.INDEX)


def _floordiv(e, k):
    if k == 1:
        return e
    if isinstance(e, Const):
        return Const(e.value // k, dt.INDEX)
    return Binary("floordiv", e, Const(k, dt.INDEX), dt.INDEX)


def redundant(bound, limit, lower, ranges):
    """True if the bound never beats `limit` (a lower bound never above it,
    an upper bound never below it) on `ranges`."""
    b = interval(bound, ranges)
    if b is None:
        return False
    return b[1] <= limit if lower else b[0] >= limit
