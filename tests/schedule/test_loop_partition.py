"""Loop partitioning (index tests decided per piece of a loop) and
speculation (selects with two safe sides printed branch-free): the IR they
produce and the values of the code, against NumPy."""
import numpy as np

import neoflow as nf
from neoflow.graph import kernels_for
from neoflow.schedule import default_config
from neoflow.schedule.lower import lower_kernel
from neoflow.schedule.loop_ir import dump

rng = np.random.default_rng(3)


def text_of(t):
    kernel = kernels_for([t])[-1]
    return dump(lower_kernel(kernel, default_config(kernel), []).body)


def test_concatenation_is_cut_into_pieces_without_tests():
    a, b = nf.placeholder((5, 16), name="a"), nf.placeholder((5, 24), name="b")
    d = nf.nn.concat([a, b], dim=1)
    text = text_of(d)
    assert "[0, 16)" in text and "[16, 40)" in text
    assert "where(" not in text and "blend(" not in text
    av = rng.standard_normal((5, 16)).astype(np.float32)
    bv = rng.standard_normal((5, 24)).astype(np.float32)
    np.testing.assert_array_equal(nf.build(d, [a, b])(av, bv), np.concatenate([av, bv], 1))


def test_safe_selects_blend_and_unsafe_ones_stay_branches():
    a = nf.placeholder((6, 32), name="a")
    elu = nf.compute((6, 32), lambda i, j: nf.where(a[i, j] > 0.0, a[i, j],
                                                    nf.exp(a[i, j]) - 1.0), name="elu")
    text = text_of(elu)
    assert "blend(" in text and "where(" not in text
    # v[j - i] is before the buffer where j < i: evaluating it there is not allowed
    v = nf.placeholder((32,), name="v")
    shifted = nf.compute((6, 32), lambda i, j: nf.where(j >= i, v[j - i], 0.0), name="shift")
    text = text_of(shifted)
    assert "where(" in text and "blend(" not in text
    av = rng.standard_normal((6, 32)).astype(np.float32)
    vv = rng.standard_normal(32).astype(np.float32)
    np.testing.assert_allclose(nf.build(elu, [a])(av), np.where(av > 0, av, np.expm1(av)),
                               rtol=1e-5, atol=1e-6)
    expect = np.array([[vv[j - i] if j >= i else 0.0 for j in range(32)] for i in range(6)])
    np.testing.assert_array_equal(nf.build(shifted, [v])(vv), expect)


def test_gathers_are_never_speculated():
    table = nf.placeholder((10, 16), name="table")
    idx = nf.placeholder((4,), "int64", name="idx")
    g = nf.compute((4, 16), lambda i, j: nf.where(idx[i] >= 0, table[idx[i], j], 0.0))
    text = text_of(g)
    assert "blend(" not in text
    tv = rng.standard_normal((10, 16)).astype(np.float32)
    iv = np.array([3, -1, 9, 0])
    np.testing.assert_allclose(nf.build(g, [table, idx])(tv, iv),
                               np.where((iv >= 0)[:, None], tv[np.clip(iv, 0, 9)], 0.0))
