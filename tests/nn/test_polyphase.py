"""The polyphase input gradient of strided convolutions (nn/polyphase.py):
against torch in float64 through compiled code for strides 1..3, odd sizes,
paddings, dilations, groups and bias, with the edges guarded in the value
and bounding the tap loops; conv3d and conv_transpose2d (which is this
gradient); the rule really replaces the solver's gradient; its flops are the
forward's; random valid schedules of the phase compute agree."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import neoflow as nf
from neoflow.graph import kernels_for
from neoflow.nn import polyphase
from neoflow.schedule import default_config, sample_config
from neoflow.te.printer import expr_str
from neoflow.te.visit import reads

from test_conv3d_transpose import check  # noqa: E402 (tests/nn is on sys.path)


@pytest.fixture(params=["guarded", "bounded"])
def edges(request, monkeypatch):
    """Both forms of the edges: guards in the value, or bounds of the tap loops."""
    monkeypatch.setattr(polyphase, "EDGE_WASTE", float("inf") if request.param == "guarded"
                        else 0.0)
    return request.param


# (stride, padding, dilation, groups, kernel, bias); C_in = 4, 13x11 input
CONV2D = [(2, 0, 1, 1, 3, False), (2, 1, 1, 1, 3, True), (3, 2, 1, 1, 3, False),
          (2, 1, 1, 4, 4, True), (3, 1, 1, 2, 5, False), ((2, 1), (1, 2), (1, 2), 1, 3, True),
          ((1, 3), 0, 1, 1, (2, 3), False), (2, 3, 1, 1, 9, True), (2, 1, 2, 1, 3, False),
          (1, 1, 1, 1, 3, False)]


@pytest.mark.parametrize("stride,padding,dilation,groups,kernel,bias", CONV2D)
def test_conv2d_gradients(edges, stride, padding, dilation, groups, kernel, bias):
    cout = 4 if groups == 4 else 6
    ks = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    shapes = [(2, 4, 13, 11), (cout, 4 // groups) + ks] + ([(cout,)] if bias else [])
    check(lambda *a: nf.nn.conv2d(*a, **kw), lambda *a: F.conv2d(*a, **kw), shapes)


@pytest.mark.parametrize("width", [9, 67])
def test_depthwise(edges, width):
    """Depthwise: split over rows at least DEPTHWISE_MIN_WIDTH wide, the
    solver's form over narrower ones; both match torch."""
    kw = dict(stride=2, padding=1, groups=3)
    check(lambda x, w, b: nf.nn.conv2d(x, w, b, **kw), lambda x, w, b: F.conv2d(x, w, b, **kw),
          [(2, 3, 7, width), (3, 1, 3, 3), (3,)])
    x = nf.placeholder((2, 3, 7, width), name="x")
    y = nf.nn.conv2d(x, nf.placeholder((3, 1, 3, 3), name="w"), **kw)
    dx, = nf.grad(y, [x], head=nf.placeholder(y.shape, name="head"))
    split = getattr(dx.op.body, "tensor", dx).name == "dx_phases"
    assert split == (width >= polyphase.DEPTHWISE_MIN_WIDTH)


def test_conv2d_unbatched_one_output_channel():
    check(lambda x, w: nf.nn.conv2d(x, w, stride=2, padding=1),
          lambda x, w: F.conv2d(x, w, stride=2, padding=1), [(3, 9, 8), (1, 3, 4, 4)])


@pytest.mark.parametrize("stride,padding,groups", [(2, 1, 1), ((1, 2, 3), (0, 1, 2), 2),
                                                   (3, 0, 4)])
def test_conv3d_gradients(edges, stride, padding, groups):
    cout = 4 if groups == 4 else 6
    kw = dict(stride=stride, padding=padding, groups=groups)
    check(lambda x, w, b: nf.nn.conv3d(x, w, b, **kw), lambda x, w, b: F.conv3d(x, w, b, **kw),
          [(2, 4, 7, 9, 8), (cout, 4 // groups, 3, 3, 3), (cout,)])


@pytest.mark.parametrize("stride,padding,output_padding,groups", [
    (2, 1, 0, 1), (2, 1, 1, 2), (3, 2, 2, 1), (2, 0, 1, 4), ((3, 2), (0, 1), (1, 0), 1)])
def test_conv_transpose2d(edges, stride, padding, output_padding, groups):
    kw = dict(stride=stride, padding=padding, output_padding=output_padding, groups=groups)
    check(lambda x, w, b: nf.nn.conv_transpose2d(x, w, b, **kw),
          lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
          [(2, 4, 5, 7), (4, 3, 4, 3), (3 * groups,)])


def _dx(stride, kernel, padding=0, dilation=1, bias=False, size=(1, 4, 17, 15)):
    x = nf.placeholder(size, name="x")
    w = nf.placeholder((6, 4, kernel, kernel), name="w")
    b = nf.placeholder((6,), name="b") if bias else None
    y = nf.nn.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation)
    head = nf.placeholder(y.shape, name="head")
    dx, = nf.grad(y, [x], head=head)
    return x, w, y, dx


@pytest.mark.parametrize("bias", [False, True])
def test_the_rule_replaces_the_solver(bias):
    """A strided conv's dx is the gather of the phase compute, whose reads
    are dense: g at a - t (unit stride along the last axis), bias or not."""
    _, _, _, dx = _dx(2, 9, bias=bias)
    phases = dx.op.body.tensor
    assert phases.name == "dx_phases" and phases.shape == (1, 4, 2, 2, 9, 8)
    head_read = [r for r in reads(phases.op.body) if r.tensor.name == "head"][0]
    assert [expr_str(i) for i in head_read.indices[-2:]] == ["(n - t0)", "(o - t1)"]


@pytest.mark.parametrize("stride,kernel,dilation", [(1, 1, 1), (2, 1, 1), (2, 3, 2)])
def test_ineligible_keep_the_solver(stride, kernel, dilation):
    """A 1x1 convolution, fewer taps than the stride (empty phases) and dilated
    strided dimensions keep the solver's gradient."""
    _, _, _, dx = _dx(stride, kernel, dilation=dilation)
    assert not polyphase.eligible((stride,) * 2, (dilation,) * 2, (kernel,) * 2)
    assert "phases" not in str(getattr(dx.op.body, "tensor", dx).name)


@pytest.mark.parametrize("dilation", [1, 2])
def test_an_unstrided_conv_gets_the_guarded_form_without_phases(dilation):
    """Stride 1: no phases and no gather; 3x3 pad 1, the taps fixed (no
    `where=` range tied to the output point), the edges guarded in the value
    (dilated, past EDGE_WASTE: the edges bound the taps); against torch in
    float64 (test_conv2d_gradients' unit-stride rows too)."""
    _, _, y, dx = _dx(1, 3, padding=1, dilation=dilation, size=(2, 4, 9, 8))
    assert dx.name == "dx" and (dx.op.body.cond is None) == (dilation == 1)
    if dilation == 1:
        assert nf.flops([dx]) == nf.flops([y])
    kw = dict(padding=1, dilation=dilation)
    check(lambda x, w: nf.nn.conv2d(x, w, **kw), lambda x, w: F.conv2d(x, w, **kw),
          [(2, 4, 9, 8), (6, 4, 3, 3)])


@pytest.mark.parametrize("padding", [0, 1, 4])
def test_flops(padding, monkeypatch):
    """Bounded edges do at most the forward's multiply-adds (the forward
    also counts its padding's); guarded ones more, at least as many as the forward."""
    flops = {}
    for waste in (0.0, float("inf")):
        monkeypatch.setattr(polyphase, "EDGE_WASTE", waste)
        _, _, y, dx = _dx(2, 9, padding=padding, size=(1, 4, 25, 23))
        flops[waste] = nf.flops([dx])
    assert flops[0.0] <= nf.flops([y]) <= flops[float("inf")]
    assert flops[0.0] < flops[float("inf")]


def test_default_choice_by_waste():
    """The CapsNet primary layer's 9x9/2 over a 6x6 output bounds the taps;
    a ResNet 3x3/2 guards them, and with each phase starting at its own
    first position it multiplies no padding at all."""
    _, _, y, dx = _dx(2, 9, size=(1, 4, 20, 20))
    assert nf.flops([dx]) == nf.flops([y])
    _, _, y, dx = _dx(2, 3, padding=1, size=(1, 4, 56, 56))
    assert nf.flops([dx]) == nf.flops([y])


@pytest.mark.parametrize("padding, size, phases", [(1, 8, (4, 4)), (1, 7, (4, 4)),
                                                   (0, 8, (4, 4)), (3, 8, (4, 4))])
def test_each_phase_starts_at_its_first_position(padding, size, phases):
    """Stride 2, padding 1 (DCGAN's 4x4/2 onto 8x8): phase 0 covers a = 1..4
    and phase 1 a = 0..3; shifted per phase, 4 positions each, not the 5 of
    their union."""
    _, _, _, dx = _dx(2, 4, padding=padding, size=(1, 4, size, size))
    assert dx.op.body.tensor.shape[-2:] == phases


@pytest.mark.parametrize("size, guarded", [(4, True), (8, True), (2, False)])
def test_a_transposed_convs_input_gradient_reads_the_phases_guarded(size, guarded):
    """conv_transpose2d 4x4/2's input gradient: the phases' own rule, a sum
    with no tap range tied to the output point (the solver's form bounds
    the taps by the output rows), up to INPUT_EDGE_WASTE; past it (a 2x2
    input: 1.78x) the solver's. Both match torch in float64."""
    x = nf.placeholder((2, 16, size, size), name="x")
    w = nf.placeholder((16, 8, 4, 4), name="w")
    y = nf.nn.conv_transpose2d(x, w, stride=2, padding=1)
    dx, = nf.grad(y, [x], head=nf.placeholder(y.shape, name="head"))
    assert (dx.op.body.cond is None) == guarded
    kw = dict(stride=2, padding=1)
    check(lambda x, w: nf.nn.conv_transpose2d(x, w, **kw),
          lambda x, w: F.conv_transpose2d(x, w, **kw), [(2, 3, size, size), (3, 5, 4, 4)])


@pytest.mark.parametrize("mode", ["guarded", "bounded"])
def test_random_schedules_of_the_phases(mode, monkeypatch):
    monkeypatch.setattr(polyphase, "EDGE_WASTE", float("inf") if mode == "guarded" else 0.0)
    rng = np.random.default_rng(3)
    x = nf.placeholder((2, 3, 11, 9), name="x")
    w = nf.placeholder((5, 3, 4, 3), name="w")
    g = nf.placeholder((2, 5, 5, 4), name="g")
    geometry = (1, (2, 2), (1, 0), (1, 1), 1, (5, 4))
    copies = [polyphase.input_grad(g, x, w, geometry).op.body.tensor for _ in range(13)]
    kernels = kernels_for(copies)
    configs = [default_config(kernels[0])] + [sample_config(k, 700 + n)
                                              for n, k in enumerate(kernels[1:])]
    assert len({c.to_json() for c in configs}) > 6
    values = [rng.standard_normal(g.shape).astype(np.float32),
              rng.standard_normal(w.shape).astype(np.float32)]
    got = nf.build(copies, [g, w], configs=configs)(*values)
    ref = nf.evaluate(copies[0], {g: values[0], w: values[1]})
    for config, out in zip(configs, got):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=config.to_json())
    dx = torch.nn.grad.conv2d_input(x.shape, torch.tensor(values[1], dtype=torch.float64),
                                    torch.tensor(values[0], dtype=torch.float64), stride=2,
                                    padding=(1, 0))
    gathered = nf.evaluate(polyphase.input_grad(g, x, w, geometry), {g: values[0], w: values[1]})
    np.testing.assert_allclose(gathered, dx.numpy(), rtol=1e-4, atol=1e-4)
