"""Partition boundaries: the forward hands out the views of its results it
saves (the pieces of a split) as one as_strided each, and the backward
reads them (and transposed inputs) in place through their strides -- no
contiguous copy per call -- with eager's values and gradients in float64; a tensor that arrives with other strides than the graph's is
copied into them first (direct.in_layout), and the checked call reads the
same span (flat_span)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neoflow as nf  # noqa: E402
from neoflow.frontends.torch.direct import flat_span, in_layout  # noqa: E402
from neoflow.frontends.torch.report import compiled_for  # noqa: E402


def _split_cell(x, w):
    a, b, c = torch.split(torch.tanh(x @ w), [3, 4, 2], dim=1)
    return (torch.sigmoid(a[:, :2]) * b[:, 1:3] + c).sum() + (a.exp() ** 2).sum()


def _graphs_with_eager_gradients(cell, x, w, backend, calls=1):
    """Compile `cell` through the backend (fallback="error"), call it `calls`
    times (the last runs what the first compiled), check its value and
    gradients against eager in float64; the graph records it made."""
    seen = len(compiled_for())
    step = torch.compile(cell, backend=backend, options={"fallback": "error"},
                         dynamic=False, fullgraph=True)
    for _ in range(calls):
        x.grad = w.grad = None
        out = step(x, w)
        out.backward()
        got = (out.item(), x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    want = cell(x, w)
    want.backward()
    np.testing.assert_allclose(got[0], want.item(), rtol=1e-12)
    np.testing.assert_allclose(got[1].numpy(), x.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[2].numpy(), w.grad.numpy(), rtol=1e-10, atol=1e-12)
    return [gr for c in compiled_for()[seen:] for gr in c.graphs]


def test_saved_views_are_read_in_place_with_eager_gradients(nf_backend):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(5, 6, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(6, 9, dtype=torch.float64, generator=g, requires_grad=True)
    graphs = _graphs_with_eager_gradients(_split_cell, x, w, nf_backend, calls=2)
    forward = [gr for gr in graphs if gr["kind"] == "forward"]
    views = {op for gr in forward for op in gr["views"]}
    assert "aten.as_strided.default" in views           # the saved pieces: one call each
    assert not views & {"aten.split_with_sizes.default", "getitem"}
    backward = [gr for gr in graphs if gr["kind"] == "backward"]
    layouts = [lay for gr in backward for r in gr.runners for lay in r.layouts if lay]
    assert ((5, 3), (9, 1)) in layouts and ((5, 2), (9, 1)) in layouts    # split pieces
    assert all(r._direct is not None for gr in backward for r in gr.runners)


def test_in_layout_and_flat_span():
    base = torch.arange(24.0).view(4, 6)
    piece = base[:, 1:4]
    layout = ((4, 3), (6, 1))
    assert in_layout(piece, layout) is piece                       # the same strides: as is
    other = piece.contiguous()
    moved = in_layout(other, layout)
    assert moved.stride() == (6, 1) and torch.equal(moved, piece)  # copied into the layout
    span = flat_span(piece, layout)
    assert span.shape == (3 * 6 + 3,) and span[0] == 1.0 and span[-1] == 21.0
    np.testing.assert_array_equal(span.numpy()[[0, 6, 8]], [1.0, 7.0, 9.0])
    t = base.t()
    assert torch.equal(flat_span(t, ((6, 4), (1, 6))), base.flatten())


def _transposed_cell(x, w):
    return (torch.tanh(x.t() @ w) * x.t().sin()[:, :1]).sum()


def test_transposed_saves_stand_in_with_their_dims_in_memory_order(nf_backend):
    from neoflow.frontends.torch.backend import _storage_order
    assert _storage_order((4, 3), (1, 4)) == [1, 0]
    assert _storage_order((2, 1, 3), (1, 7, 2)) == [2, 0]      # (a size-1 dim: any stride)
    assert _storage_order((5, 3), (9, 1)) is None              # a split's piece: gaps
    g = torch.Generator().manual_seed(8)
    x = torch.randn(7, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(7, 3, dtype=torch.float64, generator=g, requires_grad=True)
    graphs = _graphs_with_eager_gradients(_transposed_cell, x, w, nf_backend)
    permuted = [(r, n) for gr in graphs for r in gr.runners
                for n, lay in enumerate(r.layouts) if lay and _storage_order(*lay)]
    assert permuted, "no transposed input was read in place"
    for runner, n in permuted:
        stand_in = runner.lowered[1][n]
        shape, strides = runner.layouts[n]
        assert len(stand_in.shape) == len([d for d in shape if d > 1]) > 1
        assert sorted(stand_in.shape) == sorted(d for d in shape if d > 1)
    runner, _ = permuted[0]
    values = [torch.randn(tuple(s), dtype=dtype, generator=g) for s, dtype in runner._direct.inputs]
    args = [torch.empty_strided(v.shape, lay[1], dtype=v.dtype).copy_(v) if lay else v
            for v, lay in zip(values, runner.layouts)]
    fast = runner(*args)
    runner._direct = None                 # the checked call: the same span, reshaped
    slow = runner(*args)
    for a, b in zip(fast if isinstance(fast, tuple) else [fast],
                    slow if isinstance(slow, tuple) else [slow]):
        assert torch.equal(a, b)
