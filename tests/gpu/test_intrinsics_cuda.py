"""The second milestone's intrinsics (log1p, expm1, sin, cos, sign, ceil, round
halves to even) printed for Triton without libdevice: equal to nf.evaluate
(float32 and float64) on random values plus the edge cases -- ties, tiny
arguments, -0.0, integers past the last fraction bit, overflow."""
import numpy as np
import pytest

import neoflow as nf
from gpu_suite import require_triton

require_triton()
torch = pytest.importorskip("torch")

EDGES = [0.5, 1.5, -2.5, 2.5, 1e-7, -1e-9, -0.0, 0.0, 2.0 ** 24 + 2, -200.0, 60.0]
TOLERANCE = {"float32": 2e-6, "float64": 1e-13}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["log1p", "expm1", "sin", "cos", "sign", "floor", "ceil",
                                  "round"])
def test_intrinsic_matches_the_interpreter(name, dtype):
    values = np.concatenate([np.random.default_rng(3).standard_normal(9) * 3, EDGES])
    if name == "log1p":
        values = np.abs(values) - 0.5           # above -1, small arguments included
    xv = values.astype(dtype)
    x = nf.placeholder(xv.shape, dtype=dtype, name="x")
    y = getattr(nf, name)(x)
    want = nf.evaluate(y, {x: xv})
    got = nf.build(y, [x], target="cuda")(torch.from_numpy(xv)).cpu().numpy()
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype], atol=0)
    if name in ("sign", "round", "floor", "ceil"):
        assert np.array_equal(got, want)
