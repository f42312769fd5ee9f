"""einsum: torch.einsum's equations as one compute.

Every operand's subscripts name its dimensions; the output holds the
letters given after `->` (implicit form: each letter used once, in
alphabetical order) and a sum runs over every other letter. So any
equation is one compute: a product of one read per operand, summed over
the reduce axes. `...` stands for the same broadcast dimensions in every
operand (aligned from the right) and in the output (summed where the
output omits it); a dimension of size 1 broadcasts, as in torch.

Hands on: one compute Tensor.
"""
import string

from .. import te
from ..errors import NeoFlowError, ShapeError
from .common import check_float, check_same_dtype

__all__ = ["einsum"]

_LETTERS = set(string.ascii_letters)


def einsum(equation, *operands):
    """torch.einsum: `equation` such as "bij,bjk->bik" over the operands
    (given one by one or as one list).

    >>> a = nf.placeholder((2, 3, 4), name="a"); b = nf.placeholder((2, 4, 5), name="b")
    >>> nf.nn.einsum("bij,bjk->bik", a, b).shape
    (2, 3, 5)
    >>> nf.nn.einsum("ii", nf.placeholder((3, 3), name="m")).shape   # the trace
    ()
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str):
        raise NeoFlowError(f"einsum: equation must be a string, got {equation!r}")
    if not operands:
        raise NeoFlowError("einsum: needs at least one operand")
    for n, t in enumerate(operands):
        check_float(t, "einsum", f"operands[{n}]")
    check_same_dtype("einsum", "operands[0]", operands[0],
                     **{f"operands[{n}]": t for n, t in enumerate(operands[1:], 1)})
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise NeoFlowError(f"einsum: equation {equation!r} has {len(terms)} operand "
                           f"subscript(s) but {len(operands)} operand(s) were given")
    labels = [_labels(_subscripts(term, equation, f"operand {n}"), t, n, term)
              for n, (term, t) in enumerate(zip(terms, operands))]
    sizes = _sizes(labels, operands, equation)
    out = _output(rhs, arrow, labels, equation)
    axes = {lb: te.reduce_axis(sizes[lb], name=lb if isinstance(lb, str) else f"e{lb[1]}")
            for lb in sorted({lb for ls in labels for lb in ls if lb not in out}, key=str)
            if sizes[lb] > 1}

    def body(*idx):
        env = dict(zip(out, idx))
        env.update(axes)
        prod = None
        for ls, t in zip(labels, operands):
            read = t[tuple(0 if n == 1 else env.get(lb, 0) for lb, n in zip(ls, t.shape))]
            prod = read if prod is None else prod * read
        return te.sum(prod, axis=list(axes.values())) if axes else prod

    return te.compute(tuple(sizes[lb] for lb in out), body, name="einsum")


def _labels(sub, t, n, term):
    """One label per dimension of operand `t`: its letter, or ('...', k) for
    the k-th '...' dimension counted from the right."""
    named = sum(1 for s in sub if s != "...")
    if named > t.ndim or ("..." not in sub and named != t.ndim):
        raise ShapeError(f"einsum: operand {n} '{t.name}' has {t.ndim} dimension(s) "
                         f"{t.shape} but its subscripts {term!r} name {named}")
    out = []
    for s in sub:
        if s == "...":
            k = t.ndim - named
            out.extend(("...", k - 1 - j) for j in range(k))
        else:
            out.append(s)
    return out


def _sizes(labels, operands, equation):
    """Each label's size; sizes of 1 broadcast (as in torch), others must agree."""
    sizes = {}
    for n, (ls, t) in enumerate(zip(labels, operands)):
        for d, (lb, size) in enumerate(zip(ls, t.shape)):
            old = sizes.get(lb, 1)
            if old != size and 1 not in (old, size):
                what = f"subscript '{lb}'" if isinstance(lb, str) else "a '...' dimension"
                raise ShapeError(f"einsum: {what} of {equation!r} has size {old} in one "
                                 f"operand but {size} in dimension {d} of operand {n} "
                                 f"'{t.name}'")
            sizes[lb] = max(old, size)
    return sizes


def _subscripts(term, equation, what):
    """A term as a list of letters and '...'."""
    out, i = [], 0
    while i < len(term):
        if term.startswith("...", i):
            if "..." in out:
                raise NeoFlowError(f"einsum: {what} of {equation!r} has '...' twice")
            out.append("...")
            i += 3
        elif term[i] in _LETTERS:
            out.append(term[i])
            i += 1
        else:
            raise NeoFlowError(f"einsum: invalid subscript {term[i]!r} in {what} of "
                               f"{equation!r}; expected letters, '...', ',' and '->'")
    return out


def _output(rhs, arrow, labels, equation):
    """The output's labels: as written after '->', or (implicit) the '...'
    dimensions then every letter used once, in alphabetical order."""
    used = [lb for ls in labels for lb in ls]
    ell = sorted({lb for lb in used if not isinstance(lb, str)}, key=lambda lb: -lb[1])
    if not arrow:
        return ell + sorted(s for s in set(used) if isinstance(s, str) and used.count(s) == 1)
    out = []
    for s in _subscripts(rhs, equation, "the output"):
        if s == "...":
            out.extend(ell)
            continue
        if s not in used:
            raise NeoFlowError(f"einsum: output subscript '{s}' of {equation!r} appears in no "
                               "operand")
        if s in out:
            raise NeoFlowError(f"einsum: output subscript '{s}' appears twice in {equation!r}")
        out.append(s)
    return out
