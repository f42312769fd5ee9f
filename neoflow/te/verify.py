"""Construction-time checks of a compute body: index variables belong to this
compute, reduce axes appear only inside the reduction that binds them.

Hands on: nothing; raises ExpressionError on a malformed body.
"""
from ..errors import ExpressionError
from .expr import IterVar, Reduce
from .visit import children


def check_body(body, axes, what):
    """Raise ExpressionError unless every IterVar in `body` is one of `axes`
    or a reduce axis used inside the reduction that binds it."""
    own = {id(a) for a in axes}

    def walk(e, bound):
        if isinstance(e, IterVar):
            if e.kind == "spatial" and id(e) not in own:
                raise ExpressionError(
                    f"{what}: index variable '{e.name}' belongs to another compute; "
                    "use this compute's own lambda arguments")
            if e.kind == "reduce" and id(e) not in bound:
                raise ExpressionError(
                    f"{what}: reduce axis '{e.name}' is used outside a reduction over it; "
                    f"wrap the expression in nf.sum/nf.max/nf.min(..., axis={e.name})")
            return
        if isinstance(e, Reduce):
            again = [a.name for a in e.axes if id(a) in bound]
            if again:
                raise ExpressionError(
                    f"{what}: reduce axis '{again[0]}' is reduced twice in nested reductions")
            bound = bound | {id(a) for a in e.axes}
        for c in children(e):
            walk(c, bound)

    walk(body, frozenset())
