"""Reads outside their tensor are refused when the compute is built (te/verify.py
check_reads), guarded reads stay legal, and what only run time can see --
gathers, guards that let a point through -- names the user's compute and,
for labels, where the bad label is (issue 16, item 7)."""
import numpy as np
import pytest

import neoflow as nf
from neoflow.errors import OutOfBoundsError


def test_unguarded_shift_is_refused_at_construction():
    x = nf.placeholder((4, 9), name="x")
    with pytest.raises(OutOfBoundsError) as e:
        nf.compute((4, 9), lambda b, d: x[b, d + 1], name="shift")
    msg = str(e.value)
    for part in ("compute 'shift'", "tensor 'x'", "dimension 1", "[1, 9]", "partly", "size 9"):
        assert part in msg, msg


def test_read_entirely_outside_is_refused():
    x = nf.placeholder((5,), name="x")
    with pytest.raises(OutOfBoundsError, match=r"index range \[7, 11\] lies entirely outside"):
        nf.compute((5,), lambda i: x[i + 7], name="far")


def test_read_in_a_reduction_is_checked_over_the_reduce_axis():
    x = nf.placeholder((3, 6), name="x")
    k = nf.reduce_axis(6, name="k")
    with pytest.raises(OutOfBoundsError, match="dimension 1 of tensor 'x'"):
        nf.compute((3,), lambda i: nf.sum(x[i, k + 1], axis=k), name="s")


def test_guarded_reads_stay_legal():
    x = nf.placeholder((5,), name="x")
    p = nf.compute((7,), lambda i: nf.where((i >= 1) & (i <= 5), x[i - 1], 0.0), name="pad")
    k = nf.reduce_axis(5, name="k")
    c = nf.compute((5,), lambda i: nf.sum(x[i - k], axis=k, where=k <= i), name="causal")
    xv = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(nf.evaluate(p, {x: xv}), np.pad(xv, 1))
    np.testing.assert_array_equal(nf.evaluate(c, {x: xv}), np.cumsum(xv))
    # the library's padded operators build as before
    img = nf.placeholder((1, 2, 5, 5), name="img")
    assert nf.nn.conv2d(img, nf.placeholder((3, 2, 3, 3), name="w"), padding=1).shape == (1, 3, 5, 5)
    assert nf.nn.max_pool2d(img, 3, stride=1, padding=1).shape == (1, 2, 5, 5)


def test_run_time_error_after_fusion_names_the_users_compute():
    x = nf.placeholder((4, 9), name="x")
    w = nf.placeholder((5, 9), name="w")
    # the guard lets d = 8 through: x[b, 9] is read at run time
    shift = nf.compute((4, 9), lambda b, d: nf.where(d >= 1, x[b, d + 1], 0.0), name="shift")
    f = nf.build(nf.nn.dense(shift, w), [x, w])
    assert [t.name for k in f.kernels for t in k.stages] == ["dense"]     # shift was inlined
    with pytest.raises(OutOfBoundsError, match=r"compute 'shift' \(fused into 'dense'\) reads "
                       r"tensor 'x' at index 9 in dimension 1, outside its size 9"):
        f(np.ones((4, 9), np.float32), np.ones((5, 9), np.float32))


def test_cross_entropy_names_the_bad_label_and_its_position():
    logits = nf.placeholder((8, 3), name="logits")
    labels = nf.placeholder((8,), dtype="int64", name="labels")
    bad = np.array([0, 1, 2, 0, 1, 3, 2, -100])          # -100: ignore_index, legal
    f = nf.build(nf.nn.cross_entropy(logits, labels), [logits, labels])
    with pytest.raises(OutOfBoundsError, match=r"label 3 at batch position 5 of 'labels' is "
                       r"outside \[0, 3\)"):
        f(np.ones((8, 3), np.float32), bad)
    w = nf.parameter((3, 3), init="xavier", name="w")
    with nf.Trainer(nf.nn.cross_entropy(nf.nn.dense(logits, w), labels),
                    nf.optim.SGD(0.1)) as trainer:
        with pytest.raises(OutOfBoundsError, match=r"label 3 at batch position 5"):
            trainer.step({logits: np.ones((8, 3), np.float32), labels: bad})
        good = np.array([0, 1, 2, 0, 1, 2, 2, -100])
        assert np.isfinite(trainer.step({logits: np.ones((8, 3), np.float32), labels: good}))
