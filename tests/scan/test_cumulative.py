"""nf.nn.cumsum / cumprod (built on nf.scan) against torch in float64."""
import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow.errors import NeoFlowError

from scan_check import check


@pytest.mark.parametrize("shape,dim", [((7,), 0), ((3, 5), 1), ((3, 5), -2), ((2, 3, 4), -1),
                                       ((2, 3, 4), 1)])
def test_cumsum(shape, dim):
    check(lambda x: nf.nn.cumsum(x, dim), lambda x: torch.cumsum(x, dim), [shape])


@pytest.mark.parametrize("shape,dim", [((6,), 0), ((3, 5), -1), ((2, 3, 4), 0)])
def test_cumprod(shape, dim):
    check(lambda x: nf.nn.cumprod(x, dim), lambda x: torch.cumprod(x, dim), [shape])


def test_cumprod_gradient_with_zeros_matches_torch():
    xv = np.array([[1.5, 0.0, 2.0, -0.7, 0.0, 1.1], [0.3, -2.0, 0.0, 1.2, 0.9, 0.8]])
    x = nf.placeholder(xv.shape, "float64", name="x")
    y = nf.nn.cumprod(x, 1)
    head = nf.placeholder(y.shape, "float64", name="head")
    hv = np.random.default_rng(1).normal(size=xv.shape)
    got, (dx,) = nf.evaluate(y, {x: xv}), nf.evaluate(nf.grad(y, [x], head=head), {x: xv, head: hv})
    xt = torch.tensor(xv, requires_grad=True)
    yt = torch.cumprod(xt, 1)
    yt.backward(torch.tensor(hv))
    np.testing.assert_allclose(got, yt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_cumsum_bad_dim_names_the_op():
    x = nf.placeholder((3, 4), name="x")
    with pytest.raises(NeoFlowError, match="cumsum: dim=2 is out of range"):
        nf.nn.cumsum(x, 2)
