"""Gradients of gradients: Hessian-vector products against torch's double backward."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import neoflow as nf
from grad_check import HAS_BUILD, rel_error


def _hvp(build, torch_fn, shapes, native=False, seed=0):
    """d/dx <grad_x f(x), v> for every input x, ours vs torch."""
    rng = np.random.default_rng(seed)
    xs = [nf.placeholder(s, "float64", name=f"x{n}") for n, s in enumerate(shapes)]
    vs = [nf.placeholder(s, "float64", name=f"v{n}") for n, s in enumerate(shapes)]
    loss = build(*xs)
    grads = nf.grad(loss, xs)
    dot = None
    for g, v in zip(grads, vs):
        ax = [nf.reduce_axis(n, name=f"a{d}") for d, n in enumerate(g.shape)]
        term = nf.compute((), lambda: nf.sum(g[tuple(ax)] * v[tuple(ax)], axis=ax))
        dot = term if dot is None else dot + term
    second = nf.grad(dot, xs)
    values = [rng.normal(size=s) for s in shapes] + [rng.normal(size=s) for s in shapes]
    feed = dict(zip(xs + vs, values))
    got = nf.evaluate(second, feed)
    if native and HAS_BUILD:
        built = nf.build(second, xs + vs)(*values)
        for a, b in zip(built, got):
            assert rel_error(a, b) <= 1e-9
    ts = [torch.tensor(v, requires_grad=True) for v in values[:len(shapes)]]
    tg = torch.autograd.grad(torch_fn(*ts), ts, create_graph=True)
    tdot = sum((g * torch.tensor(v)).sum() for g, v in zip(tg, values[len(shapes):]))
    want = torch.autograd.grad(tdot, ts, allow_unused=True)
    for g, w in zip(got, want):
        w = np.zeros_like(g) if w is None else w.numpy()
        assert rel_error(g, w) <= 1e-9


def _sum_all(t):
    ax = [nf.reduce_axis(n, name=f"s{d}") for d, n in enumerate(t.shape)]
    return nf.compute((), lambda: nf.sum(t[tuple(ax)], axis=ax), name="loss")


def test_elementwise_chain():
    def ours(x):
        y = nf.compute(x.shape, lambda i, j: nf.tanh(x[i, j]) * x[i, j] * x[i, j]
                       + nf.exp(nf.sigmoid(x[i, j])) / (nf.abs(x[i, j]) + 1.0))
        return _sum_all(y)

    def theirs(x):
        return (torch.tanh(x) * x * x + torch.exp(torch.sigmoid(x)) / (x.abs() + 1)).sum()
    _hvp(ours, theirs, [(3, 4)], native=True)


def test_matmul_chain():
    def ours(a, b, c):
        return _sum_all(nf.nn.tanh(nf.nn.matmul(nf.nn.matmul(a, b), c)))

    def theirs(a, b, c):
        return torch.tanh(a @ b @ c).sum()
    _hvp(ours, theirs, [(2, 3), (3, 4), (4, 2)], native=True)


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm"])
def test_normalisations(op):
    ours = {"softmax": lambda x: nf.nn.softmax(x, -1),
            "log_softmax": lambda x: nf.nn.log_softmax(x, 0),
            "layer_norm": lambda x: nf.nn.layer_norm(x, (4,))}[op]
    theirs = {"softmax": lambda x: F.softmax(x, -1), "log_softmax": lambda x: F.log_softmax(x, 0),
              "layer_norm": lambda x: F.layer_norm(x, (4,))}[op]
    def ours_loss(x):
        y = ours(x)
        return _sum_all(nf.compute(y.shape, lambda i, j: y[i, j] * y[i, j]))

    def theirs_loss(x):
        return (theirs(x) ** 2).sum()
    _hvp(ours_loss, theirs_loss, [(3, 4)])


def test_max_pool_and_conv():
    def ours(x, w):
        y = nf.nn.conv2d(nf.nn.max_pool2d(x, 2, stride=1), w, stride=2, padding=1)
        return _sum_all(nf.compute(y.shape, lambda *i: y[i] * y[i]))

    def theirs(x, w):
        return (F.conv2d(F.max_pool2d(x, 2, stride=1), w, stride=2, padding=1) ** 2).sum()
    _hvp(ours, theirs, [(1, 2, 5, 5), (2, 2, 3, 3)], native=True)
