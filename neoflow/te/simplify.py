"""The simplifier: rewrites an expression into an equal one that does less work.

Constant folding and identities (x*1, x+0, --x, where(true, a, b)),
canonical affine index expressions, conditions decided by `arith.prove` on
the ranges known at that point (the enclosing where/where= conditions
narrow them), reduce axes tightened to where the reduction's condition can
hold (new axes over constant bounds), axes of extent 1 removed, and factors
that do not depend on a sum's axes moved out of the sum. It assumes finite
values where it drops `x * 0`. Autodiff runs it on every gradient body;
it never builds anything bigger than what it was given.

Hands on: simplified `Expr` trees; `key` gives structural identity.
"""
import numpy as np

from . import dtype as dt
from .arith import conjuncts, free_vars, interval, is_index_expr, linear_form, narrow, negate, prove
from .evaluate import _binary, _identity, _unary
from .expr import Binary, Cast, Const, IterVar, Read, Reduce, Select, Unary
from .random import Random
from .visit import children, post_order, substitute, transform, with_children


class Structure:
    """Structural identity of expressions: equal keys mean equal trees (IterVars
    and tensors compared by identity). Keys are small ints, valid within one
    `Structure`.

    >>> s = Structure(); s.key(A[i] + 1) == s.key(A[i] + 1)
    True
    """

    def __init__(self):
        self._table, self._memo = {}, {}

    def key(self, e):
        memo = self._memo
        for n in post_order(e):
            if id(n) in memo:
                continue
            if isinstance(n, Const):
                k = ("c", n.dtype, n.value)
            elif isinstance(n, IterVar):
                k = ("v", id(n))
            elif isinstance(n, Read):
                k = ("r", id(n.tensor)) + tuple(memo[id(i)][0] for i in n.indices)
            elif isinstance(n, Unary):
                k = ("u", n.op, n.dtype, memo[id(n.a)][0])
            elif isinstance(n, Cast):
                k = ("cast", n.dtype, memo[id(n.a)][0])
            elif isinstance(n, Binary):
                k = ("b", n.op, n.dtype, memo[id(n.a)][0], memo[id(n.b)][0])
            elif isinstance(n, Select):
                k = ("s",) + tuple(memo[id(c)][0] for c in (n.cond, n.t, n.f))
            elif isinstance(n, Random):
                k = ("rand", n.dtype) + tuple(memo[id(c)][0] for c in n.args)
            else:  # Reduce
                k = ("red", n.op, tuple(id(a) for a in n.axes), memo[id(n.body)][0],
                     None if n.cond is None else memo[id(n.cond)][0])
            memo[id(n)] = (self._table.setdefault(k, len(self._table)), n)  # n kept alive
        return memo[id(e)][0]


def simplify(e, ranges=None):
    """An expression equal to `e` (on `ranges`, {IterVar: (lo, hi)} inclusive;
    default: each variable's own range) that does no more work.

    >>> simplify(nf.where(i < 10, A[i] * 1.0 + 0.0, 0.0))   # i in [0, 4)
    A[i]
    """
    return _Simplifier().run(e, dict(ranges or {}))


def masked_exp(e):
    """`e` with each `exp(where(c, -inf, x) - b)` (a masked softmax's
    numerator) as `where(c, where(b > -inf, 0, nan), exp(x - b))`, and
    `exp(where(c, -inf, x))` as `where(c, 0, exp(x))`: the same values, bit
    for bit, but no -inf reaches exp. Vectorised exp takes a scalar slow path
    for every vector holding an argument below about -87 (glibc's libmvec):
    a causal attention's softmax ran 8x slower masked than unmasked.

    >>> masked_exp(nf.exp(nf.where(j > i, -np.inf, S[i, j]) - M[i]))
    where((j > i), where((M[i] > -inf), 0.0, nan), exp((S[i, j] - M[i])))
    """
    return transform(e, masked_exp_rule)


def masked_exp_rule(n):
    """`masked_exp` at one node whose children are rewritten already (for a
    `transform` doing other work too: graph/partition's inlining)."""
    if not (isinstance(n, Unary) and n.op == "exp"):
        return n
    arg, shift = n.a, None
    if isinstance(arg, Binary) and arg.op == "sub" and isinstance(arg.a, Select):
        arg, shift = arg.a, arg.b
    if not isinstance(arg, Select):
        return n
    masked_first = _is_neg_inf(arg.t)
    if not masked_first and not _is_neg_inf(arg.f):
        return n
    live = arg.f if masked_first else arg.t
    dtype = n.dtype
    if shift is None:
        masked = Const(0.0, dtype)
    else:
        live = Binary("sub", live, shift, dtype)
        finite = Binary("gt", shift, Const(-np.inf, shift.dtype), dt.BOOL)
        masked = Select(finite, Const(0.0, dtype), Const(np.nan, dtype))
    value = Unary("exp", live, dtype)
    return Select(arg.cond, masked, value) if masked_first else Select(arg.cond, value, masked)


def _is_neg_inf(e):
    return isinstance(e, Const) and e.dtype in dt.FLOAT_DTYPES and e.value == -np.inf


def addends(e):
    """The terms of `e`'s top-level addition chain (additions of e's dtype), in order.

    >>> addends(A[i] * B[i] + C[i] + D[i])
    [(A[i] * B[i]), C[i], D[i]]
    """
    terms, stack = [], [e]
    while stack:
        n = stack.pop()
        if isinstance(n, Binary) and n.op == "add" and n.dtype == e.dtype:
            stack += [n.b, n.a]
        else:
            terms.append(n)
    return terms


def merge_sums(e):
    """`e` with the sums of its top-level addition chain that run over equal
    ranges (axis by axis) under the same condition folded into one sum:
    sum_r f + sum_s g -> sum_r (f + g[s := r]). One loop nest does the work
    of several (a weight used at every step of an RNN gets one gradient
    reduction over all steps instead of one per step, each nested inside the
    first). Only the order of additions changes.

    >>> merge_sums(nf.sum(A[k], axis=k) + nf.sum(B[m], axis=m))   # k, m in [0, 8)
    sum((A[k] + B[k]), k)
    """
    terms = addends(e)
    if sum(isinstance(t, Reduce) and t.op == "sum" for t in terms) < 2:
        return e
    structure, groups, out = Structure(), [], []
    for t in terms:
        group = None
        if isinstance(t, Reduce) and t.op == "sum":
            group = next((g for g in groups if _same_ranges(g[0], t, structure)), None)
            if group is None:
                groups.append([t, [t.body]])
                out.append(groups[-1])
                continue
            group[1].append(substitute(t.body, dict(zip(t.axes, group[0].axes))))
        else:
            out.append(t)
    if all(len(g[1]) == 1 for g in groups):
        return e                     # no two sums over equal ranges
    total = None
    for t in out:
        if isinstance(t, list):
            head, bodies = t
            body = bodies[0]
            for b in bodies[1:]:
                body = add(body, b)
            t = head if len(bodies) == 1 else Reduce("sum", body, head.axes, head.cond)
        total = t if total is None else add(total, t)
    return total


def _same_ranges(head, other, structure):
    """Whether sum `other` runs over `head`'s ranges, axis by axis, under the same condition."""
    if len(head.axes) != len(other.axes) or any(
            (a.lo, a.hi) != (b.lo, b.hi) for a, b in zip(head.axes, other.axes)):
        return False
    if head.cond is None or other.cond is None:
        return head.cond is None and other.cond is None
    cond = substitute(other.cond, dict(zip(other.axes, head.axes)))
    return structure.key(cond) == structure.key(head.cond)


def zero(dtype):
    """The constant 0 of `dtype`. >>> zero("float32").value
    0.0"""
    return Const(0, dtype)


def is_zero(e):
    """True for a numeric constant 0. >>> is_zero(zero("float32"))
    True"""
    return isinstance(e, Const) and e.value == 0 and e.dtype != dt.BOOL


def is_one(e):
    """True for a numeric constant 1. >>> is_one(Const(1, "int64"))
    True"""
    return isinstance(e, Const) and e.value == 1 and e.dtype != dt.BOOL


def reduce_identity(op, dtype):
    """The value of a reduction that selects nothing (0, -inf, +inf, or the int
    extremes). >>> reduce_identity("max", "float32").value
    -inf"""
    return Const(_identity(op, np.dtype(dtype)).item(), dtype)


def fold(e):
    """`e` evaluated if its operands are all constants, else `e`.

    >>> fold(Binary("add", Const(1, "int64"), Const(2, "int64"), "int64")).value
    3
    """
    if isinstance(e, Unary) and isinstance(e.a, Const) and e.op != "neg" or \
            isinstance(e, Unary) and e.op == "neg" and isinstance(e.a, Const):
        v = _unary(e.op, _array(e.a))
        return Const(np.asarray(v).astype(dt.to_numpy(e.dtype))[0].item(), e.dtype)
    if isinstance(e, Binary) and isinstance(e.a, Const) and isinstance(e.b, Const):
        if e.op in ("floordiv", "mod") and e.b.value == 0:
            return e
        v = _binary(e.op, _array(e.a), _array(e.b), e.dtype)
        return Const(v[0].item(), e.dtype)
    if isinstance(e, Cast) and isinstance(e.a, Const):
        v = np.asarray(e.a.value, dt.to_numpy(e.a.dtype)).astype(dt.to_numpy(e.dtype))
        return Const(v.item(), e.dtype)
    return e


def _array(c):
    """A constant as a 1-element array of its dtype (the evaluator's operand form)."""
    return np.full(1, c.value, dt.to_numpy(c.dtype))


def mul(a, b):
    """a * b with the identities applied (0, 1, constants folded). >>> mul(A[i], one)  # A[i]"""
    if is_zero(a) or is_zero(b):
        return zero(a.dtype)
    if is_one(a):
        return b
    if is_one(b):
        return a
    return fold(Binary("mul", a, b, a.dtype))


_DUPLICABLE = 32  # nodes of a sub-expression a rewrite may copy


def _tree_size(e, limit):
    """Nodes of `e` counted as a tree (shared sub-trees each time), stopping past `limit`."""
    count, stack = 0, [e]
    while stack and count <= limit:
        node = stack.pop()
        count += 1
        stack.extend(children(node))
    return count


def add(a, b):
    """a + b with zeros dropped and constants folded. >>> add(A[i], zero)  # A[i]"""
    if is_zero(a):
        return b
    if is_zero(b):
        return a
    return fold(Binary("add", a, b, a.dtype))


def neg(a):
    """-a, folding constants and double negation, and moved into a guard.
    >>> neg(nf.where(i > 0, A[i], 0.0))   # where(i > 0, -A[i], -0.0)"""
    if isinstance(a, Unary) and a.op == "neg":
        return a.a
    if isinstance(a, Select) and (is_zero(a.t) or is_zero(a.f)):
        return Select(a.cond, neg(a.t), neg(a.f))
    return fold(Unary("neg", a, a.dtype))


def where(cond, a, b):
    """where(cond, a, b) without the checks of nf.where (operands already unified),
    deciding constant conditions. >>> where(Const(True, "bool"), a, b)  # a"""
    if isinstance(cond, Const):
        return a if cond.value else b
    return Select(cond, a, b)


def conjunction(conds):
    """`c1 & c2 & ...` of a list of conditions (None for an empty list).
    >>> conjunction([i > 0, i < 4])   # (i > 0) & (i < 4)"""
    out = None
    for c in conds:
        out = c if out is None else Binary("and", out, c, dt.BOOL)
    return out


class _Simplifier:
    def __init__(self):
        self.memo, self.keep = {}, []
        self.structure = Structure()

    def run(self, e, ranges):
        self.keep.append(ranges)
        k = (id(e), id(ranges))
        hit = self.memo.get(k)
        if hit is None:
            hit = self.memo[k] = (e, self._simp(e, ranges))   # e kept alive: ids stay unique
        return hit[1]

    def _narrowed(self, cond, ranges):
        """Ranges under `cond` (None when it cannot hold)."""
        if is_index_expr(cond):
            return narrow(cond, ranges, atoms=True)
        return ranges

    def _simp(self, e, R):
        if isinstance(e, (Const, IterVar)):
            return e
        if isinstance(e, Read):
            new = [self.run(i, R) for i in e.indices]
            return e if all(a is b for a, b in zip(new, e.indices)) else Read(e.tensor, new)
        if isinstance(e, Cast):
            a = self.run(e.a, R)
            if a.dtype == e.dtype:
                return a
            return fold(Cast(e.dtype, a))
        if isinstance(e, Unary):
            return self._unary(e, self.run(e.a, R), R)
        if isinstance(e, Binary):
            return self._binary(e, self.run(e.a, R), self.run(e.b, R), R)
        if isinstance(e, Select):
            return self._select(e, R)
        if isinstance(e, Random):
            return with_children(e, [self.run(c, R) for c in e.args])
        return self._reduce(e, R)

    def _unary(self, e, a, R):
        if e.op == "neg":
            return neg(a)
        if e.op == "not":
            out = negate(a)
            p = prove(out, R) if is_index_expr(out) else None
            return Const(p, dt.BOOL) if p is not None else fold(out)
        return fold(Unary(e.op, a, e.dtype) if a is not e.a else e)

    def _binary(self, e, a, b, R):
        op, t = e.op, e.dtype
        if t == dt.INDEX and op in ("add", "sub", "mul") and is_index_expr(a) and \
                is_index_expr(b):
            out = linear_form(Binary(op, a, b, t), atoms=True).to_expr()
            return out if out.dtype == t else Binary(op, a, b, t)
        if op in ("and", "or"):
            for x, y in ((a, b), (b, a)):
                if isinstance(x, Const):
                    return y if x.value == (op == "and") else x
        out = fold(Binary(op, a, b, t) if (a is not e.a or b is not e.b) else e)
        if not isinstance(out, Binary):
            return out
        if t == dt.BOOL:
            p = prove(out, R) if is_index_expr(out) else None
            return out if p is None else Const(p, dt.BOOL)
        if op == "add":
            if is_zero(a):
                return b
            if is_zero(b):
                return a
            if self.structure.key(a) == self.structure.key(b):   # x + x -> x * 2
                return Binary("mul", a, Const(2, t), t)
            for x, y, swap in ((a, b, False), (b, a, True)):
                # x + where(c, y, 0) -> where(c, x + y, x) saves an add where c fails;
                # only for a small x: x appears twice, and chains of such sums
                # (a parameter's adjoint over many reads) would grow exponentially.
                if isinstance(y, Select) and is_zero(y.f) and not isinstance(x, Const) \
                        and _tree_size(x, _DUPLICABLE) <= _DUPLICABLE:
                    inner = Binary("add", y.t, x, t) if swap else Binary("add", x, y.t, t)
                    return Select(y.cond, inner, x)
        elif op == "sub":
            if is_zero(b):
                return a
            if is_zero(a):
                return neg(b)
        elif op == "mul":
            if is_zero(a) or is_zero(b):
                return zero(t)
            if is_one(a):
                return b
            if is_one(b):
                return a
            for x, y in ((a, b), (b, a)):
                if isinstance(x, Const) and x.value == -1:
                    return neg(y)
            for x, y, swap in ((a, b, False), (b, a, True)):
                if isinstance(x, Select) and is_zero(x.f):
                    inner = Binary("mul", y, x.t, t) if swap else Binary("mul", x.t, y, t)
                    return Select(x.cond, inner, x.f)
        elif op == "div":
            if is_one(b):
                return a
            if is_zero(a):
                return a
        elif op in ("floordiv", "mod") and dt.is_int(t) and is_one(b):
            return a if op == "floordiv" else zero(t)
        elif op == "pow" and is_one(b):
            return a
        return out

    def _select(self, e, R):
        c = self.run(e.cond, R)
        if isinstance(c, Const):
            return self.run(e.t if c.value else e.f, R)
        rt, rf = self._narrowed(c, R), self._narrowed(negate(c), R)
        if rt is None:
            return self.run(e.f, R)
        if rf is None:
            return self.run(e.t, R)
        self.keep += [rt, rf]
        a, b = self.run(e.t, rt), self.run(e.f, rf)
        if self.structure.key(a) == self.structure.key(b):
            return a
        if c is e.cond and a is e.t and b is e.f:
            return e
        return Select(c, a, b)

    def _reduce(self, e, R):
        identity = reduce_identity(e.op, e.dtype)
        inner = dict(R)
        inner.update({a: (a.lo, a.hi - 1) for a in e.axes})
        body, extra = self.run(e.body, inner), []
        while isinstance(body, Select) and is_index_expr(body.cond) and \
                _is_identity(body.f, identity):   # where(c, x, id) in the body -> where=c
            extra.append(body.cond)
            body = body.t
        cond = conjunction(conjuncts(e.cond) + extra)
        cond = None if cond is None else self.run(cond, inner)
        if isinstance(cond, Const):
            if not cond.value:
                return identity
            cond = None
        narrowed = inner if cond is None else narrow(cond, inner, atoms=True)
        if narrowed is None:
            return identity
        mapping, axes, fixed = {}, [], {}
        for a in e.axes:
            lo, hi = narrowed[a]
            if lo == hi:
                fixed[a] = Const(lo, dt.INDEX)
            elif (lo, hi) != (a.lo, a.hi - 1):
                mapping[a] = IterVar(a.name, lo, hi + 1, "reduce")
                axes.append(mapping[a])
            else:
                axes.append(a)
        mapping.update(fixed)
        body = substitute(body, mapping)
        outer = dict(R)
        outer.update({a: (a.lo, a.hi - 1) for a in axes})
        kept = []
        for c in conjuncts(cond):
            c = self.run(substitute(c, mapping), outer) if mapping else c
            p = prove(c, outer) if is_index_expr(c) else None
            if p is False:
                return identity
            if p is None:
                kept.append(c)
        cond = conjunction(kept)
        body_ranges = outer if cond is None else (self._narrowed(cond, outer) or outer)
        self.keep.append(body_ranges)
        body = self.run(body, body_ranges)
        if e.op == "sum" and is_zero(body):
            return zero(e.dtype)
        if not axes:
            return body if cond is None else Select(cond, body, identity)
        if e.op == "sum":
            scale, body = _split_invariant(body, axes, outer)
            out = Reduce("sum", body, axes, cond)
            return out if scale is None else scale(out)
        if body is e.body and cond is e.cond and len(axes) == len(e.axes) and \
                all(a is b for a, b in zip(axes, e.axes)):
            return e
        return Reduce(e.op, body, axes, cond)


def _is_identity(e, identity):
    return isinstance(e, Const) and e.dtype == identity.dtype and e.value == identity.value


def _reads_in_bounds(e, ranges):
    """True if every read in `e` provably stays inside its tensor on `ranges`."""
    for n in post_order(e):
        if isinstance(n, Reduce):
            return False
        if isinstance(n, Read):
            for d, i in enumerate(n.indices):
                b = interval(i, ranges)
                if b is None or b[0] < 0 or b[1] >= n.tensor.shape[d]:
                    return False
    return True


def _split_invariant(body, axes, ranges):
    """Split a sum's body into (scale, rest): `scale(sum(rest))` equals the sum and
    `scale` holds the factors that do not depend on `axes` (None if there are none).
    Only factors that are safe to evaluate outside the sum's condition move."""
    ids = {id(a) for a in axes}
    factors, divisors, sign = [], [], False
    rest = []

    def invariant(x):
        return not any(id(v) in ids for v in free_vars(x)) and _reads_in_bounds(x, ranges)

    def walk(x, into):
        nonlocal sign
        if isinstance(x, Unary) and x.op == "neg":
            sign = not sign
            walk(x.a, into)
        elif isinstance(x, Binary) and x.op == "mul":
            walk(x.a, into)
            walk(x.b, into)
        elif isinstance(x, Binary) and x.op == "div" and invariant(x.b):
            walk(x.a, into)
            divisors.append(x.b)
        elif invariant(x):
            factors.append(x)
        else:
            into.append(x)

    walk(body, rest)
    if not factors and not divisors and not sign:
        return None, body
    inner = None
    for x in rest:
        inner = x if inner is None else Binary("mul", inner, x, body.dtype)
    inner = inner if inner is not None else Const(1, body.dtype)

    def scale(total):
        out = total
        for f in factors:
            out = mul(out, f)
        for d in divisors:
            out = Binary("div", out, d, body.dtype)
        return neg(out) if sign else out
    return scale, inner
