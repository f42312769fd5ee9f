"""Property: random DAGs of elementwise, broadcast, layout and reduction ops
(with siblings: several computes reading x and y) give the same results
fused (nf.build: inlining, epilogue, reduction and sibling grouping) as
unfused (nf.build(fusion=False)) and as the reference interpreter, in float64."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import neoflow as nf
from neoflow.graph.plan import plan_kernels

M, N = 4, 6
DTYPE = "float64"


def _unary(kind, t):
    if kind == "tanh":
        return nf.compute(t.shape, lambda *i: nf.tanh(t[i]))
    if kind == "scale":
        return nf.compute(t.shape, lambda *i: t[i] * 1.5 - 0.25)
    if kind == "sigmoid":
        return nf.compute(t.shape, lambda *i: nf.sigmoid(t[i]))
    return nf.compute(t.shape, lambda *i: nf.maximum(t[i], 0.0))


def _op(data, pool):
    mats = [t for t in pool if t.shape == (M, N)]
    vecs = [t for t in pool if t.shape == (M,)]
    kind = data.draw(st.sampled_from(["unary", "add", "mul", "bcast", "sum", "max",
                                      "matmul", "shift", "mean_sub"]))
    a = data.draw(st.sampled_from(mats))
    if kind == "unary":
        return _unary(data.draw(st.sampled_from(["tanh", "scale", "sigmoid", "relu"])), a)
    if kind in ("add", "mul"):
        b = data.draw(st.sampled_from(mats))
        return a + b if kind == "add" else a * b
    if kind == "bcast" and vecs:
        v = data.draw(st.sampled_from(vecs))
        return nf.compute((M, N), lambda i, j: a[i, j] * v[i])
    if kind in ("sum", "max"):
        k = nf.reduce_axis(N)
        red = nf.sum if kind == "sum" else nf.max
        return nf.compute((M,), lambda i: red(a[i, k], axis=k))
    if kind == "matmul":
        b = data.draw(st.sampled_from(mats))
        k = nf.reduce_axis(N)
        c = nf.compute((M, M), lambda i, j: nf.sum(a[i, k] * b[j, k], axis=k))
        return nf.compute((M, N), lambda i, j: c[i, j % M] + a[i, j])
    if kind == "shift":   # a permuted / shifted read with a guard (padding)
        return nf.compute((M, N), lambda i, j: nf.where(j > 0, a[M - 1 - i, j - 1], 0.0))
    k = nf.reduce_axis(N)
    s = nf.compute((M,), lambda i: nf.sum(a[i, k], axis=k) / N)
    return nf.compute((M, N), lambda i, j: a[i, j] - s[i])


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_random_dags_fused_equal_unfused(data):
    x = nf.placeholder((M, N), DTYPE, name="x")
    y = nf.placeholder((M, N), DTYPE, name="y")
    pool = [x, y]
    for _ in range(data.draw(st.integers(2, 7))):
        pool.append(_op(data, pool))
    computed = [t for t in pool if t.is_compute]
    n_out = data.draw(st.integers(1, min(2, len(computed))))
    outs = []
    for t in reversed(computed):   # the last ones, distinct
        if len(outs) < n_out:
            outs.append(t)
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    xv, yv = (rng.standard_normal((M, N)) for _ in range(2))
    want = nf.evaluate(outs, {x: xv, y: yv})
    unfused = nf.build(outs, [x, y], fusion=False)(xv, yv)
    got = nf.build(outs, [x, y])(xv, yv)
    assert len(plan_kernels(outs, [x, y])[0]) <= len(computed)
    for g, u, w in zip(got, unfused, want):
        np.testing.assert_allclose(g, u, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
