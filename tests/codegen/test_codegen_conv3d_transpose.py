"""Random valid schedules of conv3d and conv_transpose2d (forward and the
gradients' computes) agree with the default schedule and the reference
evaluator (the method of test_codegen_schedules.py)."""
import numpy as np

import neoflow as nf
from neoflow.graph import kernels_for
from neoflow.schedule import default_config, sample_config
from test_codegen_schedules import SCHEDULES, check_random_schedules, randn


def test_conv3d_random_schedules():
    x, w = nf.placeholder((2, 3, 5, 7, 6), name="x"), nf.placeholder((4, 3, 3, 2, 3), name="w")
    check_random_schedules(lambda: nf.nn.conv3d(x, w, stride=(1, 2, 1), padding=1,
                                                dilation=(2, 1, 1)),
                           [x, w], [randn(2, 3, 5, 7, 6), randn(4, 3, 3, 2, 3)], seed=11)


def test_conv3d_weight_gradient_random_schedules():
    x, g = nf.placeholder((2, 3, 5, 7, 6), name="x"), nf.placeholder((2, 4, 3, 4, 3), name="g")
    w = nf.placeholder((4, 3, 3, 3, 3), name="w")

    def make():
        return nf.grad(nf.nn.conv3d(x, w, stride=(1, 2, 2), padding=(0, 1, 1)), [w], head=g)[0]
    check_random_schedules(make, [x, g], [randn(2, 3, 5, 7, 6), randn(2, 4, 3, 4, 3)], seed=12)


def test_conv_transpose2d_random_schedules():
    """Strided: three computes (the weight by phase, the phases, their gather;
    nn/polyphase.py), each copy's three with random schedules, unfused."""
    x, w = nf.placeholder((2, 4, 5, 6), name="x"), nf.placeholder((4, 3, 4, 4), name="w")
    copies = [nf.nn.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1)
              for _ in range(SCHEDULES + 1)]
    kernels = kernels_for(copies)
    per_copy = len(kernels) // len(copies)
    configs = [default_config(k) if n < per_copy else sample_config(k, 13000 + n)
               for n, k in enumerate(kernels)]
    assert len({c.to_json() for c in configs}) > SCHEDULES    # really different schedules
    values = [randn(2, 4, 5, 6), randn(4, 3, 4, 4)]
    f = nf.build(copies, [x, w], configs=configs, fusion=False)
    assert [k.stages[0].name for k in f.kernels] == [k.stages[0].name for k in kernels]
    results = f(*values)
    ref = nf.evaluate(copies[0], dict(zip([x, w], values)))
    for n, got in enumerate(results):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=str(n))


def test_conv_transpose2d_input_gradient_random_schedules():
    w, g = nf.placeholder((4, 3, 3, 3), name="w"), nf.placeholder((2, 3, 11, 15), name="g")
    x = nf.placeholder((2, 4, 5, 6), name="x")

    def make():
        y = nf.nn.conv_transpose2d(x, w, stride=2, padding=0, dilation=(1, 2))
        return nf.grad(y, [x], head=g)[0]
    check_random_schedules(make, [w, g], [randn(4, 3, 3, 3), randn(2, 3, 11, 15)], seed=14)
