"""The input gradient of a max pooling: first-maximum positions, then a gather.

Derived by the index solver, dx of `y = max over a window` costs two
passes over every window in the backward (one finding the first element
equal to the maximum, as int64, vectorised across the batch through packed
transposed copies of x and y) and a gather over the windows that can
contain an input point whose loop bounds move with the point and whose
position test divides and takes remainders of int64 positions (max_pool2d
3x3/2, 64ch 112x112, batch 8: 0.3 GB/s against torch's 1.8).

Here, as the pooling's own adjoint rule (autodiff/reverse.py, `_rules`):
* `window_argmax`: A[o] = the row-major position in o's window of its first
  element attaining y[o] (torch's rule: the first maximum wins, the whole
  gradient goes to it; an element is "below" only if it compares less, so
  a NaN attains -- where the maximum itself is NaN, the window's first
  element gets the gradient, where torch picks its last NaN), int32, one
  `min` reduction over the window beside y's own, of position + window
  size * (element below the maximum) -- arithmetic that vectorises, where
  an int select stays a branch;
* `max_input_grad`: for each input point, the windows that can hold it,
  enumerated as a fixed unrolled list per dimension -- undilated:
  o = (i + p) // s - j, j < ceil(k / s), at window position
  (i + p) % s + s*j; dilated: one candidate per window position r, with
  o = (i + p - d*r) / s where s divides it: dx[i] = sum over candidates of
  where(A[o] == position, g[o], 0). Per input point that is ceil(k/s)^nd
  candidates (4 for 3x3/2) with no reduction loop around them. A candidate
  that does not hold the point (o outside the output, a position past the
  window, s not dividing) reads at o clamped into the output and compares
  with position + window size, which no A equals: no select on an index
  condition is left, so loop partitioning cuts nothing and the point loop
  vectorises as one loop (gathers). Guarding with the conditions instead
  left edge loops of one iteration before each row, after which gcc's PRE
  blocked vectorising the row: 25% slower (dx alone, 8x64x112x112, loaded
  machine, A/B alternated).

nf.flops counts this gradient at about 2.2x the forward (3x3/2; the
solver's form: 1.1x): the first-maximum pass is 1x, and the model counts
every candidate term's add, its data condition not being an affine one-hot
it could count exactly. Measured, the step it replaces ran 2-3x slower.

Adaptive max pooling whose windows do not tile the input evenly, and
windows with more than MAX_CANDIDATES candidates per point, keep the
solver's gradient.

Hands on: `attach`, which puts the rule on a max pooling's compute.
"""
import itertools
import math

from .. import te
from .common import affine, conjunction

MAX_CANDIDATES = 64   # unrolled windows per input point above which the solver's form is kept
INDEX_DTYPE = "int32"
_NONE = 2 ** 31 - 1   # no element attains the maximum (never, for a window of real numbers)


def attach(y, x, geo):
    """Give the max pooling `y` of `x` with `_Geometry` `geo` (kernel k,
    stride s, padding p, dilation d, input sizes, output sizes per window
    dimension) its gather input gradient, where it applies."""
    if math.prod(_count(geo, d) for d in range(len(geo.k))) > MAX_CANDIDATES:
        return
    y.op.adjoint_rules = ((x, lambda g: max_input_grad(g, x, y, geo), y.op.body),)


def window_argmax(x, y, geo):
    """A[I, o]: the row-major position inside window o of the first element
    of x not below y[I, o].

    >>> A = window_argmax(x, nf.nn.max_pool2d(x, 3, 2, 1), geo)   # doctest: +SKIP
    """
    nd = len(geo.k)
    axes = geo.axes()
    strides, size = _strides(geo.k), math.prod(geo.k)

    def body(*idx):
        pos, cond = geo.window(idx[-nd:], axes)
        v, best = x[idx[:-nd] + pos], y[idx]
        flat = te.cast(affine(*zip(axes, strides)), INDEX_DTYPE)
        # flat where v attains the maximum, flat + size where it is below it:
        # arithmetic, not a select, so the window loop vectorises
        missed = te.cast(v < best, INDEX_DTYPE) * size
        return te.min(guarded(flat + missed, cond, _NONE), axis=axes)

    return te.compute(y.shape, body, name=f"arg{y.name}")


def max_input_grad(g, x, y, geo):
    """dx of the max pooling y of x given its output gradient g (all of g's
    gradient at each window's first maximum, as torch's max_pool backward).

    >>> dx = max_input_grad(g, x, nf.nn.max_pool2d(x, 3, 2, 1), geo)   # doctest: +SKIP
    """
    nd = len(geo.k)
    arg = window_argmax(x, y, geo)
    strides, size = _strides(geo.k), math.prod(geo.k)

    def body(*idx):
        lead, point = idx[:-nd], idx[-nd:]
        total = None
        per_dim = [_candidates(geo, d, point[d]) for d in range(nd)]
        for combo in itertools.product(*per_dim):
            outs = tuple(_clamp(o, geo.out[d]) if conds else o
                         for d, (o, _, conds) in enumerate(combo))
            flat = affine(*((c[1], st) for c, st in zip(combo, strides)))
            flat = te.cast(flat, INDEX_DTYPE) if not isinstance(flat, int) else flat
            ok = conjunction([cond for c in combo for cond in c[2]])
            if ok is not None:    # a window that does not hold the point: never equal
                flat = flat + (1 - te.cast(ok, INDEX_DTYPE)) * size
            term = te.where(arg[lead + outs] == flat, g[lead + outs], 0.0)
            total = term if total is None else total + term
        return total

    return te.compute(x.shape, body, name=f"d{x.name}")


def _clamp(o, n):
    """o clamped into [0, n): an index read in bounds everywhere, so the
    select on it evaluates both sides branch-free (schedule/speculate.py)."""
    return te.minimum(te.maximum(o, 0), n - 1)


def guarded(value, cond, outside):
    """`value` where `cond` holds (a window position inside the input), else
    `outside`; just `value` when every position is inside (cond None)."""
    return value if cond is None else te.where(cond, value, outside)


def _count(geo, d):
    """How many windows of dimension d `_candidates` lists per input point."""
    return -(-geo.k[d] // geo.s[d]) if geo.d[d] == 1 and geo.s[d] > 1 else geo.k[d]


def _candidates(geo, d, i):
    """[(o, r, conds)]: the windows o of dimension d that may hold input
    position i (an index expression), at window position r, where all of
    `conds` hold (the first conditions bound o to the output)."""
    k, s, p, dil, size, out = geo.k[d], geo.s[d], geo.p[d], geo.d[d], geo.sizes[d], geo.out[d]
    found = []
    if dil == 1 and s > 1:
        for j in range(-(-k // s)):
            conds = []
            # o = (i + p) // s - j >= 0  <=>  i >= s*j - p
            if s * j - p > 0:
                conds.append(i >= s * j - p)
            # o <= out - 1  <=>  i + p <= s*(out + j) - 1
            if s * (out + j) - 1 - p < size - 1:
                conds.append(i <= s * (out + j) - 1 - p)
            shifted = affine((i, 1), const=p)
            phase = shifted % s
            if k - s * j < s:      # r = phase + s*j < k
                conds.append(phase < k - s * j)
            o = affine((shifted // s, 1), const=-j)
            found.append((o, affine((phase, 1), const=s * j), conds))
        return found
    for r in range(k):
        conds = []
        at = affine((i, 1), const=p - dil * r)       # s * o when s divides it
        if dil * r - p > 0:
            conds.append(i >= dil * r - p)
        if s * (out - 1) - p + dil * r < size - 1:
            conds.append(i <= s * (out - 1) - p + dil * r)
        if s > 1:
            conds.append(at % s == 0)
        found.append((at // s if s > 1 else at, r, conds))
    return found


def _strides(ks):
    return [math.prod(ks[j + 1:]) for j in range(len(ks))]
