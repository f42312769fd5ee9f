"""The index solver on the index maps of common operators: which variables
become sums, which are solved, and the conditions that remain."""
import numpy as np

from neoflow.autodiff.index_solve import solve
from neoflow.te import dtype as dt
from neoflow.te.arith import is_index_expr
from neoflow.te.evaluate import evaluate
from neoflow.te.expr import Const, IterVar
from neoflow.te.simplify import conjunction, simplify
from neoflow.te.tensor import compute
from neoflow.te.visit import substitute


def iv(name, n, kind="spatial"):
    return IterVar(name, 0, n, kind)


def points(solution, targets):
    """Every (target values, variable values) the solution describes, by brute force."""
    grid = [t.extent for t in targets] + [w.extent for w in solution.axes]
    allv = list(targets) + list(solution.axes)
    cond = conjunction(solution.conds) if solution.conds else Const(True, dt.BOOL)

    def on_grid(e):
        return compute(tuple(grid), lambda *ax: substitute(e, {v: a + v.lo if v.lo else a
                                                              for v, a in zip(allv, ax)}))
    names = sorted(solution.values, key=lambda v: v.name)
    arrays = evaluate([on_grid(cond)] + [on_grid(solution.values[v]) for v in names], {})
    mask = np.broadcast_to(arrays[0], tuple(grid))
    out = set()
    for idx in zip(*np.nonzero(mask)):
        a = idx[:len(targets)]
        out.add((a, tuple(int(np.broadcast_to(x, tuple(grid))[idx]) for x in arrays[1:])))
    return out, names


def brute(scope, indices, targets):
    """The same set, by enumerating the iteration space."""
    out, shape = set(), tuple(v.extent for v in scope)
    vals = [evaluate(compute(shape, lambda *ax, e=e: substitute(e + 0, dict(zip(scope, ax)))),
                     {}) for e in indices]
    for idx in np.ndindex(*shape):
        a = tuple(int(np.broadcast_to(x, shape)[idx]) for x in vals)
        if all(0 <= x < t.extent for x, t in zip(a, targets)):
            out.add((a, idx))
    return out


def check(scope, indices, targets):
    sol = solve(scope, indices, [], targets)
    got, names = points(sol, targets)
    order = [next(n for n, u in enumerate(scope) if u is v) for v in names]
    want = {(a, tuple(idx[k] for k in order)) for a, idx in brute(scope, indices, targets)}
    assert got == want
    return sol


def test_strided_convolution_keeps_the_output_index_free():
    i, k, a = iv("i", 5), iv("k", 3, "reduce"), iv("a", 11)
    sol = check([i, k], [2 * i + k - 1], [a])
    assert [w.name for w in sol.axes] == ["ri"] and sol.axes[0].extent == 5


def test_stride_and_dilation_with_a_common_factor_give_a_divisibility_condition():
    i, k, a = iv("i", 4), iv("k", 3, "reduce"), iv("a", 12)
    sol = check([i, k], [2 * i + 2 * k - 1], [a])
    spatial = [simplify(c) for c in sol.conds if is_index_expr(c)]
    assert any("% 2) == 0" in str(c) for c in spatial)


def test_coprime_stride_and_dilation_solve_through_euclid():
    i, k, a = iv("i", 4), iv("k", 3, "reduce"), iv("a", 14)
    sol = check([i, k], [2 * i + 3 * k - 1], [a])
    assert len(sol.axes) == 1


def test_non_overlapping_windows_and_reshapes_need_no_sum():
    i, k, a = iv("i", 4), iv("k", 3, "reduce"), iv("a", 12)
    assert check([i, k], [3 * i + k], [a]).axes == []
    x, y = iv("x", 3), iv("y", 5)
    assert check([x, y], [x * 5 + y], [iv("f", 15)]).axes == []


def test_pixel_shuffle():
    n, c, h, w = iv("n", 2), iv("c", 2), iv("h", 6), iv("w", 6)
    r = 3
    sol = check([n, c, h, w], [n, c * r * r + (h % r) * r + (w % r), h // r, w // r],
                [iv("a0", 2), iv("a1", 18), iv("a2", 2), iv("a3", 2)])
    assert sol.axes == []


def test_broadcast_and_upsampling_become_sums():
    i, j = iv("i", 3), iv("j", 4)
    sol = check([i, j], [j], [iv("a", 4)])
    assert [w.extent for w in sol.axes] == [3]
    k = iv("k", 8)
    sol = check([k], [k // 2], [iv("b", 4)])
    assert [w.extent for w in sol.axes] == [2]


def test_diagonal_read_gives_a_consistency_condition():
    i = iv("i", 3)
    sol = check([i], [i, i], [iv("a", 3), iv("b", 3)])
    assert sol.axes == [] and len([c for c in sol.conds if "==" in str(simplify(c))]) == 1


def test_a_gather_index_stays_a_condition():
    from neoflow.te.tensor import placeholder
    ids = placeholder((5,), "int64", name="ids")
    i, j = iv("i", 5), iv("j", 3)
    sol = solve([i, j], [ids[i], j], [], [iv("v", 7), iv("c", 3)])
    assert [w.extent for w in sol.axes] == [5]
    assert any(not is_index_expr(c) for c in sol.conds)
