"""Integer `//` and `%` by constants in index expressions: folding them
where the variables' ranges decide them, and turning a comparison of a
quotient with a constant into an affine bound.

With i in [0, 64): `(64 * b + i) // 64` is `b`, `(64 * b + i) % 64` is `i`,
`(2 * j + 1) // 2` is `j`; `(j - 128) // 32 >= 0` is `j - 128 >= 0`. These
are the indices that flattening (`b * T + i`) and reshaping (`c // hd`,
`c % hd`) leave behind; once folded, the reads are affine again.

Hands on: rewritten expressions (`fold_divmod`, `affine_comparison`) and a
count of the `//` and `%` left (`divmod_count`).
"""
from . import dtype as dt
from .arith import Linear, form_interval, linear_form
from .expr import Binary, Const
from .visit import post_order, transform

_BOUNDS = ("lt", "le", "gt", "ge")


def fold_divmod(e):
    """`e` with every `x // c` and `x % c` (c > 0 a constant, x an index)
    simplified over the variables' own ranges: the terms of x whose
    coefficients c divides move out of the quotient (and vanish from the
    remainder), and a quotient the range of the rest decides becomes a constant.

    >>> fold_divmod((b * 64 + i) // 64)      # i in [0, 64)
    b
    >>> fold_divmod((b * 64 + i) % 64)
    i
    """
    return transform(e, _fold_node)


def _fold_node(n):
    if not (isinstance(n, Binary) and n.op in ("floordiv", "mod") and n.dtype == dt.INDEX
            and isinstance(n.b, Const) and n.b.value > 0):
        return n
    c = n.b.value
    form = linear_form(n.a, atoms=True)
    whole = Linear({v: k // c for v, k in form.terms.items() if k % c == 0}, form.const // c)
    rest = Linear({v: k for v, k in form.terms.items() if k % c}, form.const % c)
    span = form_interval(rest)
    if span is not None and span[0] // c == span[1] // c:
        q = span[0] // c
        out = whole + Linear(const=q) if n.op == "floordiv" else rest - Linear(const=q * c)
        return out.to_expr()
    if not whole.terms and whole.const == 0:
        return n
    inner = Binary(n.op, rest.to_expr(), n.b, n.dtype)
    return inner if n.op == "mod" else Binary("add", whole.to_expr(), inner, n.dtype)


def affine_comparison(cond):
    """`cond` as a comparison of affine expressions, if it compares
    `x // c` (c > 0) with a constant, either way round; else `cond` itself.

    >>> affine_comparison((j - 128) // 32 >= 0)     # j - 128 >= 0
    >>> affine_comparison(j // 32 <= 3)             # j <= 127
    """
    if not (isinstance(cond, Binary) and cond.op in _BOUNDS):
        return cond
    a, b, op = cond.a, cond.b, cond.op
    if isinstance(a, Const) and _quotient(b):
        a, b, op = b, a, {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[op]
    if not (_quotient(a) and isinstance(b, Const) and dt.is_int(b.dtype)):
        return cond
    x, c, k = a.a, a.b.value, b.value
    # x // c < k  <=>  x < c*k;  x // c <= k  <=>  x < c*(k+1);  and their negations
    limit = {"lt": c * k, "le": c * (k + 1), "ge": c * k, "gt": c * (k + 1)}[op]
    new_op = "lt" if op in ("lt", "le") else "ge"
    return Binary(new_op, x, Const(limit, x.dtype), dt.BOOL)


def _quotient(e):
    return (isinstance(e, Binary) and e.op == "floordiv" and dt.is_int(e.dtype)
            and isinstance(e.b, Const) and e.b.value > 0)


def divmod_count(e):
    """The `//` and `%` nodes (integer) under `e`.

    >>> divmod_count(A[i // 4, i % 4])
    2
    """
    return sum(1 for n in post_order(e)
               if isinstance(n, Binary) and n.op in ("floordiv", "mod") and dt.is_int(n.dtype))
