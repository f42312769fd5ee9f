"""Partitioning and fusion (graph/ops_class, graph/partition, graph/explain):
op classes read off expressions, inlining decisions and their reasons,
kernel counts of whole training steps (bounds stated below), and fused
results equal to unfused ones (nf.build of the fused tensors and the
Trainer with fusion on/off, against nf.evaluate)."""

import numpy as np
import pytest

import neoflow as nf
from neoflow.graph import fuse, fuse_training_graph, kernels_of, op_class
from neoflow.graph.training import training_graph
from zoo_models import build

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# -- op classes -------------------------------------------------------------------
def test_op_classes_from_expressions():
    A = nf.placeholder((8, 16), name="A")
    b = nf.placeholder((16,), name="b")
    W = nf.placeholder((16, 32), name="W")
    ids = nf.placeholder((4,), "int64", name="ids")
    k = nf.reduce_axis(16, name="k")
    assert op_class(A) == "leaf"
    assert op_class(nf.compute((8, 16), lambda i, j: nf.exp(A[i, j]) + b[j])) == "injective"
    assert op_class(nf.compute((16, 8), lambda i, j: A[j, i])) == "injective"
    assert op_class(nf.compute((128,), lambda i: A[i // 16, i % 16])) == "injective"
    assert op_class(nf.compute((4, 16), lambda i, j: A[ids[i], j])) == "gather"
    assert op_class(nf.compute((8, 32), lambda i, j: nf.sum(A[i, k] * W[k, j], axis=k))) \
        == "reduction-heavy"
    assert op_class(nf.compute((8,), lambda i: nf.sum(A[i, k], axis=k))) == "reduction-light"


# -- inlining decisions -------------------------------------------------------------
def test_elementwise_chain_inlined_into_reduction():
    x = nf.placeholder((8, 16), name="x")
    k = nf.reduce_axis(16, name="k")
    y = nf.compute((8, 16), lambda i, j: nf.exp(x[i, j]) * 2, name="y")
    z = nf.compute((8, 16), lambda i, j: y[i, j] + 1, name="z")
    s = nf.compute((8,), lambda i: nf.sum(z[i, k], axis=k), name="s")
    part = fuse([s])
    assert [t.name for t in part.computes] == ["s"]
    assert {t.name for t in part.inlined[id(part.outputs[0])]} == {"y", "z"}
    assert all(d.fused for d in part.decisions)
    xv = rand(8, 16)
    got = nf.build(part.outputs[0], [x])(xv)
    np.testing.assert_allclose(got, nf.evaluate(s, {x: xv}), rtol=1e-5)


def test_guard_on_a_sums_own_axis_becomes_its_bounds():
    """A shifted copy (`where(t >= 1, h[t - 1], 0)`, a scan's states before
    each step) inlined into a sum over t: the guard becomes t's range, so
    the kernel reads two plain operands. A guard that also tests a spatial
    axis (a padding test) stays."""
    T, B, H = 7, 3, 5
    g = nf.placeholder((T, B, H), name="g")
    h = nf.placeholder((T, B, H), name="h")
    before = nf.compute((T, B, H), lambda t, b, j: nf.where(t >= 1, h[t - 1, b, j], 0.0),
                        name="before")
    t, b = nf.reduce_axis(T, name="t"), nf.reduce_axis(B, name="b")
    dw = nf.compute((H, H), lambda i, j: nf.sum(g[t, b, i] * before[t, b, j], axis=[t, b]),
                    name="dw")
    (k,) = kernels_of(fuse([dw]))
    text = k.signature()
    assert "select" not in text and "[1, 7)" in text
    gv, hv = rand(T, B, H), rand(T, B, H)
    np.testing.assert_allclose(nf.build(fuse([dw]).outputs[0], [g, h])(gv, hv),
                               nf.evaluate(dw, {g: gv, h: hv}), rtol=1e-5, atol=1e-5)
    padded = nf.compute((T, B, H), lambda s, b, j: nf.where(s + j >= 2, h[s, b, j], 0.0),
                        name="padded")
    dp = nf.compute((H, H), lambda i, j: nf.sum(g[t, b, i] * padded[t, b, j], axis=[t, b]),
                    name="dp")
    (kp,) = kernels_of(fuse([dp]))
    assert "select" in kp.signature()
    np.testing.assert_allclose(nf.build(fuse([dp]).outputs[0], [g, h])(gv, hv),
                               nf.evaluate(dp, {g: gv, h: hv}), rtol=1e-5, atol=1e-5)


def test_expensive_producer_not_recomputed_in_matmul():
    x = nf.placeholder((16, 32), name="x")
    w = nf.placeholder((32, 64), name="w")
    k = nf.reduce_axis(32, name="k")
    act = nf.compute((16, 32), lambda i, j: nf.tanh(nf.exp(x[i, j]) + 1) * 3, name="act")
    mm = nf.compute((16, 64), lambda i, j: nf.sum(act[i, k] * w[k, j], axis=k), name="mm")
    part = fuse([mm])
    assert [t.name for t in part.computes] == ["act", "mm"]
    (d,) = part.decisions
    assert not d.fused and "recompute" in d.reason
    # a pure layout producer (transpose) costs nothing to recompute: inlined
    wt = nf.compute((64, 32), lambda i, j: w[j, i], name="wt")
    mm2 = nf.compute((16, 64), lambda i, j: nf.sum(x[i, k] * wt[j, k], axis=k), name="mm2")
    assert [t.name for t in fuse([mm2]).computes] == ["mm2"]


def test_outputs_and_reductions_stay_materialised():
    x = nf.placeholder((8, 16), name="x")
    k = nf.reduce_axis(16, name="k")
    y = nf.compute((8, 16), lambda i, j: x[i, j] * 2, name="y")
    s = nf.compute((8,), lambda i: nf.sum(y[i, k], axis=k), name="s")
    t = nf.compute((8,), lambda i: s[i] + 1, name="t")
    part = fuse([y, t])
    names = [c.name for c in part.computes]
    assert names == ["y", "s", "t"]
    reasons = {(d.producer.name, d.consumer.name): d.reason for d in part.decisions}
    assert "kept" in reasons[("y", "s")]
    assert "reduction" in reasons[("s", "t")]
    assert [[s.name for s in k.stages] for k in kernels_of(part)] == [["y", "s", "t"]]
    off = fuse([y, t], fusion=False)
    assert len(off.computes) == 3 and not any(d.fused for d in off.decisions)


def test_softmax_one_kernel_chain():
    x = nf.placeholder((8, 32), name="x")
    sm = nf.nn.softmax(x, 1)
    part = fuse([sm])
    kernels = kernels_of(part)
    assert part.unfused_kernels == 3  # max, sum of exp, normalise
    assert len(kernels) == 1          # bound: max, sum of exp, normalise in one kernel
    xv = rand(8, 32)
    got = nf.build(part.outputs[0], [x])(xv)
    np.testing.assert_allclose(got, nf.evaluate(sm, {x: xv}), rtol=1e-5, atol=1e-7)


# -- whole training steps ---------------------------------------------------------
def layer_norm_loss():
    x = nf.placeholder((8, 32), name="x")
    w = nf.parameter((32,), init="ones", name="ln.weight")
    b = nf.parameter((32,), init="zeros", name="ln.bias")
    y = nf.nn.layer_norm(x, (32,), w, b)
    xv = np.random.default_rng(2).standard_normal((8, 32)).astype(np.float32)
    z = nf.compute(y.shape, lambda i, j: y[i, j] * y[i, j] * (1.0 + 0.1 * x[i, j]))
    return nf.nn.mean(z), {"x": xv}


def spec_loss(name, batch=8):
    model = build(name, batch=batch)
    return model.loss, model.make_batch(np.random.default_rng(1))


# Stated bounds: kernels per SGD-momentum training step, fused. The MLP: 6
# (26 unfused). The recurrences unrolled over 8 steps, from their structure:
#   lltm 20 = 8 forward steps + the head with step 7's backward + the loss
#             + 7 backward steps + 3 gradient/update kernels (W and its bias,
#             which every step reads; the head's weight; its bias)   (65 unfused)
#   milstm 21 = 8 forward steps + 3 of the head and cross-entropy + 8 backward
#             steps + 2 gradient/update kernels (W: the zoo computes W x_t for
#             every step as one dense, so its gradient is one sum over all the
#             steps' gate gradients after the last; beta1)   (101 unfused)
# (The examples' own copy of MI-LSTM, gone with examples/models.py, needed
# 20: it skipped U h for the first step and had one gradient/update kernel
# fewer, W's and beta2's together.)
BOUNDS = {"mlp": 6, "lltm": 20, "milstm": 21, "layer_norm": 3}


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_training_step_kernel_bounds(name):
    loss, _ = layer_norm_loss() if name == "layer_norm" else spec_loss(name)
    g = training_graph(loss, nf.optim.SGD(lr=0.1, momentum=0.9))
    fused, part = fuse_training_graph(g)
    assert len(part.kernels) <= BOUNDS[name] < len(g.order)
    _, off = fuse_training_graph(g, fusion=False)
    assert len(off.kernels) == len(g.order)


@pytest.mark.parametrize("name", ["mlp", "lltm", "milstm", "layer_norm"])
def test_training_fused_matches_unfused(name):
    results = []
    for fusion in (False, True):
        loss, feed = layer_norm_loss() if name == "layer_norm" else spec_loss(name)
        with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.05, momentum=0.9),
                        fusion=fusion) as tr:
            losses = [tr.step(feed) for _ in range(3)]
            results.append((losses, tr.parameters(), tr.stats()["kernels"]))
    (l0, p0, k0), (l1, p1, k1) = results
    assert k1 < k0
    np.testing.assert_allclose(l1, l0, rtol=1e-5, atol=1e-6)
    for key in p0:
        np.testing.assert_allclose(p1[key], p0[key], rtol=1e-4, atol=1e-6)


def test_explain_lists_kernels_and_reasons():
    loss, feed = spec_loss("lltm", batch=4)
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1), backend="reference") as tr:
        text = nf.explain(tr)
        assert text.splitlines()[0].endswith(f"-> {tr.stats()['kernels']} kernels per step "
                                             "(fusion on)")
    assert "flops" in text and "bytes" in text and "inlined:" in text
    assert "fused " in text and "kept " in text and "recompute" in text
    assert "kernels per step" in nf.explain(loss)
    assert "(fusion off)" in nf.explain([loss], fusion=False)


def test_reduction_of_an_inlined_constant_has_a_kernel_key():
    """Zeros inlined into softmax leave `max over r of 0.0`: a reduce axis no
    read uses still names its range in the kernel's signature."""
    def softmax_of_zeros(n):
        z = nf.compute((4, n), lambda i, j: nf.const(0.0, "float32"), name="zeros")
        return nf.nn.softmax(z, 1)
    five, six = softmax_of_zeros(5), softmax_of_zeros(6)
    k5, k6 = kernels_of(fuse([five])), kernels_of(fuse([six]))
    assert "[0, 5)" in k5[0].signature() and k5[0].key != k6[0].key
    np.testing.assert_allclose(nf.build(five, [])(), np.full((4, 5), 0.2), rtol=1e-6)
