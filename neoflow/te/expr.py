"""Scalar expression nodes of the tensor-expression language.

An expression is a tree of immutable nodes: constants, index variables,
unary and binary operations, selects, casts, reads of tensors and reductions.
Python operators on nodes build new nodes, checking dtypes as they go.
Nodes compare by identity (`==` builds an expression), so they can be dict
keys but never Python booleans.

Hands on: `Expr` trees that `tensor.compute` stores as bodies.
"""
import numbers

import numpy as np

from ..errors import DTypeError, ExpressionError
from . import dtype as dt

UNARY_OPS = ("neg", "not", "exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt",
             "abs", "erf", "floor", "log1p", "expm1", "sin", "cos", "sign", "ceil", "round")
FLOAT_ONLY_UNARY = ("exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "erf", "floor",
                    "log1p", "expm1", "sin", "cos", "ceil", "round")
ARITH_OPS = ("add", "sub", "mul", "div", "floordiv", "mod", "pow", "max", "min")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGIC_OPS = ("and", "or")
REDUCE_OPS = ("sum", "max", "min")


class Expr:
    """Base of all scalar expression nodes; every node has a `dtype`."""
    __slots__ = ("dtype",)

    # Python operators -------------------------------------------------
    def __add__(self, o): return binary("add", self, o)
    def __radd__(self, o): return binary("add", o, self)
    def __sub__(self, o): return binary("sub", self, o)
    def __rsub__(self, o): return binary("sub", o, self)
    def __mul__(self, o): return binary("mul", self, o)
    def __rmul__(self, o): return binary("mul", o, self)
    def __truediv__(self, o): return binary("div", self, o)
    def __rtruediv__(self, o): return binary("div", o, self)
    def __floordiv__(self, o): return binary("floordiv", self, o)
    def __rfloordiv__(self, o): return binary("floordiv", o, self)
    def __mod__(self, o): return binary("mod", self, o)
    def __rmod__(self, o): return binary("mod", o, self)
    def __pow__(self, o): return binary("pow", self, o)
    def __rpow__(self, o): return binary("pow", o, self)
    def __neg__(self): return unary("neg", self)
    def __pos__(self): return self
    def __lt__(self, o): return binary("lt", self, o)
    def __le__(self, o): return binary("le", self, o)
    def __gt__(self, o): return binary("gt", self, o)
    def __ge__(self, o): return binary("ge", self, o)
    def __eq__(self, o): return binary("eq", self, o)  # noqa: builds an expression
    def __ne__(self, o): return binary("ne", self, o)
    def __and__(self, o): return binary("and", self, o)
    def __rand__(self, o): return binary("and", o, self)
    def __or__(self, o): return binary("or", self, o)
    def __ror__(self, o): return binary("or", o, self)
    def __invert__(self): return unary("not", self)
    __hash__ = object.__hash__

    def __bool__(self):
        raise ExpressionError(
            "a tensor expression has no Python truth value; use nf.where(cond, a, b) "
            "for conditionals and & | ~ to combine conditions")

    def __repr__(self):
        from .printer import expr_str
        return expr_str(self)


class Const(Expr):
    """A literal scalar of a given dtype."""
    __slots__ = ("value",)

    def __init__(self, value, dtype):
        self.dtype = dtype
        self.value = _coerce_literal(value, dtype)


class IterVar(Expr):
    """An index variable over the half-open range [lo, hi).

    kind "spatial": one axis of a compute's output; "reduce": made by
    `nf.reduce_axis`, bound by the reduction that names it.
    """
    __slots__ = ("name", "lo", "hi", "kind")

    def __init__(self, name, lo, hi, kind):
        self.dtype = dt.INDEX
        self.name, self.lo, self.hi, self.kind = name, int(lo), int(hi), kind

    @property
    def extent(self):
        return self.hi - self.lo


class Unary(Expr):
    __slots__ = ("op", "a")

    def __init__(self, op, a, dtype):
        self.op, self.a, self.dtype = op, a, dtype


class Binary(Expr):
    __slots__ = ("op", "a", "b")

    def __init__(self, op, a, b, dtype):
        self.op, self.a, self.b, self.dtype = op, a, b, dtype


class Select(Expr):
    """`cond ? t : f`; only the chosen branch is evaluated (reads in the other
    branch may be out of range: this is how padding is written)."""
    __slots__ = ("cond", "t", "f")

    def __init__(self, cond, t, f):
        self.cond, self.t, self.f, self.dtype = cond, t, f, t.dtype


class Cast(Expr):
    __slots__ = ("a",)

    def __init__(self, dtype, a):
        self.dtype, self.a = dtype, a


class Read(Expr):
    """`tensor[indices]`; an index may itself read an integer tensor (gather)."""
    __slots__ = ("tensor", "indices")

    def __init__(self, tensor, indices):
        self.tensor, self.indices, self.dtype = tensor, tuple(indices), tensor.dtype


class Reduce(Expr):
    """`op` over `axes` of `body`, restricted to where `cond` holds (None: everywhere)."""
    __slots__ = ("op", "body", "axes", "cond")

    def __init__(self, op, body, axes, cond=None):
        self.op, self.body, self.axes, self.cond = op, body, tuple(axes), cond
        self.dtype = body.dtype


# ---------------------------------------------------------------------------
# Construction with checks

def _coerce_literal(value, dtype):
    if dtype == dt.BOOL:
        return bool(value)
    if dt.is_int(dtype):
        if isinstance(value, float) and not float(value).is_integer():
            raise DTypeError(f"constant {value!r} is not an integer but dtype is {dtype}")
        return int(value)
    return float(value)


def as_expr(value, like=None):
    """Turn a Python number into a Const taking `like`'s dtype (or its own)."""
    if isinstance(value, Expr):
        return value
    if hasattr(value, "ndim") and hasattr(value, "shape") and not isinstance(value, np.generic):
        raise ExpressionError(
            f"a whole tensor ({getattr(value, 'name', value)!r}) cannot stand inside a "
            "scalar expression; index it first, e.g. A[i, j]")
    if isinstance(value, (bool, np.bool_)):
        return Const(bool(value), dt.BOOL)
    if isinstance(value, numbers.Integral):
        if like is not None and like.dtype != dt.BOOL:
            return Const(value, like.dtype)
        return Const(value, dt.INDEX)
    if isinstance(value, numbers.Real):
        if like is not None:
            if dt.is_int(like.dtype):
                raise DTypeError(
                    f"cannot combine the integer expression {like!r} ({like.dtype}) with "
                    f"the float constant {value!r}; use nf.cast({like!r}, 'float32') first")
            if dt.is_float(like.dtype):
                return Const(value, like.dtype)
        return Const(value, "float32")
    raise ExpressionError(f"cannot use {value!r} ({type(value).__name__}) in a tensor expression")


def _unify(op, a, b):
    """Bring two operands to one dtype: numbers adopt the other side's dtype;
    int32 and int64 widen to int64 (index arithmetic); anything else must match."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        raise ExpressionError(f"'{op}' needs at least one tensor expression operand")
    if not isinstance(a, Expr):
        a = as_expr(a, like=b)
    if not isinstance(b, Expr):
        b = as_expr(b, like=a)
    if a.dtype != b.dtype:
        if dt.is_int(a.dtype) and dt.is_int(b.dtype):
            a = a if a.dtype == "int64" else Cast("int64", a)
            b = b if b.dtype == "int64" else Cast("int64", b)
        else:
            raise DTypeError(
                f"dtype mismatch in '{op}': {a!r} is {a.dtype} but {b!r} is {b.dtype}; "
                "use nf.cast to convert one side")
    return a, b


def binary(op, a, b):
    """Build a checked binary node (arithmetic, comparison or logic)."""
    a, b = _unify(op, a, b)
    t = a.dtype
    if op in LOGIC_OPS:
        if t != dt.BOOL:
            raise DTypeError(f"'&' and '|' combine conditions (bool); got {a!r} of dtype {t}")
        return Binary(op, a, b, dt.BOOL)
    if op in COMPARE_OPS:
        if t == dt.BOOL and op not in ("eq", "ne"):
            raise DTypeError(f"cannot order conditions with '{op}': {a!r}")
        return Binary(op, a, b, dt.BOOL)
    if t == dt.BOOL:
        raise DTypeError(f"arithmetic '{op}' on a condition {a!r}; use nf.where or nf.cast")
    if dt.is_int(t):
        if op == "div":
            raise DTypeError(
                f"'/' on integer expressions ({a!r} / {b!r}); use // for floor division "
                "or nf.cast to a float dtype")
        if op == "pow":
            raise DTypeError(f"'**' needs float operands; got {t} ({a!r})")
        if op in ("floordiv", "mod") and not isinstance(b, Const):
            raise ExpressionError(
                f"integer '{'//' if op == 'floordiv' else '%'}' needs a constant divisor; "
                f"got {b!r}")
        if op in ("floordiv", "mod") and b.value == 0:
            raise ExpressionError(f"integer division of {a!r} by zero")
    return Binary(op, a, b, t)


def unary(op, a):
    """Build a checked unary node."""
    a = as_expr(a)
    if op == "not":
        if a.dtype != dt.BOOL:
            raise DTypeError(f"'~' negates a condition (bool); got {a!r} of dtype {a.dtype}")
        return Unary(op, a, dt.BOOL)
    if a.dtype == dt.BOOL:
        raise DTypeError(f"'{op}' of a condition {a!r}; use nf.cast first")
    if op in FLOAT_ONLY_UNARY and not dt.is_float(a.dtype):
        raise DTypeError(f"nf.{op} needs a float expression; got {a!r} of dtype "
                         f"{a.dtype} (use nf.cast)")
    return Unary(op, a, a.dtype)
