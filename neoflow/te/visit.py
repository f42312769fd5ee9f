"""Traversals over expressions and the tensor DAG: children, rebuilding with
new children, substitution, the tensors an expression reads, and a
topological order of the tensors behind a set of outputs.

Hands on: helpers every later stage uses to walk what `te` builds.
"""
from .expr import Binary, Cast, Read, Reduce, Select, Unary
from .random import Random


def children(e):
    """The direct sub-expressions of `e`, in a fixed order."""
    if isinstance(e, Unary) or isinstance(e, Cast):
        return (e.a,)
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, Read):
        return e.indices
    if isinstance(e, Reduce):
        return (e.body,) if e.cond is None else (e.body, e.cond)
    if isinstance(e, Random):
        return e.args
    return ()


def with_children(e, new):
    """`e` rebuilt over `new` children (same node if nothing changed)."""
    old = children(e)
    if all(a is b for a, b in zip(old, new)):
        return e
    if isinstance(e, Unary):
        return Unary(e.op, new[0], e.dtype)
    if isinstance(e, Cast):
        return Cast(e.dtype, new[0])
    if isinstance(e, Binary):
        return Binary(e.op, new[0], new[1], e.dtype)
    if isinstance(e, Select):
        return Select(*new)
    if isinstance(e, Read):
        return Read(e.tensor, new)
    if isinstance(e, Reduce):
        return Reduce(e.op, new[0], e.axes, new[1] if len(new) > 1 else None)
    if isinstance(e, Random):
        return Random(e.dtype, *new)
    raise TypeError(f"{type(e).__name__} has no children")


def post_order(e):
    """Every node under `e` (shared sub-trees once), children before parents."""
    seen, out, stack = set(), [], [(e, False)]
    while stack:
        node, done = stack.pop()
        if done:
            out.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(children(node)))
    return out


def transform(e, fn):
    """Rebuild `e` bottom-up; `fn(node_with_new_children)` returns a replacement
    (or the node itself). Shared sub-trees are transformed once."""
    memo = {}
    for node in post_order(e):
        rebuilt = with_children(node, [memo[id(c)] for c in children(node)])
        memo[id(node)] = fn(rebuilt)
    return memo[id(e)]


def substitute(e, mapping):
    """Replace leaves (IterVars, by identity) according to `mapping`."""
    if not mapping:
        return e
    return transform(e, lambda n: mapping.get(n, n))


def reads(e):
    """All Read nodes under `e`."""
    return [n for n in post_order(e) if isinstance(n, Read)]


def tensor_inputs(t):
    """The tensors a compute tensor reads directly (no duplicates, in order);
    for a scan result (te/scan.py), its inits and the tensors its step reads."""
    if not t.is_compute:
        return list(getattr(t.op, "inputs", ()))
    seen, out = set(), []
    for r in reads(t.op.body):
        if id(r.tensor) not in seen:
            seen.add(id(r.tensor))
            out.append(r.tensor)
    return out


def topo_tensors(outputs):
    """All tensors the outputs depend on (themselves included), producers first."""
    order, state = [], {}
    for root in outputs:
        stack = [(root, False)]
        while stack:
            t, done = stack.pop()
            if done:
                state[id(t)] = 2
                order.append(t)
                continue
            if id(t) in state:
                continue
            state[id(t)] = 1
            stack.append((t, True))
            stack.extend((p, False) for p in reversed(tensor_inputs(t)) if id(p) not in state)
    return order
