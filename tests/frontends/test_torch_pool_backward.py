"""The max-pool backward's lowering reads torch's saved indices: fed
indices that are not the window maxima (any in-window positions), it
routes each gradient where they say, as aten.max_pool2d_with_indices_backward
does -- float64, nf.evaluate of the lowered expression against torch, over
tiled, overlapping, padded, dilated and ceil-mode geometries."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neoflow as nf  # noqa: E402
from neoflow.frontends.torch.lowering import TABLE, Context  # noqa: E402
from neoflow.te.expr import Reduce  # noqa: E402

aten = torch.ops.aten
BACKWARD = aten.max_pool2d_with_indices_backward.default

GEOMETRIES = [   # (input shape, kernel, stride, padding, dilation, ceil_mode)
    ((2, 3, 6, 8), [2, 2], [2, 2], [0, 0], [1, 1], False),      # tiles the input
    ((2, 3, 7, 8), [2, 3], [2, 3], [0, 0], [1, 1], False),      # rows left over
    ((1, 2, 7, 8), [3, 3], [2, 2], [1, 1], [1, 1], True),       # overlapping, padded
    ((1, 2, 9, 8), [3, 3], [2, 1], [1, 1], [2, 2], False),      # dilated
    ((3, 5, 5), [3, 2], [2, 1], [0, 1], [1, 1], True),          # no batch dimension
]


def _random_indices(x, kernel, stride, padding, dilation, ceil_mode, g):
    """Per output, the flat index of a random in-input position of its
    window (torch's max_pool2d indices say where the maximum was; these
    need not), and the output shape."""
    out = torch.ops.aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation,
                                                 ceil_mode)[0]
    oh, ow = out.shape[-2:]
    h, w = x.shape[-2:]
    idx = np.empty(out.shape, np.int64)
    rng = np.random.default_rng(g)
    for pos in np.ndindex(*out.shape):
        a, b = pos[-2:]
        rows = [a * stride[0] - padding[0] + k * dilation[0] for k in range(kernel[0])]
        cols = [b * stride[1] - padding[1] + k * dilation[1] for k in range(kernel[1])]
        rows = [r for r in rows if 0 <= r < h]
        cols = [c for c in cols if 0 <= c < w]
        idx[pos] = rng.choice(rows) * w + rng.choice(cols)
    assert idx.shape[-2:] == (oh, ow)
    return torch.from_numpy(idx)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[0])))
def test_backward_routes_by_the_given_indices(geometry):
    shape, kernel, stride, padding, dilation, ceil_mode = geometry
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    indices = _random_indices(x, kernel, stride, padding, dilation, ceil_mode, 5)
    grad = torch.randn(*indices.shape, generator=gen, dtype=torch.float64)
    args = (grad, x, kernel, stride, padding, dilation, ceil_mode, indices)
    want = BACKWARD(*args)
    gp = nf.placeholder(tuple(grad.shape), "float64", name="g")
    xp = nf.placeholder(tuple(x.shape), "float64", name="x")
    ip = nf.placeholder(tuple(indices.shape), "int64", name="i")
    ours = TABLE[BACKWARD](Context(want, args, "pool_bw"), gp, xp, kernel, stride, padding,
                           dilation, ceil_mode, ip)
    assert tuple(ours.shape) == tuple(want.shape)
    got = nf.evaluate(ours, {gp: grad.numpy(), xp: x.numpy(), ip: indices.numpy()})
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)
    built = nf.build(ours, [gp, xp, ip])
    np.testing.assert_allclose(built(grad.numpy(), x.numpy(), indices.numpy()), want.numpy(),
                               rtol=1e-12, atol=1e-12)
    tiles = kernel == stride and padding == [0, 0] and shape[-2] % kernel[0] == 0 and \
        shape[-1] % kernel[1] == 0
    assert isinstance(ours.op.body, Reduce) != tiles      # a tiling pooling: one read each
