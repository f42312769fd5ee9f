"""softmax/log_softmax compiled with their passes over a row chained in one
parallel loop (schedule/default.py, `_rereads_rows`), forward and gradient
against torch in float64 on odd sizes."""
import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow.errors import NeoFlowError


@pytest.mark.parametrize("op,ref", [(nf.nn.softmax, torch.softmax),
                                    (nf.nn.log_softmax, torch.log_softmax)])
@pytest.mark.parametrize("shape,dim", [((37, 53), 1), ((37, 53), 0), ((3, 5, 41), -1)])
def test_softmax_forward_and_gradient(op, ref, shape, dim):
    rng = np.random.default_rng(0)
    xv, gv = rng.standard_normal(shape) * 3, rng.standard_normal(shape)
    xv.flat[::7] = xv.flat[0]       # repeated maxima in some rows
    x = nf.placeholder(shape, "float64", name="x")
    y = op(x, dim)
    g = nf.placeholder(shape, "float64", name="g")
    (dx,) = nf.grad(y, [x], head=g)
    f = nf.build([y, dx], [x, g])
    xt = torch.tensor(xv, requires_grad=True)
    yt = ref(xt, dim)
    yt.backward(torch.tensor(gv))
    got_y, got_dx = f(xv, gv)
    np.testing.assert_allclose(got_y, yt.detach().numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got_dx, xt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_row_passes_run_in_one_loop():
    x = nf.placeholder((256, 301), name="x")
    f = nf.build(nf.nn.softmax(x, 1), [x])
    (config,) = f.configs
    assert [sc.compute_at for sc in config.stages] == [False, True, True]
    assert f.source.count("#pragma omp parallel") == 1
    xv = np.random.default_rng(1).standard_normal((256, 301)).astype(np.float32)
    np.testing.assert_allclose(f(xv), torch.softmax(torch.tensor(xv), 1).numpy(), atol=1e-6)


def test_softmax_without_dim_is_an_error():
    with pytest.raises(NeoFlowError):
        nf.nn.softmax(nf.placeholder((3, 4), name="x"), None)
