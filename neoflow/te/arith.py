"""Integer arithmetic on index expressions: affine (linear) forms, interval
bounds over variable ranges, and narrowing of ranges by conditions.

Shared by autodiff (solving index maps, dropping conditions that always hold)
and by lowering (proving reads in bounds, tightening loop ranges).

Hands on: `Linear` forms, (lo, hi) intervals (inclusive), narrowed ranges.
"""
from .expr import Binary, Cast, Const, IterVar, Read, Reduce, Select, Unary
from . import dtype as dt
from .visit import post_order


class Linear:
    """sum(coeff * var) + const over IterVars, with integer coefficients.

    >>> f = linear_form(2 * i + k - 1); f.terms[i], f.const
    (2, -1)
    """
    __slots__ = ("terms", "const")

    def __init__(self, terms=None, const=0):
        self.terms = {v: c for v, c in (terms or {}).items() if c != 0}
        self.const = const

    def __add__(self, o):
        terms = dict(self.terms)
        for v, c in o.terms.items():
            terms[v] = terms.get(v, 0) + c
        return Linear(terms, self.const + o.const)

    def scale(self, k):
        return Linear({v: c * k for v, c in self.terms.items()}, self.const * k)

    def __sub__(self, o):
        return self + o.scale(-1)

    @property
    def is_const(self):
        return not self.terms

    def to_expr(self):
        """The form as an int64 expression (terms in insertion order)."""
        out = None
        for v, c in self.terms.items():
            term = v if c == 1 else (-v if c == -1 else v * c)
            out = term if out is None else out + term
        if out is None:
            return Const(self.const, dt.INDEX)
        return out + self.const if self.const else out


def linear_form(e, atoms=False):
    """The affine form of an integer expression, or None if it is not affine.

    With `atoms=True` a non-affine integer sub-expression (`u // 4`, `u % 4`,
    a product of variables, a value read from a tensor) becomes a term of its
    own, keyed by the node, so the form is never None for an integer `e`.

    >>> linear_form(2 * (i // 4) + i, atoms=True).terms   # {i // 4: 2, i: 1}
    """
    if isinstance(e, Const) and dt.is_int(e.dtype):
        return Linear(const=e.value)
    if isinstance(e, IterVar):
        return Linear({e: 1})
    if isinstance(e, Cast) and dt.is_int(e.dtype) and dt.is_int(e.a.dtype):
        return linear_form(e.a, atoms)
    if isinstance(e, Unary) and e.op == "neg":
        a = linear_form(e.a, atoms)
        return None if a is None else a.scale(-1)
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
        a, b = linear_form(e.a, atoms), linear_form(e.b, atoms)
        if a is not None and b is not None:
            if e.op == "add":
                return a + b
            if e.op == "sub":
                return a - b
            if a.is_const:
                return b.scale(a.const)
            if b.is_const:
                return a.scale(b.const)
    if atoms and dt.is_int(e.dtype):
        return Linear({e: 1})
    return None


def var_range(v, ranges):
    """Inclusive (lo, hi) of IterVar `v`: from `ranges` if given there, else its own.
    A non-IterVar term of a form made with `atoms=True` gets its `interval`
    (None when unknown)."""
    if not isinstance(v, IterVar):
        return interval(v, ranges)
    return ranges.get(v, (v.lo, v.hi - 1)) if ranges else (v.lo, v.hi - 1)


def form_interval(f, ranges=None):
    """Inclusive bounds of a `Linear` form over `ranges`, or None when a term is unbounded.

    >>> form_interval(linear_form(2 * i - 1))   # i in [0, 4)
    (-1, 5)
    """
    lo = hi = f.const
    for v, c in f.terms.items():
        r = var_range(v, ranges)
        if r is None:
            return None
        lo += min(c * r[0], c * r[1])
        hi += max(c * r[0], c * r[1])
    return lo, hi


def combine_intervals(op, a, b):
    """Inclusive bounds of `a op b` for op in add, sub, mul, max, min, from the
    operands' inclusive bounds.

    >>> combine_intervals("sub", (0, 3), (1, 2))
    (-2, 2)
    """
    if op == "add":
        return a[0] + b[0], a[1] + b[1]
    if op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if op == "mul":
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    pick = max if op == "max" else min
    return pick(a[0], b[0]), pick(a[1], b[1])


def interval(e, ranges=None):
    """Inclusive integer bounds (lo, hi) of `e` over `ranges` ({IterVar: (lo, hi)}),
    or None when unknown (e.g. a value read from a tensor).

    >>> interval(i * 2 - 1)   # i in [0, 4)
    (-1, 5)
    """
    f = linear_form(e)
    if f is not None:
        return form_interval(f, ranges)
    if isinstance(e, Cast) and dt.is_int(e.dtype) and dt.is_int(e.a.dtype):
        return interval(e.a, ranges)
    if isinstance(e, Select):
        a, b = interval(e.t, ranges), interval(e.f, ranges)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if not isinstance(e, Binary) or not dt.is_int(e.dtype):
        return None
    a, b = interval(e.a, ranges), interval(e.b, ranges)
    if a is None or b is None:
        if e.op == "mod" and isinstance(e.b, Const) and e.b.value > 0:
            return 0, e.b.value - 1
        return None
    if e.op in ("add", "sub", "mul", "max", "min"):
        return combine_intervals(e.op, a, b)
    if e.op == "floordiv" and isinstance(e.b, Const):
        c = e.b.value
        ends = (a[0] // c, a[1] // c)
        return min(ends), max(ends)
    if e.op == "mod" and isinstance(e.b, Const):
        c = e.b.value
        if c > 0 and a[0] // c == a[1] // c:  # no wrap inside the range
            return a[0] % c, a[1] % c
        return (0, c - 1) if c > 0 else (c + 1, 0)
    return None


_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}


def narrow(cond, ranges, atoms=False):
    """Ranges tightened by a condition assumed true, or None if it cannot hold.

    Understands conjunctions (&) of comparisons between affine expressions;
    each comparison tightens every variable it bounds given the others'
    ranges. Other conditions leave the ranges as they are. With
    `atoms=True`, non-affine integer parts (`j // 4`) count as terms bounded
    by their `interval`; only IterVars are narrowed.

    >>> narrow((i - 1 >= 0) & (i < 5), {})[i]   # i in [0, 8)
    (1, 4)
    """
    out = dict(ranges)
    if isinstance(cond, Binary) and cond.op == "and":
        out = narrow(cond.a, out, atoms)
        return None if out is None else narrow(cond.b, out, atoms)
    if not (isinstance(cond, Binary) and cond.op in _FLIP):
        return out
    if not (dt.is_int(cond.a.dtype) and dt.is_int(cond.b.dtype)):
        return out
    fa, fb = linear_form(cond.a, atoms), linear_form(cond.b, atoms)
    if fa is None or fb is None:
        return out
    diff = fa - fb  # cond: diff (op) 0
    op = cond.op
    for v, c in diff.terms.items():
        if not isinstance(v, IterVar):
            continue
        rest = Linear({u: k for u, k in diff.terms.items() if u is not v}, diff.const)
        bounds = form_interval(rest, out)
        if bounds is None:
            continue
        lo_rest, hi_rest = bounds
        # c*v + rest (op) 0  ->  c*v (op) -rest
        vop = op if c > 0 else _FLIP[op]
        lo, hi = var_range(v, out)
        c_abs = abs(c)
        # bound of v from the most permissive value of -rest
        if vop in ("lt", "le", "eq"):  # c_abs*v <= -rest (- 1 if lt)
            bound = (-lo_rest if c > 0 else hi_rest) - (1 if vop == "lt" else 0)
            hi = min(hi, bound // c_abs)
        if vop in ("gt", "ge", "eq"):  # c_abs*v >= -rest (+ 1 if gt)
            bound = (-hi_rest if c > 0 else lo_rest) + (1 if vop == "gt" else 0)
            lo = max(lo, -((-bound) // c_abs))
        if lo > hi:
            return None
        out[v] = (lo, hi)
    if diff.is_const:
        holds = {"lt": diff.const < 0, "le": diff.const <= 0, "gt": diff.const > 0,
                 "ge": diff.const >= 0, "eq": diff.const == 0}[op]
        return out if holds else None
    return out


def prove(cond, ranges=None):
    """True if `cond` holds everywhere on `ranges`, False if nowhere, else None.

    >>> prove(i < 10)   # i in [0, 4)
    True
    """
    if isinstance(cond, Const):
        return bool(cond.value)
    if isinstance(cond, Binary) and cond.op in ("and", "or"):
        a, b = prove(cond.a, ranges), prove(cond.b, ranges)
        if cond.op == "and":
            return False if False in (a, b) else (True if a and b else None)
        return True if True in (a, b) else (False if a is False and b is False else None)
    if isinstance(cond, Unary) and cond.op == "not":
        p = prove(cond.a, ranges)
        return None if p is None else not p
    if not (isinstance(cond, Binary) and cond.op in ("lt", "le", "gt", "ge", "eq", "ne")):
        return None
    if not (dt.is_int(cond.a.dtype) and dt.is_int(cond.b.dtype)):
        return None
    d = interval(Binary("sub", cond.a, cond.b, "int64"), ranges)
    if d is None:
        return None
    lo, hi = d
    table = {"lt": (hi < 0, lo >= 0), "le": (hi <= 0, lo > 0), "gt": (lo > 0, hi <= 0),
             "ge": (lo >= 0, hi < 0), "eq": (lo == hi == 0, lo > 0 or hi < 0),
             "ne": (lo > 0 or hi < 0, lo == hi == 0)}
    always, never = table[cond.op]
    return True if always else (False if never else None)


_NEGATE = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


def conjuncts(cond):
    """The operands of a conjunction (`a & b & c` -> [a, b, c]); [] for None.

    >>> conjuncts((i > 0) & (i < 5))   # [i > 0, i < 5]
    """
    if cond is None:
        return []
    if isinstance(cond, Binary) and cond.op == "and":
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


def negate(cond):
    """The negation of a condition, with integer comparisons flipped (`~(i < 4)`
    -> `i >= 4`) and `~` pushed inside `|`, so that `narrow` and `prove` still
    understand it. Float comparisons are negated with `~` (NaN makes
    `~(x < y)` differ from `x >= y`).

    >>> negate(i < 4)   # i >= 4
    """
    if isinstance(cond, Const):
        return Const(not cond.value, dt.BOOL)
    if isinstance(cond, Unary) and cond.op == "not":
        return cond.a
    if isinstance(cond, Binary) and cond.op in _NEGATE and dt.is_int(cond.a.dtype):
        return Binary(_NEGATE[cond.op], cond.a, cond.b, dt.BOOL)
    if isinstance(cond, Binary) and cond.op == "or":  # ~(a | b) = ~a & ~b
        return Binary("and", negate(cond.a), negate(cond.b), dt.BOOL)
    return Unary("not", cond, dt.BOOL)


def free_vars(e):
    """The IterVars `e` uses that no reduction inside `e` binds, in first-use order.

    >>> free_vars(nf.sum(A[i, k], axis=k) + i)   # [i]
    """
    bound = {id(a) for n in post_order(e) if isinstance(n, Reduce) for a in n.axes}
    return [n for n in post_order(e) if isinstance(n, IterVar) and id(n) not in bound]


def is_index_expr(e):
    """True if `e` depends on index variables and constants only (no tensor
    value, no reduction): pure index arithmetic or an index condition.

    >>> is_index_expr((i * 2 + 1) % 3 == 0), is_index_expr(A[i] > 0)
    (True, False)
    """
    return not any(isinstance(n, (Read, Reduce)) for n in post_order(e))
