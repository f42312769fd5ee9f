"""Shared by the codegen tests: build, run and compare with the reference evaluator."""
import numpy as np
import pytest

import neoflow as nf


def _assert_matches(outputs, inputs, values, configs=None, rtol=1e-4, atol=1e-5):
    """Build `outputs`, call with `values`, compare with nf.evaluate; returns the function."""
    f = nf.build(outputs, inputs, configs=configs)
    got = f(*values)
    ref = nf.evaluate(outputs, dict(zip(inputs, values)))
    if not isinstance(got, tuple):
        got, ref = (got,), (ref,)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype, (g.shape, r.shape, g.dtype, r.dtype)
        if g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, r)
        else:
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
    return f


@pytest.fixture
def assert_matches():
    return _assert_matches
