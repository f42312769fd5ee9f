"""graph/split: merged sums, index-set splitting and hoisted reductions leave
every stage with at most one whole-space reduction and never change values
(checked against nf.evaluate, native code and torch in float64)."""
import numpy as np
import torch

import neoflow as nf
from neoflow import zoo
from neoflow.graph.split import split_stages
from neoflow.te.arith import free_vars
from neoflow.te.expr import Reduce, Select
from neoflow.te.simplify import merge_sums
from neoflow.te.visit import post_order, topo_tensors

RNG = np.random.default_rng(7)


def _rand(*shape):
    return RNG.standard_normal(shape)


def _whole_space_reductions(t):
    """Reductions of t's body outside other reductions that use every output axis."""
    axes = set(t.op.axes)
    out, stack = [], [t.op.body]
    while stack:
        e = stack.pop()
        if isinstance(e, Reduce):
            if axes <= set(free_vars(e)):
                out.append(e)
            continue
        stack.extend(c for c in (getattr(e, "a", None), getattr(e, "b", None)) if c is not None)
        if isinstance(e, Select):
            stack += [e.t, e.f]
    return out


def test_merge_sums_folds_equal_ranges_only():
    A = nf.placeholder((4, 6), "float64", name="A")
    B = nf.placeholder((4, 6), "float64", name="B")
    C = nf.placeholder((4, 5), "float64", name="C")
    k, m, n = nf.reduce_axis(6, name="k"), nf.reduce_axis(6, name="m"), nf.reduce_axis(5, name="n")
    t = nf.compute((4,), lambda i: nf.sum(A[i, k], axis=k) + nf.sum(B[i, m] * 2.0, axis=m)
                   + nf.sum(C[i, n], axis=n), name="t")
    merged = merge_sums(t.op.body)
    reduces = [e for e in post_order(merged) if isinstance(e, Reduce)]
    assert len(reduces) == 2 and {r.axes[0].extent for r in reduces} == {6, 5}
    # different `where=` conditions are not merged
    u = nf.compute((4,), lambda i: nf.sum(A[i, k], axis=k, where=k > i)
                   + nf.sum(B[i, m], axis=m), name="u")
    assert len([e for e in post_order(merge_sums(u.op.body)) if isinstance(e, Reduce)]) == 2
    a, b, c = _rand(4, 6), _rand(4, 6), _rand(4, 5)
    (out,), _ = split_stages([t])
    np.testing.assert_allclose(nf.evaluate(out, {A: a, B: b, C: c}),
                               a.sum(1) + 2 * b.sum(1) + c.sum(1), rtol=1e-12)


def test_hoisting_gives_each_stage_one_reduction_and_same_values():
    P = nf.placeholder((8, 3), "float64", name="P")
    s = nf.placeholder((5, 3), "float64", name="s")
    R = nf.placeholder((8, 6), "float64", name="R")
    h = nf.placeholder((5, 6), "float64", name="h")
    k, m = nf.reduce_axis(3, name="k"), nf.reduce_axis(6, name="m")
    y = nf.compute((5, 8), lambda i, j: nf.sigmoid(nf.sum(P[j, k] * s[i, k], axis=k)
                                                  + nf.sum(R[j, m] * h[i, m], axis=m)), name="y")
    (out,), mapping = split_stages([y])
    stages = [t for t in topo_tensors([out]) if t.is_compute]
    assert len(stages) == 2 and all(len(_whole_space_reductions(t)) == 1 for t in stages)
    assert mapping[id(y)] is out and out.name == "y"
    feed = {P: _rand(8, 3), s: _rand(5, 3), R: _rand(8, 6), h: _rand(5, 6)}
    expect = torch.sigmoid(torch.tensor(feed[s]) @ torch.tensor(feed[P]).T
                           + torch.tensor(feed[h]) @ torch.tensor(feed[R]).T).numpy()
    np.testing.assert_allclose(nf.evaluate(out, feed), expect, rtol=1e-12)
    f = nf.build(y, [P, s, R, h])
    np.testing.assert_allclose(f(*feed.values()), expect, rtol=1e-12)


def test_weight_read_in_column_blocks_gets_its_gradient_in_pieces():
    # gates = W[:, :3] @ h + W[:, 3:] @ x, as an LSTM-like cell reads a concatenated weight
    W = nf.parameter((6, 10), dtype="float64", name="W")
    h = nf.placeholder((4, 3), "float64", name="h")
    x = nf.placeholder((4, 7), "float64", name="x")
    k, f = nf.reduce_axis(3, name="k"), nf.reduce_axis(7, name="f")
    gates = nf.compute((4, 6), lambda i, j: nf.sum(W[j, k] * h[i, k], axis=k)
                       + nf.sum(W[j, 3 + f] * x[i, f], axis=f), name="gates")
    t = nf.nn.tanh(gates)
    loss = nf.nn.sum(t * t)
    (dW,) = nf.grad(loss, [W])
    (out,), _ = split_stages([dW])
    pieces = sorted(t.name for t in topo_tensors([out]) if t.is_compute and t.name.startswith("dW."))
    assert pieces == ["dW.0_3", "dW.3_10"]
    for t in topo_tensors([out]):
        if t.is_compute:
            assert len(_whole_space_reductions(t)) <= 1, t.name
    w, hv, xv = _rand(6, 10), _rand(4, 3), _rand(4, 7)
    tw = torch.tensor(w, requires_grad=True)
    g = torch.tensor(hv) @ tw[:, :3].T + torch.tensor(xv) @ tw[:, 3:].T
    (torch.tanh(g) ** 2).sum().backward()
    np.testing.assert_allclose(nf.evaluate(out, {W: w, h: hv, x: xv}), tw.grad.numpy(),
                               rtol=1e-10)
    fn = nf.build(dW, [W, h, x])
    np.testing.assert_allclose(fn(w, hv, xv), tw.grad.numpy(), rtol=1e-10)


def test_recurrent_cells_train_with_one_reduction_per_stage():
    for name in ("lltm", "scrnn", "sublstm", "milstm"):
        model = zoo.get(name).build("small", dtype="float64")
        with nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.1, momentum=0.9)) as trainer:
            for k in trainer.kernels:
                for t in k.stages:
                    assert len(_whole_space_reductions(t)) <= 1, (name, t.name)


def test_untouched_graphs_keep_their_tensors():
    A = nf.placeholder((4, 6), name="A")
    k = nf.reduce_axis(6, name="k")
    t = nf.compute((4,), lambda i: nf.sum(A[i, k], axis=k) * 2.0, name="t")
    u = nf.compute((4,), lambda i: t[i] + 1.0, name="u")
    outs, mapping = split_stages([u])
    assert outs[0] is u and mapping[id(t)] is t


def test_sums_over_equal_ranges_merge_even_where_nothing_else_is_rewritten():
    # an RNN weight's gradient: one sum per step over the same batch range;
    # split_stages keeps the merged form although no index-set split or hoist
    # applies (it used to return the unmerged body: one loop nest per step)
    xs = [nf.placeholder((5, 3), "float64", name=f"x{t}") for t in range(4)]
    gs = [nf.placeholder((5, 7), "float64", name=f"g{t}") for t in range(4)]
    b = nf.reduce_axis(5, name="b")
    dw = nf.compute((3, 7), lambda i, j: sum(
        (nf.sum(x[b, i] * g[b, j], axis=b) for x, g in zip(xs[1:], gs[1:])),
        nf.sum(xs[0][b, i] * gs[0][b, j], axis=b)), name="dw")
    [out], _ = split_stages([dw])
    assert len(_whole_space_reductions(out)) == 1
    feeds = {p: _rand(*p.shape) for p in xs + gs}
    np.testing.assert_allclose(nf.evaluate(out, feeds), nf.evaluate(dw, feeds), rtol=1e-12)
    [same], _ = split_stages([out])
    assert same is out                                     # nothing left to merge: identity kept
