# The CPU operator suite (tests/test_operators.py: every test that checks
# three ways) again on target="cuda": the Triton kernels, run in the
# interpreter, against nf.evaluate and the NumPy/PyTorch reference.
import numpy as np
import torch

from gpu_suite import calling, load_tests, require_triton

require_triton()
import neoflow as nf  # noqa: E402

ops = load_tests("test_operators.py", "nf_cpu_operator_suite")


def check_cuda(outputs, inputs, arrays, expected, tol=ops.F32):
    single = isinstance(outputs, nf.Tensor)
    outs = [outputs] if single else list(outputs)
    exps = [expected] if single else list(expected)
    copies = [a.copy() for a in arrays]
    evaluated = nf.evaluate(outputs, dict(zip(inputs, arrays)))
    f = nf.build(outputs, inputs, target="cuda")
    assert "@triton.jit" in f.source
    built = f(*arrays)
    if single:
        assert isinstance(built, torch.Tensor), type(built)
        evaluated, built = (evaluated,), (built,)
    assert len(built) == len(outs)
    for n, (o, b, e, x) in enumerate(zip(outs, built, evaluated, exps)):
        b = b.cpu().numpy()
        assert b.dtype == np.dtype(o.dtype) and b.shape == o.shape, (n, b.dtype, b.shape)
        ops._compare(e, x, tol, f"output {n} ({o.name}): nf.evaluate vs reference")
        ops._compare(b, e, tol, f"output {n} ({o.name}): target='cuda' vs nf.evaluate")
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c, err_msg="an input was modified")


ops.check_three_ways = check_cuda
globals().update(calling(ops, "check_three_ways"))
