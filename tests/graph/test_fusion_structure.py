"""Partition structure of whole computations (issue 5): LLTM forward and
backward, layer norm forward and backward, a conv-bn-relu training step
(forward and backward) and one MI-LSTM step each make at most the stated
number of kernels under nf.build, and the fused build computes what the
unfused one (fusion=False) does, on random float64 inputs."""
import numpy as np
import pytest

import neoflow as nf
from neoflow import zoo
from neoflow.graph.plan import plan_kernels
from neoflow.te import dtype as dt
from neoflow.te.visit import topo_tensors


def leaves(outs):
    return [t for t in topo_tensors(outs) if not t.is_compute]


def random_values(inputs, seed=0):
    """Normal floats (never all zero); integer inputs (class labels) in {0, 1}."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(t.shape).astype(t.dtype) * 0.5 + 0.1 if dt.is_float(t.dtype)
            else rng.integers(0, 2, t.shape).astype(t.dtype) for t in inputs]


def check_fused_against_unfused(outs, bound):
    """At most `bound` fused kernels (fewer than unfused); fused == unfused."""
    inputs = leaves(outs)
    fused, _ = plan_kernels(outs, inputs)
    unfused, _ = plan_kernels(outs, inputs, fusion=False)
    assert len(fused) <= bound < len(unfused)
    values = random_values(inputs)
    got = nf.build(outs, inputs)(*values)
    want = nf.build(outs, inputs, fusion=False)(*values)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
    return len(fused)


def model_grads(name, **sizes):
    m = zoo.get(name).build("small", dtype="float64", **sizes)
    return [m.loss] + nf.grad(m.loss, [m.params[n] for n in m.trainable])


# stated bounds: kernels under nf.build (unfused counts in the comments)
def test_lltm_forward_and_backward():
    m = zoo.get("lltm").build("small", dtype="float64")
    check_fused_against_unfused([m.loss], 3)                  # 12 computes
    check_fused_against_unfused(model_grads("lltm"), 7)       # 27 computes


def test_milstm_step_forward_and_backward():
    m = zoo.get("milstm").build("small", dtype="float64", steps=1)
    check_fused_against_unfused([m.loss], 5)                          # 10 computes
    check_fused_against_unfused(model_grads("milstm", steps=1), 14)   # 29 computes


def layer_norm(n=4, d=16):
    x = nf.placeholder((n, d), "float64", name="x")
    w = nf.parameter((d,), dtype="float64", name="ln.weight")
    b = nf.parameter((d,), dtype="float64", name="ln.bias")
    return x, w, b, nf.nn.layer_norm(x, (d,), w, b)


def test_layer_norm_forward_one_kernel():
    *_, y = layer_norm()
    assert check_fused_against_unfused([y], 1) == 1           # mean, variance, normalise


def test_layer_norm_backward():
    x, w, b, y = layer_norm()
    dy = nf.placeholder(y.shape, "float64", name="dy")
    check_fused_against_unfused(nf.grad(y, [x, w, b], head=dy), 3)   # 9 computes


def conv_bn_relu():
    x = nf.placeholder((2, 3, 6, 6), "float64", name="x")
    w = nf.parameter((4, 3, 3, 3), dtype="float64", name="conv.weight")
    g = nf.parameter((4,), init="ones", dtype="float64", name="bn.weight")
    b = nf.parameter((4,), init="zeros", dtype="float64", name="bn.bias")
    rm = nf.parameter((4,), init="zeros", dtype="float64", name="bn.running_mean",
                      requires_grad=False)
    rv = nf.parameter((4,), init="ones", dtype="float64", name="bn.running_var",
                      requires_grad=False)
    h = nf.nn.relu(nf.nn.batch_norm(nf.nn.conv2d(x, w, padding=1), rm, rv, g, b,
                                    training=True))
    loss = nf.nn.mean(nf.compute(h.shape, lambda *i: h[i] * h[i], name="square"))
    return x, [w, g, b], h, loss


def test_conv_bn_relu_training_forward_and_backward():
    _, params, h, loss = conv_bn_relu()
    check_fused_against_unfused([h], 2)                           # 5 computes
    check_fused_against_unfused([loss] + nf.grad(loss, params), 4)   # 19 computes


@pytest.mark.parametrize("optimizer", [nf.optim.SGD(lr=0.05, momentum=0.9),
                                       nf.optim.Adam(lr=0.01)], ids=["sgd", "adam"])
def test_conv_bn_relu_trainer_fused_matches_unfused(optimizer):
    """Running statistics and parameters updated in place inside grouped
    kernels: three steps fused equal three steps unfused."""
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((2, 3, 6, 6))
    results = []
    for fusion in (False, True):
        x, _, _, loss = conv_bn_relu()
        with nf.Trainer(loss, optimizer=optimizer, fusion=fusion, seed=1) as tr:
            losses = [tr.step({x: xv + 0.1 * n}) for n in range(3)]
            results.append((losses, tr.parameters(), tr.stats()["kernels"]))
    (l0, p0, k0), (l1, p1, k1) = results
    assert k1 < k0
    np.testing.assert_allclose(l1, l0, rtol=1e-10)
    for key in p0:
        np.testing.assert_allclose(p1[key], p0[key], rtol=1e-9, atol=1e-12)
