"""Construction-time checks of a compute body: index variables belong to this
compute, reduce axes appear only inside the reduction that binds them, and
no read that every point of the compute evaluates reaches outside its tensor.

A read is evaluated at every point unless it stands in a branch of
`nf.where` or in the body of a reduction with a condition; such guarded
reads (padding) may reach outside and are checked where they run (at run
time, for the points their conditions select). An unguarded read with an
affine index is checked here: an affine form over the box of its variables
takes its extreme values at corners of the box, so when its interval leaves
[0, size) some point of the compute reads outside -- rejected now, naming
the tensor, the dimension and the range. Gathers (an index read from a
tensor) are checked at run time.

Hands on: nothing; raises ExpressionError / OutOfBoundsError on a malformed body.
"""
from ..errors import ExpressionError, OutOfBoundsError
from .arith import form_interval, linear_form
from .expr import IterVar, Read, Reduce, Select
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


def check_reads(body, what):
    """Raise OutOfBoundsError if an unguarded affine read of `body` reaches
    outside its tensor at some point of the compute (see the module docstring).

    >>> compute((9,), lambda d: x[d + 1])        # x of size 9   # doctest: +SKIP
    OutOfBoundsError: compute: read x[(d + 1)] reaches index 9 in dimension 0 ...
    """
    stack = [body]
    while stack:
        e = stack.pop()
        if isinstance(e, Select):
            stack.append(e.cond)          # the branches are guarded by it
            continue
        if isinstance(e, Reduce) and e.cond is not None:
            stack.append(e.cond)
            continue
        if isinstance(e, Read):
            _check_read(e, what)
        stack.extend(children(e))


def _check_read(read, what):
    for d, index in enumerate(read.indices):
        form = linear_form(index)
        if form is None or any(v.extent <= 0 for v in form.terms):
            continue                     # a gather, or a point set with nothing in it
        span = form_interval(form)
        size = read.tensor.shape[d]
        if span is None or (span[0] >= 0 and span[1] < size):
            continue
        bad = span[1] if span[1] >= size else span[0]
        where = "entirely" if span[0] >= size or span[1] < 0 else "partly"
        raise OutOfBoundsError(
            f"{what}: read {read.tensor.name}[{', '.join(map(repr, read.indices))}] reaches "
            f"index {bad} in dimension {d} of tensor '{read.tensor.name}' (size {size}): its "
            f"index range [{span[0]}, {span[1]}] lies {where} outside [0, {size - 1}]; "
            "narrow the compute's range or guard the read with nf.where")
