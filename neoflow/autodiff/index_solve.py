"""Solving a read's integer index map: for a read `A[f(v)]` made at the
iteration points v of a compute (its output indices and reduce axes), find,
for every index `a` of A, the points with f(v) = a.

Each index dimension gives an equation. `u // K` and `u % K` become
auxiliary unknowns q, r with u = K*q + r and 0 <= r < K. A dimension whose
terms form a mixed radix (c*r*r + (h % r)*r + (w % r), or 3*i + k with k < 3)
is split into one equation per digit, so reshapes and pixel shuffles solve
exactly. The integer system is then brought to Hermite normal form by
unimodular column operations (x = U y): pivots with coefficient +-1 are
plain substitutions; otherwise extended-Euclid steps leave one pivot g per
equation and give the divisibility condition `b % g == 0` (strided and
dilated convolutions). Unknowns without a pivot are free: they become new
reduce axes, bounded through y = U^-1 x and narrowed by the constraints.
Index dimensions that are not affine in this sense (a gather `idx[i]`, a
product of variables) stay as conditions `f_d(v) == a_d`.

Hands on: a `Solution` (values of the iteration variables in terms of the
adjoint's indices and the new axes, the new axes, and the conditions).
"""
from ..te import dtype as dt
from ..te.arith import form_interval, is_index_expr, linear_form, narrow
from ..te.expr import Binary, Const, IterVar, binary
from ..te.simplify import Structure
from ..te.visit import substitute

_ROUNDS = 8  # rounds of constraint propagation for the ranges of free variables


class Solution:
    """The points v with f(v) = a: `values` maps each iteration variable to an
    expression of the targets `a` and the new reduce `axes`; the points are
    those where every condition in `conds` holds."""

    def __init__(self, values, axes, conds):
        self.values, self.axes, self.conds = values, axes, conds


def solve(scope, indices, conds, targets):
    """Solve `indices` (expressions of the IterVars `scope`) = `targets`.

    `conds` restrict the points (expressions of `scope`); `targets` are the
    adjoint's IterVars, one per index. Returns a Solution, or None when no
    point ever reads the tensor.

    >>> s = solve([i, k], [2 * i + k - 1], [], [a])   # i in [0, 4), k in [0, 3)
    >>> s.values[k], s.axes                             # k = a + 1 - 2*i', i' free
    """
    system = _System(scope)
    for index, target in zip(indices, targets):
        system.equate(index, target)
    return system.solve(list(conds), targets)


def _eq(a, b):
    return binary("eq", a, b)


def _index(v):
    return Const(v, dt.INDEX)


class _System:
    def __init__(self, scope):
        self.unknowns = list(scope)
        self.box = {v: (v.lo, v.hi - 1) for v in scope}
        self.rows = []      # ({unknown: coeff}, rhs expression of the targets)
        self.extra = []     # conditions over the unknowns and targets
        self.aux = {}       # (structure key of u, K) -> (q, r)
        self.structure = Structure()

    # -- building the equations -------------------------------------------------
    def equate(self, e, rhs):
        """Add `e == rhs` (e over the unknowns, rhs over the targets)."""
        if not is_index_expr(e):
            self.extra.append(_eq(e, rhs))
            return
        form = linear_form(e, atoms=True)
        terms = {}
        for key, c in form.terms.items():
            u = key if isinstance(key, IterVar) else self._atom(key)
            if u is None:
                self.extra.append(_eq(e, rhs))
                return
            terms[u] = terms.get(u, 0) + c
        terms = {u: c for u, c in terms.items() if c}
        rhs = rhs - form.const if form.const else rhs
        digits = self._radix(terms, rhs)
        if digits is None:
            self.rows.append((terms, rhs))
        else:
            for u, digit in digits:
                self.rows.append(({u: 1}, digit))

    def _atom(self, node):
        """The auxiliary unknown standing for `u // K` or `u % K`, or None."""
        if not (isinstance(node, Binary) and node.op in ("floordiv", "mod")
                and isinstance(node.b, Const) and node.b.value > 0 and is_index_expr(node.a)):
            return None
        K = node.b.value
        k = (self.structure.key(node.a), K)
        if k not in self.aux:
            lo, hi = form_interval(linear_form(node.a, atoms=True), self.box) or (None, None)
            if lo is None:
                return None
            q = self._unknown("q", lo // K, hi // K)
            r = self._unknown("r", 0, K - 1)
            self.aux[k] = (q, r)
            self.equate(node.a - q * K - r, _index(0))
        q, r = self.aux[k]
        return q if node.op == "floordiv" else r

    def _unknown(self, name, lo, hi):
        v = IterVar(name, lo, hi + 1, "reduce")
        self.unknowns.append(v)
        self.box[v] = (lo, hi)
        return v

    def _radix(self, terms, rhs):
        """Digit equations when the terms are a mixed radix (injective on their
        boxes, positive coefficients), else None."""
        if len(terms) < 2 or any(c <= 0 or self.box[u][0] == self.box[u][1]
                                 for u, c in terms.items()):
            return None
        order = sorted(terms, key=lambda u: -terms[u])
        tail = 0
        for u in reversed(order):
            if terms[u] <= tail:
                return None
            lo, hi = self.box[u]
            tail += terms[u] * (hi - lo)
        b = rhs - sum(terms[u] * self.box[u][0] for u in order)
        digits, rest = [], b
        for u in order:
            c = terms[u]
            digit = rest // c if c != 1 else rest
            lo = self.box[u][0]
            digits.append((u, digit + lo if lo else digit))
            rest = rest % c if c != 1 else None
        if rest is not None:  # the smallest coefficient exceeds 1: remainder must vanish
            self.extra.append(_eq(rest, _index(0)))
        return digits

    # -- Hermite normal form ------------------------------------------------------
    def solve(self, conds, targets):
        n = len(self.unknowns)
        col = {id(u): j for j, u in enumerate(self.unknowns)}
        U = [[int(i == j) for j in range(n)] for i in range(n)]
        Uinv = [row[:] for row in U]
        rows = [([0] * n, rhs) for _, rhs in self.rows]
        for (terms, _), (vec, _) in zip(self.rows, rows):
            for u, c in terms.items():
                vec[col[id(u)]] += c
        det, extra = {}, list(self.extra)

        def coeffs(vec):
            return [sum(vec[i] * U[i][j] for i in range(n) if vec[i]) for j in range(n)]

        def extent(j):
            lo, hi = self._y_range(Uinv[j])
            return hi - lo

        def column_op(k, j, q):  # y-column k -= q * y-column j
            for i in range(n):
                U[i][k] -= q * U[i][j]
                Uinv[j][i] += q * Uinv[k][i]

        pending = list(rows)
        while pending:
            counted = [(sum(1 for j, c in enumerate(coeffs(v)) if c and j not in det), t)
                       for t, (v, _) in enumerate(pending)]
            _, t = min(counted)
            vec, rhs = pending.pop(t)
            cy = coeffs(vec)
            b = rhs
            for j, d in det.items():
                if cy[j]:
                    b = b - d * cy[j]
            J = [j for j in range(n) if cy[j] and j not in det]
            if not J:
                extra.append(_eq(b, _index(0)))
                continue
            units = [j for j in J if abs(cy[j]) == 1]
            if units:
                p = max(units, key=extent)
            else:
                while len(J) > 1:
                    p = min(J, key=lambda j: (abs(cy[j]), -extent(j)))
                    for k in J:
                        if k != p and cy[k] // cy[p]:
                            q = cy[k] // cy[p]
                            column_op(k, p, q)
                            cy[k] -= q * cy[p]
                    J = [j for j in J if cy[j]]
                p = J[0]
            for k in J:
                if k != p and cy[k]:
                    q = cy[k] // cy[p]   # exact: |cy[p]| == 1 here
                    column_op(k, p, q)
                    cy[k] -= q * cy[p]
            if cy[p] < 0:
                for i in range(n):
                    U[i][p] = -U[i][p]
                    Uinv[p][i] = -Uinv[p][i]
                cy[p] = -cy[p]
            g = cy[p]
            if g != 1:
                extra.append(_eq(b % g, _index(0)))
                b = b // g
            det[p] = b
        return self._finish(U, Uinv, det, conds + extra, targets)

    def _y_range(self, row):
        lo = hi = 0
        for i, c in enumerate(row):
            if c:
                a, b = self.box[self.unknowns[i]]
                lo += min(c * a, c * b)
                hi += max(c * a, c * b)
        return lo, hi

    def _finish(self, U, Uinv, det, conds, targets):
        n = len(self.unknowns)
        free = {}
        for j in range(n):
            if j not in det:
                lo, hi = self._y_range(Uinv[j])
                own = [self.unknowns[i] for i, c in enumerate(Uinv[j]) if c]
                name = f"r{own[0].name}" if len(own) == 1 else f"t{j}"
                free[j] = IterVar(name, lo, hi + 1, "reduce")
        values = {}
        for i, u in enumerate(self.unknowns):
            expr = None
            for j in range(n):
                c = U[i][j]
                if c:
                    term = free[j] if j in free else det[j]
                    term = term if c == 1 else term * c
                    expr = term if expr is None else expr + term
            values[u] = expr if expr is not None else _index(0)
        constraints = []
        for u in self.unknowns:
            lo, hi = self.box[u]
            constraints += [values[u] >= lo, values[u] <= hi]
        constraints += [substitute(c, values) for c in conds]
        axes = self._bound(list(free.values()), constraints, targets)
        if axes is None:
            return None
        fixed = {w: _index(w.lo) for w in free.values() if w.extent == 1}
        if fixed:
            values = {u: substitute(v, fixed) for u, v in values.items()}
            constraints = [substitute(c, fixed) for c in constraints]
        aux = {id(v) for pair in self.aux.values() for v in pair}
        scope_values = {u: values[u] for u in self.unknowns if id(u) not in aux}
        return Solution(scope_values, [w for w in axes if w.extent > 1], constraints)

    def _bound(self, axes, constraints, targets):
        """Narrow the free variables' ranges by the index constraints (in place);
        None if the constraints cannot hold."""
        ranges = {t: (t.lo, t.hi - 1) for t in targets}
        ranges.update({w: (w.lo, w.hi - 1) for w in axes})
        index_conds = [c for c in constraints if is_index_expr(c)]
        for _ in range(_ROUNDS):
            before = dict(ranges)
            for c in index_conds:
                ranges = narrow(c, ranges, atoms=True)
                if ranges is None:
                    return None
            if all(ranges[k] == before[k] for k in before):
                break
        for w in axes:
            w.lo, w.hi = ranges[w][0], ranges[w][1] + 1
        return axes
