"""nf.flops: exact counts on small cases, and the cost bounds of gradients
(backward at most 1.5x the forward's flops)."""
import pytest

import neoflow as nf
from neoflow.te.visit import topo_tensors


def _grad(y, x):
    head = nf.placeholder(y.shape, y.dtype, name="head")
    return nf.grad(y, [x], head=head)[0]


def _forward(y):
    return [t for t in topo_tensors([y]) if t.is_compute]


def test_matmul_counts_a_multiply_add_per_iteration():
    A, B = nf.placeholder((3, 5), name="A"), nf.placeholder((5, 4), name="B")
    k = nf.reduce_axis(5, name="k")
    C = nf.compute((3, 4), lambda i, j: nf.sum(A[i, k] * B[k, j], axis=k))
    assert nf.flops(C) == 2 * 3 * 4 * 5
    assert nf.flops([C, C]) == nf.flops(C)
    assert nf.flops(A) == 0


def test_where_conditions_remove_iterations_exactly():
    x = nf.placeholder((8,), name="x")
    k = nf.reduce_axis(8, name="k")
    tri = nf.compute((8,), lambda i: nf.sum(x[k] * 2.0, axis=k, where=k <= i))
    assert nf.flops(tri) == 2 * 36            # a mul and an add per (i, k <= i)
    pad = nf.compute((10,), lambda i: nf.where((i >= 1) & (i <= 8), nf.exp(x[i - 1]), 0.0))
    assert nf.flops(pad) == 8


def test_integer_work_is_free_and_shared_subexpressions_count_once():
    x = nf.placeholder((4,), name="x")
    n = nf.placeholder((4,), "int64", name="n")
    y = nf.compute((4,), lambda i: x[(n[i] * 3 + i) % 4] * 2.0)
    assert nf.flops(y) == 4
    z = nf.compute((4,), lambda i: (lambda e: e * e)(nf.exp(x[i])))
    assert nf.flops(z) == 8


def test_given_tensors_are_free():
    x = nf.placeholder((4,), name="x")
    y = nf.compute((4,), lambda i: nf.exp(x[i]))
    z = nf.compute((4,), lambda i: y[i] * 2.0)
    assert nf.flops(z) == 8 and nf.flops(z, given=[y]) == 4


def test_one_hot_selections_count_once_per_selected_element():
    ids = nf.placeholder((6,), "int64", name="ids")
    w = nf.placeholder((10, 3), name="w")
    y = nf.nn.embedding(ids, w)
    dw = _grad(y, w)
    assert nf.flops(dw) == 6 * 3             # one add per looked-up element


def test_data_dependent_where_costs_its_costlier_branch():
    x = nf.placeholder((4,), name="x")
    y = nf.compute((4,), lambda i: nf.where(x[i] > 0, nf.exp(x[i]) * 2.0, x[i]))
    assert nf.flops(y) == 4 * (1 + 2)


@pytest.mark.parametrize("dilation,padding", [(2, 1), (1, 0), (3, 2)])
def test_conv2d_input_and_weight_gradients(dilation, padding):
    x = nf.placeholder((2, 8, 16, 16), name="x")
    w = nf.placeholder((8, 8, 3, 3), name="w")
    y = nf.nn.conv2d(x, w, stride=2, dilation=dilation, padding=padding)
    forward = nf.flops(y)
    assert nf.flops(_grad(y, x)) <= 1.5 * forward
    assert nf.flops(_grad(y, w)) <= 1.5 * forward


@pytest.mark.parametrize("kw", [dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=1), dict(kernel_size=2)])
def test_pooling_gradients(kw):
    x = nf.placeholder((2, 4, 12, 12), name="x")
    for pool, bound in ((nf.nn.max_pool2d, 2.5), (nf.nn.avg_pool2d, 1.5)):
        # max: the first-maximum pass (one compare per element, 1x) and the gather
        # (nn/pool_grad.py) whose ceil(k/s)^2 candidate terms per input point the
        # model counts as all adding (their data condition is not an affine one-hot)
        y = pool(x, **kw)
        assert nf.flops(_grad(y, x), given=_forward(y)) <= bound * nf.flops(y)


def test_matmul_gradients():
    A, B = nf.placeholder((16, 32), name="A"), nf.placeholder((32, 24), name="B")
    y = nf.nn.matmul(A, B)
    assert nf.flops(_grad(y, A)) <= 1.0 * nf.flops(y)
    assert nf.flops(_grad(y, B)) <= 1.0 * nf.flops(y)


@pytest.mark.parametrize("op", [nf.nn.softmax, nf.nn.log_softmax])
def test_softmax_gradients(op):
    x = nf.placeholder((8, 64), name="x")
    y = op(x, -1)
    assert nf.flops(_grad(y, x), given=_forward(y)) <= 1.5 * nf.flops(y)


def test_condition_share_counts_the_grid_where_an_index_condition_holds():
    from neoflow.te.flops import condition_share
    i, j = nf.reduce_axis(7, name="i"), nf.reduce_axis(5, name="j")
    assert condition_share(i + j < 4, [i, j]) == 10 / 35
    assert condition_share((i >= 2) & (j <= 1), [i, j]) == 10 / 35
    assert condition_share(i >= 0, [i, j]) == 1.0
