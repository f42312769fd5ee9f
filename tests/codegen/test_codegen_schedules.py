"""Every valid schedule computes the same result: random configs (fixed seeds)
against the default schedule and the reference evaluator.

Each op is built once with many copies of its compute, one random schedule
per copy, so one compile covers them all.
"""
import numpy as np
import neoflow as nf
from neoflow.graph import kernels_for
from neoflow.schedule import config_space, default_config, lower_kernel, sample_config, validate

SCHEDULES = 20
rng = np.random.default_rng(1)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def check_random_schedules(make, inputs, values, seed, rtol=1e-4, atol=1e-4):
    """`make()` returns a fresh compute; its copies get random schedules."""
    copies = [make() for _ in range(SCHEDULES + 1)]
    kernels = kernels_for(copies)
    configs = [default_config(kernels[0])] + [sample_config(k, seed * 1000 + n)
                                              for n, k in enumerate(kernels[1:])]
    assert len({c.to_json() for c in configs}) > SCHEDULES // 2  # really different schedules
    f = nf.build(copies, inputs, configs=configs)
    results = f(*values)
    ref = nf.evaluate(copies[0], dict(zip(inputs, values)))
    np.testing.assert_allclose(results[0], ref, rtol=rtol, atol=atol)
    for config, got in zip(configs[1:], results[1:]):
        np.testing.assert_allclose(got, results[0], rtol=rtol, atol=atol,
                                   err_msg=config.to_json())


def test_matmul_random_schedules():
    a, b = nf.placeholder((33, 19), name="a"), nf.placeholder((19, 40), name="b")

    def make():
        k = nf.reduce_axis(19, name="k")
        return nf.compute((33, 40), lambda i, j: nf.sum(a[i, k] * b[k, j], axis=k))
    check_random_schedules(make, [a, b], [randn(33, 19), randn(19, 40)], seed=1)


def test_conv2d_random_schedules():
    """NCHW with stride, padding and dilation (padding: a where in the body)."""
    x, w = nf.placeholder((2, 3, 11, 9), name="x"), nf.placeholder((5, 3, 3, 3), name="w")

    def make():
        return nf.nn.conv2d(x, w, stride=2, padding=1, dilation=2)
    check_random_schedules(make, [x, w], [randn(2, 3, 11, 9), randn(5, 3, 3, 3)], seed=2)


def test_reduction_with_epilogue_random_schedules():
    x, b = nf.placeholder((7, 33, 5), name="x"), nf.placeholder((5,), name="b")

    def make():
        r = nf.reduce_axis(33, name="r")
        return nf.compute((7, 5), lambda i, j: nf.maximum(
            nf.sum(x[i, r, j] * 2.0, axis=r, where=r >= i) / 33.0 + b[j], 0.0))
    check_random_schedules(make, [x, b], [randn(7, 33, 5), randn(5)], seed=4)


def test_max_reduction_random_schedules():
    x = nf.placeholder((13, 17), name="x")

    def make():
        r = nf.reduce_axis(17, name="r")
        return nf.compute((13, 7), lambda i, j: nf.max(x[i, r] * nf.cast(j, "float32"),
                                                       axis=r, where=r + j < 20))
    check_random_schedules(make, [x], [randn(13, 17)], seed=5)


def test_sampled_and_enumerated_configs_are_valid():
    a = nf.placeholder((6, 4), name="a")
    k = nf.reduce_axis(4, name="k")
    c = nf.compute((6, 6), lambda i, j: nf.sum(a[i, k] * a[j, k], axis=k))
    kernel = kernels_for([c])[0]
    for n, config in zip(range(40), config_space(kernel)):
        validate(config, kernel)
        lower_kernel(kernel, config, [])
    for seed in range(40):
        validate(sample_config(kernel, seed), kernel)
    assert sample_config(kernel, 3) == sample_config(kernel, 3)


def test_tail_heavy_schedule():
    """Extents 7 and 33, odd factors that divide nothing, tails on every level."""
    x = nf.placeholder((7, 33), name="x")
    y = nf.placeholder((33, 7), name="y")
    k = nf.reduce_axis(33, name="k")
    c = nf.compute((7, 7), lambda i, j: nf.sum(x[i, k] * y[k, j], axis=k) + 1.0)
    cfg = nf.schedule.Config.from_dict({"stages": [{
        "tile": {"s0": [3, 2], "s1": [5], "r0": [5, 3]},
        "order": ["s0.0", "r0.0", "s1.0", "s0.1", "r0.1", "s0.2", "r0.2", "s1.1"],
        "parallel": 1, "vectorize": "s1", "unroll": {"s0.2": 2}, "cache_write": True}]})
    f = nf.build(c, [x, y], configs=cfg)
    xv, yv = randn(7, 33), randn(33, 7)
    np.testing.assert_allclose(f(xv, yv), xv @ yv + 1.0, rtol=1e-4, atol=1e-4)
