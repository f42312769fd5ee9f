"""schedule/loop_fusion: sibling elementwise loops run as one loop, and the
transcendentals their bodies share computed once.

Stages computed at one another (`compute_at`) leave one inner loop per
stage -- per piece, after loop partitioning -- inside their common parallel
row loop. The backward of a recurrent cell evaluates the forward's sigmoids
and tanhs again in every gradient term: LLTM's cell update and its gradient
call exp, sigmoid and tanh 13 times per point where 4 distinct values exist.

* Fusing: consecutive loops (serial or vectorized) with the same constant
  trip count, whose bodies are stores only (no inner loops, no checked
  reads), run as one loop over the first one's range, each body with its
  variable shifted onto it (`dgates[i, 256 + t]` beside `c_new[i, t]`).
  Legal when no element a loop touches at iteration t is touched by a loop
  before it at a later iteration, one of the two touches a store (indices
  affine and equal but for the loop variable's coefficient and the
  constant; checked exactly): each iteration then reads what the loops
  before it wrote there, as before, and overwrites nothing they still read.
  Every dependence between the fused bodies then runs forward, from an
  earlier body at the same or an earlier iteration, so the fused loop is
  vectorized when each of its loops is: one already vectorized, or a serial
  one whose iterations touch no common element where one of them stores
  (`_independent`; a piece of a concatenation's gradient that loop
  partitioning freed of its checked reads). A serial loop that carries a
  dependence joins only serial loops, and the fused loop stays serial.
* Sharing: in a fused body that calls a transcendental, a value stored and
  read back later in the same iteration is kept in a scalar, and a call
  evaluated more than once on the same operands (the same buffers at the
  same elements) is computed once into a scalar. Calls under a select's
  branch stay where they are (the branch may guard its reads).

Every float operation keeps its operands and order: results are
bit-identical.

Hands on: a loop-IR statement with the same meaning (`fuse_loops`).
"""
from ..te import dtype as dt
from ..te.arith import linear_form
from ..te.expr import Binary, Const, Select, Unary
from ..te.visit import with_children
from .loop_ir import (Allocate, Blend, Buffer, CDiv, Check, For, Load, Seq, Store, expr_children,
                      map_body, map_expr, map_stmt, nodes)

SHARED_CALLS = ("exp", "log", "tanh", "sigmoid", "erf")   # worth a scalar when used twice
MAX_SCAN = 4096   # trip count up to which unequal strides are checked point by point


def fuse_loops(stmt):
    """`stmt` with its runs of fusable sibling loops fused (module docstring).

    >>> fuse_loops(Seq([For(s, 0, 128, "vectorized", Store(c, s, exp(x[s]))),
    ...                 For(u, 0, 128, "vectorized", Store(h, u, tanh(c[u])))]))
    ... # one loop over s: c[s] = exp(x[s]); h[s] = tanh(c[s])   # doctest: +SKIP
    """
    stmt = map_body(stmt, fuse_loops)
    return Seq(_fuse_runs(list(stmt.stmts))) if isinstance(stmt, Seq) else stmt


def _fuse_runs(stmts):
    out, run = [], []
    for s in stmts:
        moved = _joining(run, s) if run else None
        if moved is not None:
            run.append(moved)
            continue
        if run:
            out.append(_fused(run))
        run = [s] if _fusable(s) else []
        if not run:
            out.append(s)
    if run:
        out.append(_fused(run))
    return out


def _fusable(s):
    """A loop of stores over constant bounds, with no checked read."""
    if not (isinstance(s, For) and s.kind in ("serial", "vectorized") and s.unroll is None
            and s.reduction is None and isinstance(s.begin, Const)
            and isinstance(s.end, Const)):
        return False
    stores = s.body.stmts if isinstance(s.body, Seq) else (s.body,)
    return all(isinstance(st, Store) for st in stores) and not any(
        isinstance(n, Load) and n.checks for n in nodes(s.body))


def _trips(loop):
    return loop.end.value - loop.begin.value


def _shifted(loop, first):
    """`loop` with its variable replaced by first's variable plus the offset of
    their starts (so both run over first's range)."""
    shift = loop.begin.value - first.begin.value
    moved = first.var if shift == 0 else Binary(
        "add", first.var, Const(shift, dt.INDEX), dt.INDEX)
    body = map_stmt(loop.body, lambda n: moved if n is loop.var else n)
    return For(first.var, first.begin, first.end, loop.kind, body)


def _joining(run, s):
    """Loop `s` shifted onto run[0]'s range if it may join the fused `run`
    (loops already shifted): no element it touches at iteration t is touched
    by the run at a later iteration, one of the two touches a store. Else None."""
    first = run[0]
    if not _fusable(s) or _trips(s) != _trips(first) or _kind(run + [s]) is None:
        return None
    moved = _shifted(s, first)
    old = [a for loop in run for a in _accesses(loop.body)]
    for buf, stored, index in _accesses(moved.body):
        for buf_, stored_, index_ in old:
            if buf is buf_ and (stored or stored_) and \
                    _meets_later(index_, index, first.var, first.begin.value, _trips(first)):
                return None
    return moved


def _kind(loops):
    """The kind of the loop fusing `loops`: serial or vectorized where they are
    all of it; vectorized where each one is vectorized or independent; else
    None (a dependence-carrying serial loop and a vectorized one: not fused)."""
    kinds = {loop.kind for loop in loops}
    if len(kinds) == 1:
        return kinds.pop()
    if all(loop.kind == "vectorized" or _independent(loop) for loop in loops):
        return "vectorized"
    return None


def _independent(loop):
    """Whether no two iterations of `loop` touch one element where one of the
    touches is a store (no dependence carried from one iteration to another)."""
    touches = _accesses(loop.body)
    begin, trips = loop.begin.value, _trips(loop)
    return not any(buf is buf_ and (stored or stored_) and (
        _meets_later(index, index_, loop.var, begin, trips)
        or _meets_later(index_, index, loop.var, begin, trips))
        for n, (buf, stored, index) in enumerate(touches)
        for buf_, stored_, index_ in touches[n:])


def _accesses(body):
    """[(buffer, stored?, index)] of every load and store in a loop body."""
    return [(n.buffer, isinstance(n, Store), n.index) for n in nodes(body)
            if isinstance(n, (Load, Store))]


def _meets_later(early, late, var, begin, trips):
    """Whether index `early` (of a loop before) at some iteration names the
    element that index `late` names at an earlier iteration (var runs over
    [begin, begin + trips)). Both must be affine and equal but for var's
    coefficient and the constant; anything else counts as meeting."""
    fa, fb = linear_form(early), linear_form(late)
    if fa is None or fb is None:
        return True
    rest_a = {v: c for v, c in fa.terms.items() if v is not var}
    rest_b = {v: c for v, c in fb.terms.items() if v is not var}
    if rest_a != rest_b:
        return True
    ca, cb = fa.terms.get(var, 0), fb.terms.get(var, 0)
    if ca == cb:              # equal when t_a - t_b = (kb - ka) / c
        if ca == 0:
            return fa.const == fb.const and trips > 1
        d, r = divmod(fb.const - fa.const, ca)
        return r == 0 and 1 <= d < trips
    if trips > MAX_SCAN:
        return True
    last = {}                 # element -> the last iteration of `early` there
    for t in range(begin, begin + trips):
        last[ca * t + fa.const] = t
    return any(last.get(cb * t + fb.const, begin - 1) > t for t in range(begin, begin + trips))


def _fused(run):
    """One loop over run[0]'s range running the bodies of `run` in turn."""
    if len(run) == 1:
        return run[0]
    first = run[0]
    stores = [st for loop in run
              for st in (loop.body.stmts if isinstance(loop.body, Seq) else (loop.body,))]
    return For(first.var, first.begin, first.end, _kind(run), _share(stores))


# -- sharing values inside one fused body ------------------------------------------

def _share(stores):
    """The statements `stores` (one iteration of a fused loop), with stored
    values read back kept in scalars and repeated calls computed once."""
    if not any(isinstance(n, Unary) and n.op in SHARED_CALLS
               for st in stores for n in nodes(st)):
        return Seq(stores)
    scalars = []
    stores = _forward(stores, scalars)
    stores = _common_calls(stores, scalars)
    body = Seq(stores)
    for b in reversed(scalars):
        body = Allocate(b, body)
    return body


def _scalar(dtype):
    return Buffer(dtype, (1,), "stack", "shared")


def _zero():
    return Const(0, dt.INDEX)


def _forward(stores, scalars):
    """Stores whose element a later store reads: the value goes to a scalar
    first, and the later reads (until the element is stored again) read it."""
    keys = [(st.buffer, _index_key(st.index)) for st in stores]
    read_later = [any(k in _loads_of(later) for later in stores[n + 1:])
                  for n, k in enumerate(keys)]
    held, out = {}, []
    for st, key, keep in zip(stores, keys, read_later):
        value = map_expr(st.value, lambda e: _held_load(e, held))
        held.pop(key, None)
        if keep:
            b = _scalar(st.buffer.dtype)
            scalars.append(b)
            out.append(Store(b, _zero(), value))
            value = Load(b, _zero())
            held[key] = b
        out.append(Store(st.buffer, st.index, value))
    return out


def _loads_of(store):
    return {(n.buffer, _index_key(n.index)) for n in nodes(store.value) if isinstance(n, Load)}


def _held_load(e, held):
    if isinstance(e, Load):
        b = held.get((e.buffer, _index_key(e.index)))
        if b is not None:
            return Load(b, _zero())
    return e


def _common_calls(stores, scalars):
    """Calls (SHARED_CALLS) evaluated twice or more on equal operands, outside
    select branches: each computed once into a scalar, before its first use."""
    counts = {}
    for st in stores:
        for e in _unconditional(st.value):
            if isinstance(e, Unary) and e.op in SHARED_CALLS:
                k = _key(e)
                counts[k] = counts.get(k, 0) + 1
    shared = {k for k, c in counts.items() if c > 1}
    if not shared:
        return stores
    made, out = {}, []

    def rebuild(e):
        if isinstance(e, Select):
            return Select(rebuild(e.cond), e.t, e.f)
        k = _key(e) if isinstance(e, Unary) and e.op in SHARED_CALLS else None
        if k not in shared:
            return _with_parts(e, [rebuild(c) for c in expr_children(e)])
        if k not in made:          # its operands first (a shared call inside a shared call)
            made[k] = b = _scalar(e.dtype)
            value = _with_parts(e, [rebuild(c) for c in expr_children(e)])
            scalars.append(b)
            out.append(Store(b, _zero(), value))
        return Load(made[k], _zero())

    for st in stores:
        out.append(Store(st.buffer, st.index, rebuild(st.value)))
    return out


def _unconditional(e):
    """The sub-expressions of `e` evaluated wherever `e` is (a select's
    branches left out), `e` included."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        stack.extend([n.cond] if isinstance(n, Select) else expr_children(n))


def _with_parts(e, parts):
    """`e` with its direct sub-expressions (in expr_children's order) replaced
    by `parts`."""
    if all(p is c for p, c in zip(parts, expr_children(e))):
        return e
    if isinstance(e, Load):
        return Load(e.buffer, parts[0], [Check(c.var, p, c.extent, c.site)
                                         for c, p in zip(e.checks, parts[1:])])
    if isinstance(e, CDiv):
        return CDiv(e.op, parts[0], parts[1])
    if isinstance(e, Blend):
        return Blend(*parts)
    return with_children(e, parts)


# -- structural keys -----------------------------------------------------------------

def _index_key(index):
    """Equal for two flat indices that are the same affine function (whatever
    the order of their terms); structural otherwise."""
    form = linear_form(index)
    if form is None:
        return ("expr", _key(index))
    return ("affine", form.const, frozenset((id(v), c) for v, c in form.terms.items()))


def _key(e):
    """Equal for structurally equal expressions (loads compared by buffer and
    index key, variables by identity)."""
    if isinstance(e, Load):
        return ("load", id(e.buffer), _index_key(e.index))
    if isinstance(e, Const):
        return ("const", e.dtype, repr(e.value))
    kids = tuple(_key(c) for c in expr_children(e))
    if not kids:
        return ("leaf", id(e))
    return (type(e).__name__, getattr(e, "op", None), e.dtype, kids)
