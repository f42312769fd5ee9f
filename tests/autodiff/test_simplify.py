"""The simplifier: folding, identities, conditions decided on ranges,
reduce ranges tightened, invariant factors moved out of sums."""
import numpy as np

import neoflow as nf
from neoflow.te.expr import Const, IterVar, Reduce, Select
from neoflow.te.simplify import Structure, simplify


def _body(shape, fn):
    return nf.compute(shape, fn).op


def test_identities_and_constant_folding():
    A = nf.placeholder((4,), name="A")
    op = _body((4,), lambda i: (A[i] * 1.0 + 0.0) * (nf.const(2.0) * 3.0) - 0.0)
    assert str(simplify(op.body)) == "(A[i] * 6.0)"
    op = _body((4,), lambda i: A[i] * 0.0 + nf.erf(nf.const(0.0)))
    assert isinstance(simplify(op.body), Const) and simplify(op.body).value == 0


def test_conditions_decided_on_the_ranges():
    A = nf.placeholder((4,), name="A")
    op = _body((4,), lambda i: nf.where((i < 10) & (i >= 0), A[i], 0.0))
    assert str(simplify(op.body)) == "A[i]"
    op = _body((4,), lambda i: nf.where(i > 5, A[i], -A[i]))
    assert str(simplify(op.body)) == "-A[i]"
    # inside a where, the condition narrows the range of i for the branch
    op = _body((4,), lambda i: nf.where(i >= 2, nf.where(i >= 1, A[i], 0.0), 1.0))
    assert str(simplify(op.body)) == "where((i >= 2), A[i], 1.0)"


def test_reduce_ranges_tightened_to_where_the_condition_can_hold():
    A = nf.placeholder((16,), name="A")
    k = nf.reduce_axis(16, name="k")
    op = _body((8,), lambda i: nf.sum(A[k], axis=k, where=(k >= 3) & (k < 7) & (k >= i)))
    out = simplify(op.body)
    assert isinstance(out, Reduce) and (out.axes[0].lo, out.axes[0].hi) == (3, 7)
    assert str(out.cond) == "(k >= i)"
    op = _body((2,), lambda i: nf.sum(A[k], axis=k, where=(k >= 3) & (k < 7) & (k >= i)))
    assert simplify(op.body).cond is None      # k >= 3 > i: always true
    one = simplify(_body((2,), lambda i: nf.sum(A[k] * 2.0, axis=k, where=k == 5)).body)
    assert str(one) == "(A[5] * 2.0)"
    none = simplify(_body((2,), lambda i: nf.max(A[k], axis=k, where=k > 20)).body)
    assert isinstance(none, Const) and none.value == -np.inf


def test_where_in_a_sum_body_becomes_its_condition_and_invariants_move_out():
    A, B = nf.placeholder((8,), name="A"), nf.placeholder((4,), name="B")
    k = nf.reduce_axis(8, name="k")
    op = _body((4,), lambda i: nf.sum(nf.where(k > i, A[k], 0.0) * B[i] * -1.0, axis=k))
    out = simplify(op.body)
    assert str(out) == "-(sum(A[k], k, where=(k > i)) * B[i])"


def test_structure_keys():
    A = nf.placeholder((4,), name="A")
    i = IterVar("i", 0, 4, "spatial")
    s = Structure()
    assert s.key(A[i] + 1.0) == s.key(A[i] + 1.0)
    assert s.key(A[i] + 1.0) != s.key(A[i] + 2.0)
    assert s.key(Select(i > 1, A[i], A[i])) != s.key(A[i])
    assert simplify(Select(i > 1, A[i], A[i])) is not None
    assert str(simplify(Select(i > 1, A[i] + 0.0, A[i]))) == "A[i]"


def test_adjoint_over_many_disjoint_reads_grows_linearly():
    # A parameter read over two disjoint ranges at every step of a recurrence
    # (LLTM's W[g, k] and W[g, state + f]) must not get an exponential body.
    from neoflow.te.visit import children, topo_tensors

    def tree_size(e):
        return 1 + sum(tree_size(c) for c in children(e))

    sizes = []
    for steps in (4, 8):
        W = nf.placeholder((8,), dtype="float64", name="W")
        c = nf.placeholder((4,), dtype="float64", name="c0")
        for _ in range(steps):
            c = nf.compute((4,), lambda j, c=c: nf.tanh(c[j] * W[j] + c[j] * W[j + 4]))
        k = nf.reduce_axis(4, name="k")
        loss = nf.compute((), lambda: nf.sum(c[k], axis=k))
        dW, = nf.grad(loss, [W])
        sizes.append(max(tree_size(t.op.body) for t in topo_tensors([dW]) if t.is_compute))
    assert sizes[1] <= 2.5 * sizes[0], sizes
