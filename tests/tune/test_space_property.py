"""Every schedule the tuner may propose computes what the reference
evaluator computes: random samples of the space (pruned or not) and their
mutations, over thirteen kernels, fused ones included.

Each kernel is built once with many copies of its stages, one schedule per
copy, so one compile covers them all.
"""
import random

import numpy as np

import neoflow as nf
from neoflow.runtime.function import BuiltFunction
from neoflow.toolchain import compile_c
from neoflow.codegen.c import generate_c
from neoflow.graph import Kernel
from neoflow.schedule import Config, ConfigError, default_config, lower_program, validate
from neoflow.schedule.stage import Stage
from neoflow.te.visit import substitute, topo_tensors
from neoflow.tune.hardware import detect
from neoflow.tune.search import Search, mutate_stage

COPIES = 12
rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def candidates(kernel, seed):
    """COPIES schedules: pruned and unpruned samples, then mutations of them."""
    hw = detect()
    out = Search(kernel, hw, seed=seed).propose(COPIES // 3)
    out += Search(kernel, hw, seed=seed + 1, prune=False).propose(COPIES // 3)
    r = random.Random(seed)
    stages = [Stage(t) for t in kernel.stages]
    while len(out) < COPIES:
        parent = r.choice(out or [default_config(kernel)])
        n = r.randrange(len(stages))
        try:
            child = mutate_stage(stages[n], parent.stages[n], r, hw.lanes("float32"))
        except ConfigError:
            continue
        config = Config([child if i == n else s for i, s in enumerate(parent.stages)])
        validate(config, kernel)
        out.append(config)
    return out


def check(make, inputs, values, seed, rtol=1e-4, atol=1e-4):
    """`make()` returns a fresh list of stages (the last one the output)."""
    copies = [make() for _ in range(COPIES + 1)]
    kernels = [Kernel(stages) for stages in copies]
    configs = [default_config(kernels[0])] + [
        c for k in kernels[1:2] for c in candidates(k, seed)]
    configs = configs[:1] + [Config.from_json(c.to_json()) for c in configs[1:]]
    outputs = [stages[-1] for stages in copies]
    program = lower_program(kernels, configs, inputs, outputs)
    source = generate_c(program)
    f = BuiltFunction(outputs, False, inputs, outputs, kernels, configs, program, source,
                      compile_c(source), None)
    results = f(*values)
    ref = nf.evaluate(outputs[0], dict(zip(inputs, values)))
    np.testing.assert_allclose(results[0], ref, rtol=rtol, atol=atol)
    for config, got in zip(configs[1:], results[1:]):
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg=config.to_json())


def test_matmul_with_tails():
    a, b = nf.placeholder((33, 19), name="a"), nf.placeholder((19, 40), name="b")

    def make():
        k = nf.reduce_axis(19, name="k")
        return [nf.compute((33, 40), lambda i, j: nf.sum(a[i, k] * b[k, j], axis=k))]
    check(make, [a, b], [randn(33, 19), randn(19, 40)], seed=1)


def test_conv2d_strided_padded_dilated():
    x, w = nf.placeholder((2, 3, 11, 9), name="x"), nf.placeholder((5, 3, 3, 3), name="w")
    check(lambda: [nf.nn.conv2d(x, w, stride=2, padding=1, dilation=2)], [x, w],
          [randn(2, 3, 11, 9), randn(5, 3, 3, 3)], seed=2)


def test_reduction_with_condition_and_epilogue():
    x, b = nf.placeholder((7, 33, 5), name="x"), nf.placeholder((5,), name="b")

    def make():
        r = nf.reduce_axis(33, name="r")
        return [nf.compute((7, 5), lambda i, j: nf.maximum(
            nf.sum(x[i, r, j] * 2.0, axis=r, where=r >= i) / 33.0 + b[j], 0.0))]
    check(make, [x, b], [randn(7, 33, 5), randn(5)], seed=3)


def test_max_reduction():
    x = nf.placeholder((13, 17), name="x")

    def make():
        r = nf.reduce_axis(17, name="r")
        return [nf.compute((13, 7), lambda i, j: nf.max(x[i, r] * nf.cast(j, "float32"),
                                                        axis=r, where=r + j < 20))]
    check(make, [x], [randn(13, 17)], seed=4)


def test_softmax_as_one_kernel():
    """nf.nn.softmax's computes, all stages of one kernel."""
    x = nf.placeholder((9, 37), name="x")

    def make():
        return [t for t in topo_tensors([nf.nn.softmax(x, 1)]) if t.is_compute]
    check(make, [x], [randn(9, 37)], seed=5)


def test_elementwise_broadcast():
    x, b = nf.placeholder((4, 6, 35), name="x"), nf.placeholder((35,), name="b")
    check(lambda: [nf.compute(x.shape, lambda i, j, k: nf.sigmoid(x[i, j, k] + b[k]) * 2.0)],
          [x, b], [randn(4, 6, 35), randn(35)], seed=6)


def test_transpose_scale():
    x = nf.placeholder((29, 18), name="x")
    check(lambda: [nf.compute((18, 29), lambda i, j: x[j, i] * 3.0)], [x], [randn(29, 18)],
          seed=7)


def test_batch_matmul():
    a, b = nf.placeholder((3, 10, 12), name="a"), nf.placeholder((3, 12, 17), name="b")

    def make():
        k = nf.reduce_axis(12, name="k")
        return [nf.compute((3, 10, 17), lambda n, i, j: nf.sum(a[n, i, k] * b[n, k, j],
                                                                 axis=k))]
    check(make, [a, b], [randn(3, 10, 12), randn(3, 12, 17)], seed=8)


def test_row_mean_unit_stride():
    x = nf.placeholder((6, 45), name="x")

    def make():
        r = nf.reduce_axis(45, name="r")
        return [nf.compute((6,), lambda i: nf.sum(x[i, r], axis=r) / 45.0)]
    check(make, [x], [randn(6, 45)], seed=9)


def test_max_pool():
    x = nf.placeholder((2, 3, 10, 9), name="x")
    check(lambda: [nf.nn.max_pool2d(x, 3, stride=2, padding=1)], [x], [randn(2, 3, 10, 9)],
          seed=10)


def test_fused_matmul_bias_relu():
    """Two stages in one kernel: the product, then bias and ReLU."""
    a, b, c = (nf.placeholder((17, 11), name="a"), nf.placeholder((11, 20), name="b"),
               nf.placeholder((20,), name="c"))

    def make():
        k = nf.reduce_axis(11, name="k")
        mm = nf.compute((17, 20), lambda i, j: nf.sum(a[i, k] * b[k, j], axis=k))
        return [mm, nf.compute((17, 20), lambda i, j: nf.maximum(mm[i, j] + c[j], 0.0))]
    check(make, [a, b, c], [randn(17, 11), randn(11, 20), randn(20)], seed=11)


def test_fused_softmax_three_stages():
    """Row max, exponentials, normalisation: one kernel of three stages."""
    x = nf.placeholder((8, 21), name="x")

    def make():
        r, q = nf.reduce_axis(21, name="r"), nf.reduce_axis(21, name="q")
        m = nf.compute((8,), lambda i: nf.max(x[i, r], axis=r))
        e = nf.compute((8, 21), lambda i, j: nf.exp(x[i, j] - m[i]))
        return [m, e, nf.compute((8, 21), lambda i, j: e[i, j] / nf.sum(e[i, q], axis=q))]
    check(make, [x], [randn(8, 21)], seed=12)


def test_capsule_convolution():
    from neoflow.zoo.workloads import capsule_conv
    [w] = capsule_conv(batch=1, channels=2, size=5, caps=2, kernel=3)
    X, W = w.inputs
    out = w.outputs[0]
    values = [randn(*X.shape), randn(*W.shape)]

    def make():
        return [nf.compute(out.shape, lambda *i: _capsule_body(out, *i))]
    check(make, [X, W], values, seed=13)


def _capsule_body(out, *index):
    """`out`'s body over the new compute's axes."""
    return substitute(out.op.body, dict(zip(out.op.axes, index)))
