"""graph/split: rewrite computes so that each stage holds at most one
reduction over its whole output space -- the one the schedule tiles and
register-blocks (schedule/stage.py's "main reduction"). Any other such
reduction would be recomputed as a scalar loop at every output point.

Four rewrites, each exact up to the order of float additions (and, like
the simplifier, assuming finite values where a product with 0 is dropped):
* constant propagation: a read of a constant compute (a zero initial state)
  becomes the constant and the body is simplified -- `sum_k 0 * U[j, k]`
  is 0, not a matrix product;
* merging: sums over equal ranges added together become one sum
  (te.simplify.merge_sums): `sum_k W[j, k] x[i, k] + sum_k U[j, k] h[i, k]`
  is one reduction doing two products per step;
* index-set splitting: a compute whose body adds terms guarded by intervals
  of one output axis -- the gradient of a weight read in column blocks,
  `where(j < 128, sum(...), 0) + where(j >= 128, sum(...), 0)`, or with the
  bounds on a quotient (`(j - 128) // 32 >= 0`, attention's q/k/v columns
  side by side in one projection, differentiated) -- is computed
  as one compute per interval, free of the guards, and stitched back by an
  injective concatenation that fusion inlines into its readers;
* hoisting: when a body still adds several reductions over the whole output
  space (`sum_k P[j, k] s[i, k] + sum_m R[j, m] h[i, m]`, different
  ranges), all but the largest become computes of their own, read back
  elementwise.

Hands on: the rewritten outputs and {id(original): rewritten} (`split_stages`).
"""
import math

from ..te.arith import conjuncts, free_vars, linear_form
from ..te.divmod import affine_comparison
from ..te.expr import Binary, Cast, Const, Read, Reduce, Select, Unary
from ..te.simplify import merge_sums, simplify
from ..te.tensor import ComputeOp, Tensor, compute
from ..te.visit import children, substitute, topo_tensors, transform

MAX_PIECES = 4   # intervals an index-set split may cut an axis into


def split_stages(outputs):
    """(rewritten `outputs`, {id(original compute): rewritten tensor}).
    Tensors nothing changes keep their identity.

    >>> h = nf.compute((4, 8), lambda i, j: nf.sum(A[i, k] * B[k, j], axis=k)
    ...                + nf.sum(C[i, m] * D[m, j], axis=m))          # k, m of different lengths
    >>> outs, mapping = split_stages([h]); len(nf.graph.kernels_for(outs))
    2
    """
    new, folded = {}, []

    def reread(n):
        if not isinstance(n, Read) or not n.tensor.is_compute:
            return n
        src = new.get(id(n.tensor), n.tensor)
        if isinstance(src.op.body, Const):
            folded.append(n)
            return src.op.body
        return n if src is n.tensor else Read(src, n.indices)

    for t in topo_tensors(list(outputs)):
        if not t.is_compute:
            continue
        folded.clear()
        body = transform(t.op.body, reread)
        if folded:
            body = simplify(body)
        merged = merge_sums(body)
        nt = _rewrite(t, merged)
        if nt is None:
            nt = t if merged is t.op.body else _like(t, t.op.axes, merged)
        new[id(t)] = nt
    return [new.get(id(t), t) for t in outputs], new


def _like(t, axes, body):
    return Tensor(t.shape, t.dtype, t.name, ComputeOp(axes, body))


def _rewrite(t, body):
    """`t` over `body`, index-set split or with reductions hoisted; None if neither applies."""
    pieces = _index_split(t, body)
    if pieces is not None:
        return pieces
    return _hoist(t, body)


# index-set splitting ---------------------------------------------------------

def _guard_bounds(cond, axis):
    """(lo, hi), inclusive, that `cond` restricts `axis` to, if `cond` is a
    conjunction of bounds on `axis` alone; else None."""
    lo, hi = axis.lo, axis.hi - 1
    for part in conjuncts(cond):
        part = affine_comparison(part)      # (j - 128) // 32 >= 0: j - 128 >= 0
        if not isinstance(part, Binary) or part.op not in ("le", "lt", "ge", "gt"):
            return None
        diff = _difference(part)
        if diff is None or set(diff.terms) != {axis}:
            return None
        coef, const = diff.terms[axis], diff.const
        if coef not in (1, -1):
            return None
        # part is `coef * axis + const (op) 0`: a bound on axis, flipped when coef is -1
        op = part.op if coef == 1 else {"le": "ge", "lt": "gt", "ge": "le", "gt": "lt"}[part.op]
        bound = -const * coef
        if op == "le":
            hi = min(hi, bound)
        elif op == "lt":
            hi = min(hi, bound - 1)
        elif op == "ge":
            lo = max(lo, bound)
        else:
            lo = max(lo, bound + 1)
    return lo, hi


def _difference(cmp):
    a, b = linear_form(cmp.a), linear_form(cmp.b)
    return None if a is None or b is None else a - b


def _index_split(t, body):
    """Pieces over intervals of one axis plus their concatenation, when the
    body holds several reductions and selects that bound that axis."""
    outer = _outer_nodes(body)
    if sum(isinstance(n, Reduce) for n in outer) < 2:
        return None
    selects = [n for n in outer if isinstance(n, Select)]
    for d, axis in enumerate(t.op.axes):
        cuts = {axis.lo, axis.hi}
        for sel in selects:
            bounds = _guard_bounds(sel.cond, axis)
            if bounds is not None:
                cuts |= {c for c in (bounds[0], bounds[1] + 1) if axis.lo < c < axis.hi}
        cuts = sorted(cuts)
        if 2 < len(cuts) <= MAX_PIECES + 1:
            return _concat(t, d, [_piece(t, body, d, lo, hi)
                                  for lo, hi in zip(cuts, cuts[1:])], cuts)
    return None


def _outer_nodes(e):
    """Nodes of `e` outside reductions (reductions themselves included)."""
    out, seen, stack = [], set(), [e]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        out.append(n)
        if not isinstance(n, Reduce):
            stack.extend(children(n))
    return out


def _piece(t, body, d, lo, hi):
    """`t` restricted to [lo, hi) on axis d, its guards decided there."""
    axis = t.op.axes[d]
    part = simplify(body, {axis: (lo, hi - 1)})
    shape = t.shape[:d] + (hi - lo,) + t.shape[d + 1:]

    def fn(*idx):
        shifted = list(idx)
        shifted[d] = idx[d] + lo if lo else idx[d]
        return merge_sums(simplify(substitute(part, dict(zip(t.op.axes, shifted)))))
    piece = compute(shape, fn, name=f"{t.name}.{lo}_{hi}")
    return _hoist(piece, piece.op.body) or piece


def _concat(t, d, pieces, cuts):
    def fn(*idx):
        out = None
        for piece, lo in reversed(list(zip(pieces, cuts))):
            index = list(idx)
            index[d] = idx[d] - lo if lo else idx[d]
            value = piece[tuple(index)]
            out = value if out is None else Select(idx[d] < lo + piece.shape[d], value, out)
        return out
    return compute(t.shape, fn, name=t.name)


# hoisting ----------------------------------------------------------------------

def _arith_nodes(e):
    """Nodes reachable from `e` through arithmetic only (not into reductions or selects)."""
    out, stack = [], [e]
    while stack:
        n = stack.pop()
        out.append(n)
        if isinstance(n, (Binary, Unary, Cast)):
            stack.extend((n.a, n.b) if isinstance(n, Binary) else (n.a,))
    return out


def _hoist(t, body):
    """`t` with every whole-space reduction of `body` but the largest moved
    into a compute of its own; None when there are fewer than two."""
    axes = set(t.op.axes)
    full = []
    for n in _arith_nodes(body):
        if isinstance(n, Reduce) and axes <= set(free_vars(n)) and all(n is not f for f in full):
            full.append(n)
    if len(full) < 2:
        return None
    full.sort(key=lambda r: -math.prod(a.extent for a in r.axes))
    hoisted = {}
    for n, red in enumerate(full[1:]):
        h = compute(t.shape, lambda *idx, red=red: substitute(red, dict(zip(t.op.axes, idx))),
                    name=f"{t.name}.part{n}")
        hoisted[id(red)] = Read(h, t.op.axes)
    return _like(t, t.op.axes, transform(body, lambda e: hoisted.get(id(e), e)))

