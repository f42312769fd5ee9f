"""Reverse mode over the tensor DAG (`nf.grad`).

Tensors are visited consumers first. A tensor's adjoint is one new compute
summing the contributions of all its consumers; only tensors on a path
from the output to a wrt tensor get one. For each consumer T and each
read A[f(v)] in T's body, the contribution to dA[a] is the sum, over the
points v of T's iteration space with f(v) = a, of the read's partial
adjoint (rules.py) — the index map is solved exactly (index_solve.py), so
the sum runs over the points that really read A[a] and nothing else.
Max/min reductions pass their adjoint to the first selected element
(extremum.py); nested reductions are first lifted into computes of their
own (normalize.py). An operator may bring its own adjoint for an input
(`op.adjoint_rules`, a strided convolution's polyphase split): it replaces
the contribution of that input's reads. Every adjoint body is simplified (te.simplify).

Hands on: gradient Tensors, ordinary compute tensors.
"""
from ..errors import GradError
from ..te import dtype as dt
from ..te.arith import conjuncts, free_vars, is_index_expr
from ..te.expr import Binary, Const, Read, Reduce, Unary
from ..te.simplify import Structure, add, conjunction, merge_sums, mul, neg, simplify, where, zero
from ..te.scan import is_scan
from ..te.tensor import Tensor, compute
from ..te.visit import post_order, substitute, tensor_inputs, topo_tensors
from .extremum import argext, selected
from .index_solve import solve
from .normalize import normalize
from .rules import partials
from .scan_grad import visit_scan


def grad(output, wrt, head=None):
    """Gradients of `output` with respect to each tensor in `wrt`, as new tensors.

    `head` is the adjoint of `output` (a Tensor shaped like it, e.g. a
    placeholder for dL/d output); a 0-d output needs none (its adjoint is 1).
    A wrt tensor the output does not depend on — or an integer one — gets a
    zero gradient. Gradients are ordinary tensors: evaluate, build or
    differentiate them again.

    >>> x = nf.placeholder((3,), name="x")
    >>> loss = nf.compute((), lambda: nf.sum(x[k] * x[k], axis=k))   # k = nf.reduce_axis(3)
    >>> (dx,) = nf.grad(loss, [x])                                    # dx[i] = 2 * x[i]
    """
    if not isinstance(output, Tensor):
        raise GradError(f"nf.grad: output must be a Tensor, got {type(output).__name__}")
    wrts = [wrt] if isinstance(wrt, Tensor) else list(wrt)
    for w in wrts:
        if not isinstance(w, Tensor):
            raise GradError(f"nf.grad: wrt must be Tensors, got {type(w).__name__} ({w!r})")
    if not dt.is_float(output.dtype):
        raise GradError(f"nf.grad: output '{output.name}' is {output.dtype}; only float "
                        "outputs can be differentiated")
    if head is None:
        if output.ndim:
            raise GradError(
                f"nf.grad: output '{output.name}' has shape {output.shape}, not a scalar; "
                f"pass head=, the gradient flowing into it (a Tensor of shape {output.shape} "
                f"and dtype {output.dtype}, e.g. nf.placeholder({output.shape}, "
                f"'{output.dtype}')), or reduce the output to a 0-d loss first")
        seed = _Adjoint(None, output.dtype)
    else:
        if not isinstance(head, Tensor):
            raise GradError(f"nf.grad: head must be a Tensor shaped like output "
                            f"'{output.name}' {output.shape}, got {type(head).__name__}")
        if head.shape != output.shape or head.dtype != output.dtype:
            raise GradError(f"nf.grad: head '{head.name}' has shape {head.shape} and dtype "
                            f"{head.dtype}; expected those of output '{output.name}': "
                            f"{output.shape} {output.dtype}")
        seed = _Adjoint(head, output.dtype)
    return _Reverse(output, wrts, seed).run()


class _Adjoint:
    """The adjoint of a tensor: a Tensor, or (tensor None) the constant 1."""

    def __init__(self, tensor, dtype):
        self.tensor, self.dtype = tensor, dtype

    def at(self, idx):
        return self.tensor[tuple(idx)] if self.tensor is not None else Const(1, self.dtype)


class _Contribution:
    """One read A[indices] in a consumer: `adjoint` (an expression of the
    consumer's iteration variables `scope`) flows to A where `conds` hold."""

    def __init__(self, scope, indices, conds, adjoint):
        self.scope, self.indices, self.conds, self.adjoint = scope, indices, conds, adjoint

    def build(self, targets):
        """The contribution to dA at the IterVars `targets`, or None if there is none."""
        sol = solve(self.scope, self.indices, self.conds, targets)
        if sol is None:
            return None
        ranges = {t: (t.lo, t.hi - 1) for t in targets}
        ranges.update({w: (w.lo, w.hi - 1) for w in sol.axes})
        kept = []
        for c in sol.conds:
            c = simplify(c, ranges)
            if isinstance(c, Const):
                if not c.value:
                    return None
                continue
            kept.append(c)
        new = {id(w) for w in sol.axes}
        uses_axes = [any(id(v) in new for v in free_vars(c)) for c in kept]
        index = [is_index_expr(c) for c in kept]
        value = substitute(self.adjoint, sol.values)
        if sol.axes:
            data_w = conjunction([c for c, u, i in zip(kept, uses_axes, index) if u and not i])
            body = value if data_w is None else where(data_w, value, zero(value.dtype))
            value = Reduce("sum", body, sol.axes,
                           conjunction([c for c, u, i in zip(kept, uses_axes, index) if u and i]))
        data_a = conjunction([c for c, u, i in zip(kept, uses_axes, index) if not u and not i])
        if data_a is not None:
            value = where(data_a, value, zero(value.dtype))
        guard = conjunction([c for c, u, i in zip(kept, uses_axes, index) if not u and i])
        return value if guard is None else where(guard, value, zero(value.dtype))


def _rules(T, top, guards, lifted):
    """{id(input): rule} for the reads of T's body that an operator's own
    gradient replaces. `T.op.adjoint_rules` holds triples (input, rule,
    reduction): `rule(adjoint)` is the input's gradient through that
    reduction of T's body given the reduction's adjoint (a Tensor over T's
    axes), e.g. a strided convolution's polyphase input gradient
    (nn/polyphase.py), or None where the input gets nothing through T
    (softmax's row max, whose shift cancels). It applies where the
    reduction is T's whole value;
    where normalize lifted it into a compute of its own over the same axes
    (a bias added after the sum), that compute gets the rule."""
    entries = getattr(T.op, "adjoint_rules", ())
    for L in lifted:
        mine = [(x, f) for x, f, node in entries
                if getattr(L.op, "lifted_from", None) is node and L.ndim == T.ndim]
        if mine:
            L.op.adjoint_rules = tuple((x, f, L.op.body) for x, f in mine)
    return {id(x): f for x, f, node in entries if node is top and not guards}


class _Whole:
    """A whole tensor shaped like A added to dA: what an adjoint rule (see
    `_rules`) built for A, replacing the solver's contributions of its reads."""

    def __init__(self, tensor):
        self.tensor = tensor

    def build(self, targets):
        return self.tensor[tuple(targets)]


class _Reverse:
    def __init__(self, output, wrts, seed, roots=None):
        self.output, self.wrts, self.seed = output, wrts, seed
        self.order = topo_tensors(roots or [output])
        wrt_ids = {id(w) for w in wrts}
        self.dep = set()
        for t in self.order:
            if dt.is_float(t.dtype) and (id(t) in wrt_ids or self._depends(t)):
                self.dep.add(id(t))
        self.contribs, self.adjoints = {}, {}

    def _depends(self, t):
        return any(id(p) in self.dep for p in tensor_inputs(t))

    def run(self):
        for t in reversed(self.order):
            self._visit(t)
        return [self._result(w) for w in self.wrts]

    def _result(self, w):
        adj = self.adjoints.get(id(w))
        if adj is not None and adj.tensor is not None:
            return adj.tensor
        value = 1 if adj is not None else 0
        return compute(w.shape, lambda *i: Const(value, w.dtype), name=f"d{w.name}")

    def _visit(self, t):
        if id(t) not in self.dep:
            return
        adj = self.seed if t is self.output else self._collect(t)
        if is_scan(t):
            visit_scan(self, t, adj)
            return
        if adj is None:
            return
        self.adjoints[id(t)] = adj
        if t.is_compute and self._depends(t):
            self._backprop(t, adj)

    def _backprop(self, T, adj):
        guards, top, lifted = normalize(T)
        for L in lifted:
            if self._depends(L):
                self.dep.add(id(L))
        axes = list(T.op.axes)
        if isinstance(top, Reduce):
            scope = axes + list(top.axes)
            conds = guards + conjuncts(top.cond)
            if top.op in ("max", "min"):
                arg = argext(T, top, guards)
                conds += selected(arg[tuple(axes)], top.axes)
            root, value_of = top.body, (lambda n: n)
        else:
            scope, conds, root = axes, guards, top
            value = T[tuple(axes)]
            value_of = (lambda n: value if n is top else n)
        summed = isinstance(top, Reduce) and top.op == "sum"
        rules = _rules(T, top, guards, lifted) if adj.tensor is not None else {}
        for read, extra, adjoint in partials(root, adj.at(axes), value_of):
            if id(read.tensor) not in self.dep:
                continue
            if id(read.tensor) in rules:    # the operator's own gradient for this input
                whole = rules.pop(id(read.tensor))(adj.tensor)
                if whole is not None:   # None: the input gets nothing through T
                    self.contribs.setdefault(id(read.tensor), []).append(_Whole(whole))
                continue
            outside = summed and not extra and _outside(read, top.axes)
            factor = _factor_of(adjoint, root, top.axes) if outside else None
            if factor is not None:   # sum over R of (factor * summand) = factor * T[I]
                c = _Contribution(axes, read.indices, guards, mul(factor, T[tuple(axes)]))
            else:
                c = _Contribution(scope, read.indices, conds + list(extra), adjoint)
            self.contribs.setdefault(id(read.tensor), []).append(c)
        for L in lifted:
            self._visit(L)

    def _collect(self, A):
        """A's adjoint: one compute summing its contributions (None if all vanish)."""
        groups = _merge(self.contribs.pop(id(A), []))
        if not groups:
            return None

        def body(*targets):
            total = None
            for c in groups:
                part = c.build(targets)
                if part is not None:
                    total = part if total is None else add(total, part)
            return zero(A.dtype) if total is None else merge_sums(simplify(total))

        D = compute(A.shape, body, name=f"d{A.name}")
        b = D.op.body
        if isinstance(b, Const) and b.value == 0:
            return None
        if isinstance(b, Read) and b.tensor.shape == A.shape and b.tensor.dtype == A.dtype \
                and all(i is a for i, a in zip(b.indices, D.op.axes)):
            return _Adjoint(b.tensor, A.dtype)  # the adjoint is another tensor, unchanged
        return _Adjoint(D, A.dtype)


def _outside(read, axes):
    """True if the read's indices do not use the reduce `axes`."""
    ids = {id(a) for a in axes}
    return not any(id(v) in ids for i in read.indices for v in free_vars(i))


def _factor_of(adjoint, summand, axes):
    """F when `adjoint` is F * summand (up to sign) with F free of `axes`, else None."""
    ids = {id(a) for a in axes}
    factors, sign, hits = [], False, 0
    stack = [adjoint]
    while stack:
        e = stack.pop()
        if e is summand:
            hits += 1
        elif isinstance(e, Unary) and e.op == "neg":
            sign = not sign
            stack.append(e.a)
        elif isinstance(e, Binary) and e.op == "mul":
            stack += [e.a, e.b]
        elif any(id(v) in ids for v in free_vars(e)) or \
                any(isinstance(n, Reduce) for n in post_order(e)):
            return None
        else:
            factors.append(e)
    if hits != 1:
        return None
    out = Const(1, adjoint.dtype)
    for f in factors:
        out = mul(out, f)
    return neg(out) if sign else out


def _merge(contribs):
    """Merge contributions that read the same element under the same conditions."""
    structure, out, index = Structure(), [], {}
    for c in contribs:
        if isinstance(c, _Whole):
            out.append(c)
            continue
        k = (tuple(id(v) for v in c.scope), tuple(structure.key(i) for i in c.indices),
             tuple(sorted(structure.key(x) for x in c.conds)))
        if k in index:
            old = index[k]
            old.adjoint = add(old.adjoint, c.adjoint)
        else:
            index[k] = c
            out.append(c)
    return out
