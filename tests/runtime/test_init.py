"""Parameter initialisers (runtime.init): torch's fan rules and bounds, seeds."""
import math

import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow.runtime.init import fans, initial_value


@pytest.mark.parametrize("shape", [(7, 5), (4, 3, 3, 3), (8, 2, 5)])
def test_fans_follow_torch(shape):
    expected = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    assert fans(shape) == expected


def test_fans_of_vectors_and_scalars():
    assert fans((9,)) == (9, 9) and fans(()) == (1, 1)


@pytest.mark.parametrize("init, bound", [
    ("xavier", lambda fi, fo: math.sqrt(6 / (fi + fo))),
    ("kaiming", lambda fi, fo: math.sqrt(6 / fi)),
])
def test_uniform_initialisers_match_torch_bounds(init, bound):
    shape = (64, 32, 3, 3)
    value = initial_value(nf.parameter(shape, init=init, name="w"), seed=0)
    b = bound(*fans(shape))
    assert value.dtype == np.float32 and value.shape == shape
    assert np.abs(value).max() <= b and np.abs(value).max() > 0.99 * b
    ref = torch.empty(shape)
    getattr(torch.nn.init, f"{init}_uniform_")(ref)
    assert value.std() == pytest.approx(ref.std().item(), rel=0.02)


def test_constant_normal_uniform_and_ndarray():
    assert np.all(initial_value(nf.parameter((3,), init="zeros", name="a")) == 0)
    assert np.all(initial_value(nf.parameter((3,), init="ones", dtype="float64", name="b")) == 1)
    normal = initial_value(nf.parameter((100, 100), init="normal", name="c"))
    assert abs(normal.mean()) < 0.05 and normal.std() == pytest.approx(1, rel=0.05)
    uniform = initial_value(nf.parameter((100, 100), init="uniform", name="d"))
    assert uniform.min() >= 0 and uniform.max() < 1
    given = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(initial_value(nf.parameter((2, 3), init=given, name="e")),
                                  given)


def test_streams_depend_on_seed_and_name_only():
    w = nf.parameter((5, 5), name="w")
    same = nf.parameter((5, 5), name="w")
    other = nf.parameter((5, 5), name="v")
    np.testing.assert_array_equal(initial_value(w, 3), initial_value(same, 3))
    assert not np.array_equal(initial_value(w, 3), initial_value(w, 4))
    assert not np.array_equal(initial_value(w, 3), initial_value(other, 3))
