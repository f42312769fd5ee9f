# Tensor methods with torch's meanings (a @ b, sum, mean, max, reshape,
# permute, transpose, T, float, double) and slicing views (t[:, 1:3],
# t[..., None]): values and gradients against torch in float64, through
# nf.evaluate and nf.build; reads with index variables are unchanged; bad
# indices and arguments raise NeoFlowError.
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import neoflow as nf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "autodiff"))
from grad_check import Spec, check_torch  # noqa: E402

F64 = "float64"

METHODS = [
    ("matmul", [(3, 5), (5, 4)], lambda a, b: a @ b),
    ("matmul_batched", [(2, 3, 5), (5, 1)], lambda a, b: a @ b),
    ("matmul_vector", [(5,), (5, 3)], lambda a, b: a @ b),
    ("sum_all", [(3, 5)], lambda a: a.sum()),
    ("sum_dim", [(3, 5, 2)], lambda a: a.sum(1)),
    ("sum_keepdim", [(3, 5, 2)], lambda a: a.sum(dim=(0, -1), keepdim=True)),
    ("mean_all", [(3, 5)], lambda a: a.mean()),
    ("mean_dim", [(3, 5, 2)], lambda a: a.mean(dim=-1, keepdim=True)),
    ("reshape_args", [(3, 4, 2)], lambda a: a.reshape(4, -1)),
    ("reshape_tuple", [(3, 4, 2)], lambda a: a.reshape((2, 12))),
    ("permute_args", [(3, 4, 2)], lambda a: a.permute(2, 0, 1)),
    ("permute_tuple", [(3, 4, 2)], lambda a: a.permute((1, 2, 0))),
    ("transpose", [(3, 4, 2)], lambda a: a.transpose(0, -1)),
    ("T", [(3, 5)], lambda a: a.T),
    ("chain", [(3, 5), (4, 5)], lambda a, b: (a @ b.T).sum(0) * 2.0),
]


@pytest.mark.parametrize("name,shapes,fn", METHODS, ids=[m[0] for m in METHODS])
def test_methods_match_torch(name, shapes, fn):
    check_torch(lambda *xs: fn(*xs) * 1.0, lambda *xs: fn(*xs) * 1.0,
                [Spec(s) for s in shapes], F64, native=name in ("matmul", "sum_keepdim", "chain"))


@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), (-1, True), (0, True)])
def test_max_values_match_torch(dim, keepdim):
    def nf_max(a):
        return a.max() if dim is None else a.max(dim, keepdim=keepdim)

    def torch_max(a):
        return a.max() if dim is None else a.max(dim, keepdim=keepdim).values
    check_torch(lambda a: nf_max(a) * 1.0, lambda a: torch_max(a) * 1.0, [Spec((4, 7))], F64,
                native=dim == 1)


def test_float_and_double():
    x = nf.placeholder((3,), "float32", name="x")
    n = nf.placeholder((3,), "int32", name="n")
    assert x.float() is x and x.double().dtype == "float64"
    assert n.float().dtype == "float32" and n.double().dtype == "float64"
    a = np.array([1, -2, 7], np.int32)
    np.testing.assert_array_equal(nf.build(n.double(), [n])(a), a.astype(np.float64))


SLICES = [
    ("cols", (5, 7), lambda t: t[:, 1:3]),
    ("steps", (9, 7), lambda t: t[1::3, ::2]),
    ("new_last", (5, 7), lambda t: t[..., None]),
    ("new_first", (5, 7), lambda t: t[None]),
    ("int_and_slice", (5, 7), lambda t: t[-1, 2:]),
    ("ellipsis_mid", (3, 4, 5), lambda t: t[1, ..., ::2]),
    ("ellipsis_int", (3, 4, 5), lambda t: t[..., 0]),
    ("mixed", (3, 4, 5), lambda t: t[None, 1:, None, -2, 1:4:2]),
    ("negative_bounds", (9,), lambda t: t[-5:-1]),
    ("beyond_end", (6, 2), lambda t: t[2:100]),
    ("everything", (4, 3), lambda t: t[...]),
    ("chained", (6, 5), lambda t: t[1:][:, ::2][..., None][2]),
    ("fewer_ints", (3, 4, 5), lambda t: t[2, -1]),        # torch: a view of the rest
]


@pytest.mark.parametrize("name,shape,fn", SLICES, ids=[s[0] for s in SLICES])
def test_slicing_views_match_torch(name, shape, fn):
    x = nf.placeholder(shape, F64, name="x")
    view = fn(x)
    assert isinstance(view, nf.Tensor)
    a = np.random.default_rng(0).normal(size=shape)
    want = fn(torch.from_numpy(a)).numpy()
    assert view.shape == want.shape
    np.testing.assert_array_equal(nf.evaluate(view, {x: a}), want)
    check_torch(lambda t: fn(t) * 1.0, lambda t: fn(t) * 1.0, [Spec(shape)], F64,
                native=name in ("steps", "mixed", "chained"))


def test_index_variables_still_make_reads():
    x = nf.placeholder((4, 6), name="x")
    y = nf.compute((4,), lambda i: x[i, 2] + x[i, -1 + 6])
    assert isinstance(x[1, 2], nf.Expr)                    # an int per dimension: a read
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(nf.evaluate(y, {x: a}), a[:, 2] + a[:, 5])


@pytest.mark.parametrize("fn,match", [
    (lambda t: t[:, 6:], "selects nothing from dimension 1"),
    (lambda t: t[::-1], "step must be positive"),
    (lambda t: t[:, :, :], r"2 dimension\(s\).*3 index"),
    (lambda t: t[..., ...], "one ... only"),
    (lambda t: t[4, :], "index 4 is out of range for dimension 0"),
    (lambda t: t[-5, None], "index -5 is out of range"),
    (lambda t: t[0.5:, :], "slice start 0.5"),
    (lambda t: t[nf.reduce_axis(3, name="k"), :], "next to index expressions"),
    (lambda t: t[True, :], "expected an integer expression"),
    (lambda t: nf.placeholder((2, 3, 4), name="u").T, r"\.T is for 2-d tensors"),
    (lambda t: t.max(dim=(0, 1)), "takes one dim"),
    (lambda t: t.sum(dim=2), "out of range"),
    (lambda t: t.reshape(5, 5), "has 25 elements"),
    (lambda t: t.permute(0, 0), "not a permutation"),
    (lambda t: t @ nf.placeholder((5, 2), name="w"), "columns"),
    (lambda t: t @ np.ones((6, 2)), "must be a neoflow Tensor"),
])
def test_view_and_method_errors(fn, match):
    x = nf.placeholder((4, 6), name="x")
    with pytest.raises(nf.NeoFlowError, match=match):
        fn(x)


def test_view_names_the_tensor_in_errors():
    x = nf.placeholder((4, 6), name="feat")
    with pytest.raises(nf.NeoFlowError, match="tensor 'feat'"):
        x[:, 6:]
