"""Construction-time checks of the expression language: each error names the
tensor, the dimension and what was expected."""
import numpy as np
import pytest

import neoflow as nf
from neoflow.errors import DTypeError, ExpressionError, ShapeError


@pytest.fixture
def A():
    return nf.placeholder((4, 3), name="A")


def test_wrong_number_of_indices(A):
    with pytest.raises(ShapeError, match=r"tensor 'A' has 2 dimension.*indexed with 1"):
        nf.compute((4,), lambda i: A[i])


def test_float_index_is_rejected(A):
    with pytest.raises(DTypeError, match=r"index 1 of tensor 'A'.*float32.*integers"):
        nf.compute((4,), lambda i: A[i, nf.cast(i, "float32")])
    with pytest.raises(DTypeError, match=r"index 0 of tensor 'A' must be an integer"):
        A[0.5, 1]


def test_constant_index_out_of_range(A):
    with pytest.raises(ShapeError, match=r"constant index 3 .*dimension 1 of tensor 'A' \(size 3\)"):
        nf.compute((4,), lambda i: A[i, 3])
    with pytest.raises(ShapeError, match=r"constant index -1 .*dimension 0"):
        nf.compute((3,), lambda j: A[-1, j])


def test_dtype_mismatch_names_both_sides(A):
    B = nf.placeholder((4, 3), dtype="float64", name="B")
    with pytest.raises(DTypeError, match=r"dtype mismatch in 'add'.*A\[i, j\].*float32.*B\[i, j\].*float64"):
        nf.compute((4, 3), lambda i, j: A[i, j] + B[i, j])


def test_reduce_axis_outside_its_reduction(A):
    k = nf.reduce_axis(3, name="k")
    with pytest.raises(ExpressionError, match=r"reduce axis 'k' is used outside a reduction"):
        nf.compute((4,), lambda i: A[i, k])


def test_reduce_axis_reduced_twice(A):
    k = nf.reduce_axis(3, name="k")
    with pytest.raises(ExpressionError, match=r"'k' is reduced twice"):
        nf.compute((4,), lambda i: nf.sum(nf.sum(A[i, k], axis=k), axis=k))


def test_index_variable_of_another_compute(A):
    captured = []
    nf.compute((4,), lambda i: captured.append(i) or A[i, 0])
    with pytest.raises(ExpressionError, match=r"'i' belongs to another compute"):
        nf.compute((4,), lambda j: A[captured[0], 0])


@pytest.mark.parametrize("shape", [(0, 3), (-1,), (2.5,), "ab", (True, 2)])
def test_bad_shapes(shape):
    with pytest.raises(ShapeError, match=r"placeholder 'x'.*positive int"):
        nf.placeholder(shape, name="x")


def test_compute_arity_mismatch(A):
    with pytest.raises(ShapeError, match=r"compute 'C'.*2 index argument"):
        nf.compute((4, 3), lambda i: A[i, 0], name="C")


def test_unsupported_dtype():
    with pytest.raises(DTypeError, match=r"placeholder 'h'.*float16"):
        nf.placeholder((2,), dtype="float16", name="h")


def test_integer_true_division_and_float_constant_with_int():
    x = nf.placeholder((8,), name="x")
    with pytest.raises(DTypeError, match=r"use // for floor division"):
        nf.compute((4,), lambda i: x[i / 2])
    with pytest.raises(DTypeError, match=r"float constant 0.5"):
        nf.compute((4,), lambda i: x[i * 0.5])


def test_condition_has_no_python_truth_value():
    x = nf.placeholder((8,), name="x")
    with pytest.raises(ExpressionError, match=r"nf.where"):
        nf.compute((8,), lambda i: x[i] if x[i] > 0 else 0.0)


def test_math_on_integers_needs_cast():
    idx = nf.placeholder((4,), dtype="int32", name="idx")
    with pytest.raises(DTypeError, match=r"nf.exp needs a float.*int32"):
        nf.compute((4,), lambda i: nf.exp(idx[i]))


def test_where_condition_must_be_bool():
    x = nf.placeholder((4,), name="x")
    with pytest.raises(DTypeError, match=r"condition.*bool"):
        nf.where(x[0], 1.0, 2.0)


def test_parameter_init_checks():
    with pytest.raises(ShapeError, match=r"parameter 'W': init array has shape \(2,\), expected \(3,\)"):
        nf.parameter((3,), init=np.zeros(2), name="W")
    with pytest.raises(ExpressionError, match=r"unknown init 'gaussian'"):
        nf.parameter((3,), init="gaussian", name="W")


def test_python_numbers_take_the_other_operand_dtype():
    x = nf.placeholder((4,), dtype="float64", name="x")
    y = nf.compute((4,), lambda i: x[i] * 2 + 1)
    assert y.dtype == "float64"
    c = nf.compute((4,), lambda i: x[i] > 0)
    assert c.dtype == "bool"


def test_tensor_arithmetic_broadcasts():
    a = nf.placeholder((3, 1), name="a")
    b = nf.placeholder((4,), name="b")
    c = 0.5 * (a + b) - a / 2.0
    assert c.shape == (3, 4)
    with pytest.raises(ShapeError, match=r"do not broadcast"):
        a + nf.placeholder((2, 5), name="z")
