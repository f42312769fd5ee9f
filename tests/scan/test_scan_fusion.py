"""Fusion through scans: the forward and the reverse scan's steps are
partitioned into fused kernels like any graph, and the gradient of a
parameter read at every step is one reduction over t (and the batch)."""
import neoflow as nf
from neoflow.te.expr import Reduce
from neoflow.te.visit import post_order, topo_tensors
from neoflow.zoo.lstm_scan import lstm_layer

T, B, I, H = 9, 2, 3, 4


def _lstm():
    x = nf.placeholder((T, B, I), name="x")
    h0 = nf.placeholder((B, H), name="h0")
    ws = [nf.placeholder(s, name=n) for n, s in
          [("wi", (4 * H, I)), ("wh", (4 * H, H)), ("bi", (4 * H,)), ("bh", (4 * H,))]]
    hs, _ = lstm_layer(x, h0, h0, *ws)
    r = [nf.reduce_axis(n) for n in hs.shape]
    loss = nf.compute((), lambda: nf.sum(hs[tuple(r)], axis=r))
    return loss, [x, h0] + ws


def test_parameter_gradient_over_t_is_one_reduction():
    loss, inputs = _lstm()
    dwh = nf.grad(loss, [inputs[3]])[0]
    reduces = [n for n in post_order(dwh.op.body) if isinstance(n, Reduce)]
    assert len(reduces) == 1
    assert sorted(a.extent for a in reduces[0].axes) == sorted([T, B])


def test_forward_and_reverse_steps_fuse():
    loss, inputs = _lstm()
    f = nf.build(nf.grad(loss, inputs), inputs)
    steps = [entry[3][0] for entry in f._plan]
    assert len(steps) == 2       # the forward scan and its reverse scan
    for step in steps:
        computes = [t for t in topo_tensors(step.outputs) if t.is_compute]
        assert len(step.kernels) < len(computes), (len(step.kernels), len(computes))


def test_inputs_read_alike_share_one_gradient():
    """b_ih and b_hh enter the gates the same way: one reduction serves both."""
    loss, inputs = _lstm()
    dbi, dbh = nf.grad(loss, inputs[4:])
    assert dbi is dbh
    dwi, dwh = nf.grad(loss, inputs[2:4])
    assert dwi is not dwh
