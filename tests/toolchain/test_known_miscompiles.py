"""Code shapes a system compiler is known to miscompile under its default
flags; the build stage's flags must keep them right."""
import numpy as np
import pytest

import neoflow as nf


@pytest.mark.parametrize("shape", [(4, 12), (8, 16), (3, 7)])
def test_conditional_load_after_if_conversion(shape):
    # GCC 12.2 -O3 -march=native with loop if-conversion got 10 of 48 wrong at (4, 12).
    a = nf.placeholder(shape, name="a")
    b = nf.placeholder(shape, name="b")
    c = nf.compute(shape, lambda i, j: nf.where(a[i, j] > 0, b[i, j], 0.0))
    n = int(np.prod(shape))
    av = ((np.arange(n) * 7 % 5) - 2).astype(np.float32).reshape(shape)
    bv = (np.arange(n) + 1).astype(np.float32).reshape(shape)
    np.testing.assert_array_equal(nf.build(c, [a, b])(av, bv), np.where(av > 0, bv, 0))
