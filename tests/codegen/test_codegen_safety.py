"""Generated code never reads outside a buffer: provable reads are plain,
the rest (gathers) are checked and raise OutOfBoundsError; user names never
reach the C source; sanitized builds run clean."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import neoflow as nf
from neoflow.toolchain import asan_runtime_path
from neoflow.errors import OutOfBoundsError

HOSTILE = '*/ system("rm -rf /"); /*\n#include <stdio.h>'


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("bad", [7, -1])
def test_gather_index_out_of_range_names_tensor_dimension_index_and_size(dtype, bad):
    x = nf.placeholder((7, 4), name="table")
    idx = nf.placeholder((3,), dtype=dtype, name="idx")
    y = nf.compute((3, 4), lambda i, j: x[idx[i], j] * 2.0, name="lookup")
    f = nf.build(y, [x, idx])
    xv = np.arange(28, dtype=np.float32).reshape(7, 4)
    np.testing.assert_array_equal(f(xv, np.array([6, 0, 2], dtype)), xv[[6, 0, 2]] * 2)
    with pytest.raises(OutOfBoundsError) as err:
        f(xv, np.array([1, bad, 2], dtype))
    message = str(err.value)
    for part in ("'lookup'", "'table'", f"index {bad}", "dimension 0", "size 7"):
        assert part in message, message


def test_gather_in_an_untaken_branch_reads_nothing():
    x = nf.placeholder((5,), name="x")
    idx = nf.placeholder((4,), dtype="int32", name="idx")
    y = nf.compute((4,), lambda i: nf.where((idx[i] >= 0) & (idx[i] < 5), x[idx[i]], -1.0))
    f = nf.build(y, [x, idx])
    xv = np.arange(5, dtype=np.float32)
    iv = np.array([4, 9, -3, 0], np.int32)
    np.testing.assert_array_equal(f(xv, iv), nf.evaluate(y, {x: xv, idx: iv}))
    np.testing.assert_array_equal(f(xv, iv), [4, -1, -1, 0])


def test_error_in_an_intermediate_kernel():
    x = nf.placeholder((6,), name="x")
    idx = nf.placeholder((2,), dtype="int64", name="idx")
    g = nf.compute((2,), lambda i: x[idx[i]], name="gathered")
    out = nf.compute((2,), lambda i: g[i] + 1.0, name="shifted")
    f = nf.build(out, [x, idx])
    with pytest.raises(OutOfBoundsError, match="'gathered' reads tensor 'x' at index 6"):
        f(np.zeros(6, np.float32), np.array([0, 6], np.int64))
    np.testing.assert_array_equal(f(np.ones(6, np.float32), np.array([0, 5], np.int64)), [2, 2])


def test_an_affine_read_past_the_end_is_checked_too():
    x = nf.placeholder((5,), name="x")
    with pytest.raises(OutOfBoundsError, match="index range \\[1, 5\\]"):   # unguarded: refused
        nf.compute((5,), lambda i: x[i] + x[i + 1], name="pairs")
    # a guard that lets i = 4 through: x[5] is caught where it runs
    y = nf.compute((5,), lambda i: x[i] + nf.where(i != 2, x[i + 1], 0.0), name="pairs")
    f = nf.build(y, [x])
    with pytest.raises(OutOfBoundsError, match="'pairs' reads tensor 'x' at index 5 in "
                                               "dimension 0, outside its size 5"):
        f(np.zeros(5, np.float32))
    with pytest.raises(OutOfBoundsError):
        nf.evaluate(y, {x: np.zeros(5, np.float32)})


def test_provable_reads_are_not_checked():
    x = nf.placeholder((8, 8), name="x")
    k = nf.reduce_axis(3, name="k")
    y = nf.compute((8, 8), lambda i, j: nf.sum(
        nf.where((i + k - 1 >= 0) & (i + k - 1 < 8), x[(i + k - 1) % 8, j // 2 * 2], 0.0),
        axis=k))
    f = nf.build(y, [x])
    kernel = f.source.split("static void nf_kernel0")[1]
    assert "nf_oob" not in kernel


def test_hostile_names_never_reach_the_source():
    x = nf.placeholder((3, 4), name=HOSTILE)
    idx = nf.placeholder((2,), dtype="int32", name=HOSTILE + "idx")
    k = nf.reduce_axis(4, name=HOSTILE + "k")
    y = nf.compute((2,), lambda i: nf.sum(x[idx[i], k], axis=k), name=HOSTILE + "y")
    f = nf.build(y, [x, idx])
    assert "system" in HOSTILE and "system(" not in f.source and "rm -rf" not in f.source
    assert "#include <stdio.h>" not in f.source
    xv = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(f(xv, np.array([2, 0], np.int32)), [38, 6])
    with pytest.raises(OutOfBoundsError) as err:
        f(xv, np.array([3, 0], np.int32))
    assert HOSTILE in str(err.value)


ASAN_SCRIPT = textwrap.dedent("""
    import numpy as np
    import neoflow as nf
    from neoflow.errors import OutOfBoundsError
    from neoflow.schedule import Config

    def run(outputs, inputs, values, config=None):
        f = nf.build(outputs, inputs, configs=config, sanitize=True)
        got = f(*values)
        ref = nf.evaluate(outputs, dict(zip(inputs, values)))
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
        return f

    rng = np.random.default_rng(0)
    # a gather, including its checked error path
    x = nf.placeholder((7, 5), name="x")
    idx = nf.placeholder((4,), dtype="int64", name="idx")
    g = nf.compute((4, 5), lambda i, j: x[idx[i], j])
    xv = rng.standard_normal((7, 5)).astype(np.float32)
    f = run(g, [x, idx], [xv, np.array([6, 0, 3, 6], np.int64)])
    try:
        f(xv, np.array([0, 7, -8, 1], np.int64))
        raise SystemExit("no OutOfBoundsError")
    except OutOfBoundsError:
        pass
    # a padded, strided, dilated conv
    a = nf.placeholder((2, 3, 9, 7), name="a")
    w = nf.placeholder((4, 3, 3, 3), name="w")
    run(nf.nn.conv2d(a, w, stride=2, padding=2, dilation=2), [a, w],
        [rng.standard_normal((2, 3, 9, 7)).astype(np.float32),
         rng.standard_normal((4, 3, 3, 3)).astype(np.float32)])
    # tails everywhere: extents 7 and 33, odd factors
    p = nf.placeholder((7, 33), name="p")
    q = nf.placeholder((33, 7), name="q")
    k = nf.reduce_axis(33, name="k")
    c = nf.compute((7, 7), lambda i, j: nf.sum(p[i, k] * q[k, j], axis=k) + 1.0)
    cfg = Config.from_dict({"stages": [{
        "tile": {"s0": [3, 2], "s1": [5], "r0": [5, 3]},
        "order": ["s0.0", "r0.0", "s1.0", "s0.1", "r0.1", "s0.2", "r0.2", "s1.1"],
        "parallel": 1, "vectorize": "s1", "unroll": {"s0.2": 2}, "cache_write": True}]})
    run(c, [p, q], [rng.standard_normal((7, 33)).astype(np.float32),
                    rng.standard_normal((33, 7)).astype(np.float32)], cfg)
    # a softmax (hoisted reductions) over a tail
    r = nf.reduce_axis(33, name="r")
    e = nf.compute((7, 33), lambda i, j: nf.exp(p[i, j]))
    run(nf.compute((7, 33), lambda i, j: e[i, j] / nf.sum(e[i, r], axis=r)), [p],
        [rng.standard_normal((7, 33)).astype(np.float32)])
    # dense layers whose weight is packed one panel at a time inside the panel
    # loop: a partial last panel (element copies) and whole ones (8x8 blocks)
    xd = nf.placeholder((40, 64), name="xd")
    for n in (150, 160):
        wd = nf.placeholder((n, 64), name="wd")
        kd = nf.reduce_axis(64, name="kd")
        run(nf.compute((40, n), lambda i, j: nf.sum(xd[i, kd] * wd[j, kd], axis=kd)),
            [xd, wd], [rng.standard_normal((40, 64)).astype(np.float32),
                       rng.standard_normal((n, 64)).astype(np.float32)])
    # a stage computed at the one before it (one parallel row loop)
    from neoflow.schedule import default_config
    s2 = nf.placeholder((64, 256), name="s2")
    a2 = nf.compute((64, 256), lambda i, j: nf.sigmoid(s2[i, j]) * nf.tanh(s2[i, j]))
    b2 = nf.compute((64, 256), lambda i, j: nf.exp(a2[i, j]) * a2[i, 255 - j])
    cfgs = [default_config(k) for k in nf.build([a2, b2], [s2]).kernels]
    for sc in cfgs[0].stages:
        sc.parallel = 1
    cfgs[0].stages[1].compute_at = True
    run([a2, b2], [s2], [rng.standard_normal((64, 256)).astype(np.float32)], cfgs)
    # LLTM's cell and its gradient: the default chains the cell update and
    # gradient stages, their loops fused across stages and pieces
    from neoflow.zoo import workloads
    [lw] = workloads.lltm_cell()
    lv = [rng.uniform(-1, 1, t.shape).astype(np.float32) for t in lw.inputs]
    got = nf.build(lw.outputs, lw.inputs, sanitize=True)(*lv)
    for g, r in zip(got, nf.evaluate(lw.outputs, dict(zip(lw.inputs, lv)))):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
    print("ASAN-CLEAN")
""")


def test_kernels_run_clean_under_address_sanitizer():
    """A gather (and its error path), a padded strided dilated conv, a
    tail-heavy schedule, a softmax, panel-by-panel packing, compute_at and
    fused loops, built with -fsanitize=address (about 10 s; the compiler's
    libasan is required)."""
    runtime = asan_runtime_path()
    if runtime is None:
        print("the C compiler has no AddressSanitizer runtime (libasan); skipping")
        pytest.skip("the C compiler has no AddressSanitizer runtime (libasan)")
    env = dict(os.environ, LD_PRELOAD=runtime, ASAN_OPTIONS="detect_leaks=0")
    done = subprocess.run([sys.executable, "-c", ASAN_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "ASAN-CLEAN" in done.stdout, done.stderr[-4000:]
    assert "AddressSanitizer" not in done.stderr, done.stderr[-4000:]
