"""Scalar derivative rules and reverse mode inside one (reduction-free) body.

Walks the expression DAG from its root down, parents before children, and
sums each node's adjoint over its uses. Conditions of `where` are not
differentiated: each branch's adjoint carries the condition under which it
was selected (the condition list travels with the adjoint and becomes a
reduction's `where=` or a guard later). The rules follow PyTorch's
derivative formulas, ties included (`maximum`/`minimum` split the gradient
evenly on ties; `abs` has gradient 0 at 0; the step functions `floor`, `ceil`, `round` and
`sign` have gradient 0).

Hands on: for every read of a float tensor, its adjoint expression and the
conditions under which it applies.
"""
import math

from ..te import dtype as dt
from ..te.arith import negate
from ..te.expr import Binary, Cast, Const, Read, Select, Unary
from ..te.simplify import Structure, add, is_zero, mul, neg, where, zero
from ..te.visit import post_order


def partials(root, seed, value_of):
    """Reverse mode over `root` (an expression without reductions) started
    with adjoint `seed`. `value_of(node)` gives an expression equal to the
    node's value (e.g. a read of the tensor that stores it).

    Returns [(read, conds, adjoint)] for every Read of a float tensor: the
    read contributes `adjoint` where all of `conds` hold.

    >>> partials(A[i] * B[i], dC[i], lambda n: n)   # [(A[i], (), dC[i] * B[i]), (B[i], ...)]
    """
    structure = Structure()
    adj = {id(root): {(): ((), seed)}}
    negated = {}
    out = []
    for node in reversed(post_order(root)):
        terms = adj.pop(id(node), None)
        if not terms or not dt.is_float(node.dtype):
            continue
        for conds, a in terms.values():
            if isinstance(node, Read):
                out.append((node, conds, a))
                continue
            for child, da, cond in _rule(node, a, value_of):
                if da is None or is_zero(da):
                    continue
                if cond is _NOT:
                    cond = negated.setdefault(id(node.cond), negate(node.cond))
                child_conds = conds if cond is None else conds + (cond,)
                slot = adj.setdefault(id(child), {})
                k = tuple(structure.key(c) for c in child_conds)
                old = slot.get(k)
                slot[k] = (child_conds, da if old is None else add(old[1], da))
    return out


_STEPS = ("floor", "ceil", "round", "sign", "not")   # gradient 0 almost everywhere (torch)
_NOT = object()  # marks the `else` branch of a where: its condition, negated


def _c(value, like):
    return Const(value, like.dtype)


def _rule(node, a, value_of):
    """[(child, adjoint of child, condition or None or _NOT)] for one node."""
    if isinstance(node, Select):
        return [(node.t, a, node.cond), (node.f, a, _NOT)]
    if isinstance(node, Cast):
        if dt.is_float(node.a.dtype):
            return [(node.a, Cast(node.a.dtype, a), None)]
        return []
    if isinstance(node, Unary):
        return [(node.a, _unary(node, a, value_of), None)]
    if isinstance(node, Binary):
        return _binary(node, a, value_of)
    return []


def _unary(node, a, value_of):
    x, op = node.a, node.op
    if op == "neg":
        return neg(a)
    if op in _STEPS:
        return None
    v = value_of(node)
    if op == "exp":
        return mul(a, v)
    if op == "log":
        return a / x
    if op == "tanh":
        return a * (_c(1, v) - v * v)
    if op == "sigmoid":
        return a * (v * (_c(1, v) - v))
    if op == "sqrt":
        return a / (v * _c(2, v))
    if op == "rsqrt":
        return a * (v * v * v) * _c(-0.5, v)
    if op == "abs":
        return Select(x > _c(0, x), a, Select(x < _c(0, x), neg(a), zero(a.dtype)))
    if op == "erf":
        return a * _c(2 / math.sqrt(math.pi), x) * Unary("exp", neg(x * x), x.dtype)
    if op == "log1p":
        return a / (x + _c(1, x))
    if op == "expm1":
        return a * (v + _c(1, v))
    if op == "sin":
        return a * Unary("cos", x, x.dtype)
    if op == "cos":
        return neg(a * Unary("sin", x, x.dtype))
    raise AssertionError(f"no derivative rule for {op}")


def _binary(node, a, value_of):
    x, y, op = node.a, node.b, node.op
    if op == "add":
        return [(x, a, None), (y, a, None)]
    if op == "sub":
        return [(x, a, None), (y, neg(a), None)]
    if op == "mul":
        if x is y:   # x * x
            return [(x, mul(mul(a, x), _c(2, x)), None)]
        return [_through_exp(x, mul(a, y), a, node, value_of),
                _through_exp(y, mul(a, x), a, node, value_of)]
    if op == "div":
        return [_through_exp(x, a / y, a, node, value_of),
                (y, neg(mul(a, value_of(node)) / y), None)]
    if op == "pow":
        return [(x, _pow_base(a, x, y), None), (y, _pow_exponent(a, x, y, value_of(node)), None)]
    if op in ("max", "min"):
        # torch: ties split the gradient evenly; the other side gets 0
        half = a * _c(0.5, a)
        lose_x = x < y if op == "max" else x > y
        lose_y = x > y if op == "max" else x < y
        tie = Binary("eq", x, y, dt.BOOL)
        z = zero(a.dtype)
        return [(x, Select(lose_x, z, Select(tie, half, a)), None),
                (y, Select(lose_y, z, Select(tie, half, a)), None)]
    if op == "mod":  # x - floor(x / y) * y
        return [(x, a, None), (y, neg(a * Unary("floor", x / y, x.dtype)), None)]
    return []  # floordiv: gradient 0 (as torch); comparisons and logic: not differentiable


def _through_exp(factor, da, a, node, value_of):
    """(child, adjoint) for a factor of the product or quotient `node`. When the
    factor is exp(u) and the node's value is stored, d node / du = node: the
    adjoint goes straight to u as `a * value` and exp(u) is not recomputed."""
    value = value_of(node)
    if isinstance(factor, Unary) and factor.op == "exp" and value is not node:
        return (factor.a, mul(a, value), None)
    return (factor, da, None)


def _pow_base(a, x, y):
    """d/dx x**y = y * x**(y-1); 0 where y == 0 (torch)."""
    if isinstance(y, Const):
        if y.value == 0:
            return None
        if y.value == 1:
            return a
        if y.value == 2:
            return a * x * _c(2, x)
        return a * _c(y.value, y) * Binary("pow", x, _c(y.value - 1, y), x.dtype)
    grad = a * y * Binary("pow", x, y - _c(1, y), x.dtype)
    return where(Binary("eq", y, _c(0, y), dt.BOOL), zero(a.dtype), grad)


def _pow_exponent(a, x, y, v):
    """d/dy x**y = x**y * log(x); 0 where x == 0 and y >= 0 (torch)."""
    if isinstance(y, Const):
        return None
    grad = a * v * Unary("log", x, x.dtype)
    cond = Binary("and", Binary("eq", x, _c(0, x), dt.BOOL),
                  Binary("ge", y, _c(0, y), dt.BOOL), dt.BOOL)
    return Select(cond, zero(a.dtype), grad)
