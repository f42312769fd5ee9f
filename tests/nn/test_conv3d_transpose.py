"""conv3d, conv_transpose2d, the 3-D pools and the adaptive pools against
torch in float64: forward and the gradients of every input (data, weight,
bias) through compiled code (nf.build, default schedules), over strides
1..3, paddings 0..2, dilations 1..2, groups 1 and C, output_padding and odd
sizes; the errors of unsupported or malformed arguments."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import neoflow as nf
from neoflow.errors import NeoFlowError, ShapeError


def check(ours, theirs, shapes, seed=0, build=True):
    """ours(*placeholders) and theirs(*torch tensors) agree, and so do the
    gradients of all inputs for a random head."""
    rng = np.random.default_rng(seed)
    phs = [nf.placeholder(s, dtype="float64", name=f"a{n}") for n, s in enumerate(shapes)]
    values = [rng.standard_normal(s) for s in shapes]
    y = ours(*phs)
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    ty = theirs(*ts)
    assert y.shape == tuple(ty.shape)
    head = rng.standard_normal(y.shape)
    hp = nf.placeholder(y.shape, dtype="float64", name="head")
    outs = [y] + list(nf.grad(y, phs, head=hp))
    got = nf.build(outs, phs + [hp])(*values, head) if build else \
        nf.evaluate(outs, {**dict(zip(phs, values)), hp: head})
    ty.backward(torch.tensor(head))
    np.testing.assert_allclose(got[0], ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    for n, (g, t) in enumerate(zip(got[1:], ts)):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-10, atol=1e-10,
                                   err_msg=f"gradient of input {n}")


# (stride, padding, dilation, groups) per case; C_in = 4, odd sizes
CONV3D = [(1, 0, 1, 1), (2, 1, 1, 1), (3, 2, 1, 1), (1, 1, 2, 1), (2, 2, 2, 4),
          ((1, 2, 3), (2, 0, 1), (1, 2, 1), 2), (1, "same", 1, 1), (1, "valid", 2, 4)]


@pytest.mark.filterwarnings("ignore:Using padding=.same.")
@pytest.mark.parametrize("stride,padding,dilation,groups", CONV3D)
def test_conv3d(stride, padding, dilation, groups):
    cout = 4 if groups == 4 else 6
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    check(lambda x, w, b: nf.nn.conv3d(x, w, b, **kw),
          lambda x, w, b: F.conv3d(x, w, b, **kw),
          [(2, 4, 5, 7, 9), (cout, 4 // groups, 3, 2, 3), (cout,)])


def test_conv3d_unbatched_without_bias():
    check(lambda x, w: nf.nn.conv3d(x, w, padding=1), lambda x, w: F.conv3d(x, w, padding=1),
          [(3, 5, 4, 5), (2, 3, 3, 3, 3)])


# (stride, padding, output_padding, dilation, groups); C_in = 4
TRANSPOSE = [(1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (2, 0, 0, 1, 4), (3, 2, 2, 1, 1),
             (3, 1, 0, 2, 1), (2, 2, 1, 2, 2), (1, 1, 1, 2, 1), ((2, 3), (1, 0), (1, 2), (1, 2), 1),
             (2, 1, 0, 1, 2)]


@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups", TRANSPOSE)
def test_conv_transpose2d(stride, padding, output_padding, dilation, groups):
    cout_g = 1 if groups == 4 else 3
    kw = dict(stride=stride, padding=padding, output_padding=output_padding,
              dilation=dilation, groups=groups)
    check(lambda x, w, b: nf.nn.conv_transpose2d(x, w, b, **kw),
          lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
          [(2, 4, 5, 7), (4, cout_g, 3, 4), (cout_g * groups,)])


def test_conv_transpose2d_dcgan_layer_unbatched():
    """4x4 kernel, stride 2, padding 1 (DCGAN's upsampling), no batch dimension."""
    check(lambda x, w: nf.nn.conv_transpose2d(x, w, stride=2, padding=1),
          lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1),
          [(5, 3, 3), (5, 2, 4, 4)])


def test_conv_transpose2d_evaluate_agrees():
    check(lambda x, w: nf.nn.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
          lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
          [(1, 2, 3, 3), (2, 3, 3, 3)], build=False)


POOL3D = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
          dict(kernel_size=(1, 3, 2), stride=(1, 2, 3), padding=(0, 1, 1), ceil_mode=True),
          dict(kernel_size=3, stride=1, padding=1, dilation=2),
          dict(kernel_size=2, stride=3, ceil_mode=True)]


@pytest.mark.parametrize("kw", POOL3D)
def test_max_pool3d(kw):
    check(lambda x: nf.nn.max_pool3d(x, **kw), lambda x: F.max_pool3d(x, **kw),
          [(2, 3, 5, 7, 9)])


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1,
                                     count_include_pad=False, ceil_mode=True),
                                dict(kernel_size=(3, 2, 2), stride=(2, 1, 3), padding=(1, 0, 1),
                                     ceil_mode=True),
                                dict(kernel_size=2, divisor_override=3)])
def test_avg_pool3d(kw):
    check(lambda x: nf.nn.avg_pool3d(x, **kw), lambda x: F.avg_pool3d(x, **kw),
          [(2, 3, 5, 7, 9)])


@pytest.mark.parametrize("size", [1, (2, 3, 4), (None, 5, 3), 3])
def test_adaptive_avg_pool3d(size):
    check(lambda x: nf.nn.adaptive_avg_pool3d(x, size),
          lambda x: F.adaptive_avg_pool3d(x, size), [(2, 3, 5, 7, 9)])


@pytest.mark.parametrize("size", [1, (3, 4), (None, 2), 7, (5, 5)])
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_adaptive_pool2d(kind, size):
    ours = {"avg": nf.nn.adaptive_avg_pool2d, "max": nf.nn.adaptive_max_pool2d}[kind]
    theirs = {"avg": F.adaptive_avg_pool2d, "max": F.adaptive_max_pool2d}[kind]
    check(lambda x: ours(x, size), lambda x: theirs(x, size), [(2, 3, 7, 10)])


def test_adaptive_pool_unbatched():
    check(lambda x: nf.nn.adaptive_avg_pool2d(x, 3), lambda x: F.adaptive_avg_pool2d(x, 3),
          [(3, 7, 5)])


def test_errors_name_the_argument():
    x = nf.placeholder((2, 4, 5, 7), name="x")
    w = nf.placeholder((4, 3, 3, 3), name="w")
    with pytest.raises(NeoFlowError, match="output_padding 2 .* smaller than the stride"):
        nf.nn.conv_transpose2d(x, w, stride=2, output_padding=2)
    with pytest.raises(ShapeError, match="weight 'w' expects 4"):
        nf.nn.conv_transpose2d(nf.placeholder((2, 3, 5, 7), name="x3"), w)
    with pytest.raises(NeoFlowError, match="no 'same'"):
        nf.nn.conv_transpose2d(x, w, padding="same")
    with pytest.raises(ShapeError, match="bias 'b' has shape"):
        nf.nn.conv_transpose2d(x, w, nf.placeholder((4,), name="b"))
    with pytest.raises(ShapeError, match="conv3d: input 'x2' must be 5-d"):
        nf.nn.conv3d(nf.placeholder((4, 5, 7), name="x2"), nf.placeholder((4, 4, 3, 3, 3)))
    with pytest.raises(NeoFlowError, match="return_indices=True is not supported"):
        nf.nn.adaptive_max_pool2d(x, 2, return_indices=True)
    with pytest.raises(NeoFlowError, match="return_indices=True is not supported"):
        nf.nn.max_pool3d(nf.placeholder((2, 3, 4, 4, 4), name="v"), 2, return_indices=True)
    with pytest.raises(ShapeError, match="max_pool3d: input 'x2' must be 5-d"):
        nf.nn.max_pool3d(nf.placeholder((4, 5, 7), name="x2"), 2)
    with pytest.raises(NeoFlowError, match="output_size must be an int or a tuple of 2"):
        nf.nn.adaptive_avg_pool2d(x, (1, 2, 3))
    with pytest.raises(ShapeError, match="output_size must be >= 1"):
        nf.nn.adaptive_avg_pool2d(x, 0)
    with pytest.raises(NeoFlowError, match="divisor_override must be a non-zero int"):
        nf.nn.avg_pool3d(nf.placeholder((2, 3, 4, 4, 4), name="v"), 2, divisor_override=0)
