"""schedule/delinearize and te/divmod: axes read only as `a // N` and `a % N`
are split into their parts (the reads affine again), `//` and `%` fold
where the ranges decide them, and every schedule of such a stage --
the default and random ones -- agrees with nf.evaluate."""
import itertools
import random

import numpy as np
import pytest

import neoflow as nf
from neoflow.graph import kernels_for
from neoflow.runtime.native import compile_kernels
from neoflow.schedule import Config, ConfigError, Stage, default_config, sample_config
from neoflow.schedule.delinearize import delinearized
from neoflow.te.divmod import affine_comparison, divmod_count, fold_divmod
from neoflow.te.visit import post_order, reads
from neoflow.tune.search import mutate_stage

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("d", [2, 3, 5, 7])
def test_fold_divmod_keeps_every_value(d):
    a, b = 6, 7
    for ka, kb, c in itertools.product((-3, -1, 1, 2, 3, 6, 7), (1, 2, 5), (-4, 0, 3, 10)):
        for op in ("floordiv", "mod"):
            def expr(i, j):
                x = i * ka + j * kb + c
                return x // d if op == "floordiv" else x % d
            orig = nf.compute((a, b), lambda i, j: expr(i, j) + 0, name="orig")
            folded = nf.compute((a, b), lambda i, j: fold_divmod(expr(i, j)), name="folded")
            np.testing.assert_array_equal(nf.evaluate(folded, {}), nf.evaluate(orig, {}))


def test_fold_divmod_removes_what_the_ranges_decide():
    b, i = nf.reduce_axis(8, name="b"), nf.reduce_axis(64, name="i")
    assert fold_divmod((b * 64 + i) // 64) is b
    assert fold_divmod((b * 64 + i) % 64) is i
    assert divmod_count(fold_divmod(((b * 64 + i) // 64) * 64 + (b * 64 + i) % 64)) == 0
    assert divmod_count(fold_divmod((b * 64 + i) // 32)) == 1      # i // 32 is left
    assert divmod_count(fold_divmod((b * 64 + i) % 128)) == 1


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge"])
@pytest.mark.parametrize("c", [1, 3, 32])
def test_affine_comparison_is_the_same_test(op, c):
    n = 100
    for k in (-2, 0, 1, 3):
        for quotient_left in (True, False):
            def cond(j):
                q, kk = (j - 40) // c, nf.const(k, "int64")
                left, right = (q, kk) if quotient_left else (kk, q)
                return {"lt": left < right, "le": left <= right, "gt": left > right,
                        "ge": left >= right}[op]
            orig = nf.compute((n,), lambda j: nf.where(cond(j), 1, 0) + 0, name="orig")
            new = nf.compute((n,), lambda j: nf.where(affine_comparison(cond(j)), 1, 0) + 0,
                             name="new")
            np.testing.assert_array_equal(nf.evaluate(new, {}), nf.evaluate(orig, {}))
            assert divmod_count(affine_comparison(cond(nf.reduce_axis(n)))) == 0


# -- the view ------------------------------------------------------------------------

def attention_grad_piece(B=3, T=5, H=2, hd=9, offset=0, transposed=False, dtype="float64"):
    """A d(qkv) column block of a fused-projection attention, as autodiff writes
    it: d[n, c] = sum_j dS[n // T, c // hd, n % T, j] * qkv[(n // T) * T + j, offset + c]."""
    ds = nf.placeholder((B, H, T, T), dtype, name="dS")
    qkv = nf.placeholder((B * T, offset + H * hd), dtype, name="qkv")
    j = nf.reduce_axis(T, name="j")

    def body(n, c):
        s = ds[n // T, c // hd, j, n % T] if transposed else ds[n // T, c // hd, n % T, j]
        return nf.sum(s * qkv[(n // T) * T + j, offset + (c // hd) * hd + c % hd], axis=j)
    return nf.compute((B * T, H * hd), body, name="dqkv"), [ds, qkv]


def flattened_reduce(dtype="float64"):
    """A weight gradient over a flattened batch: sum over r of x[r // 5, r % 5, i] * g[r, j]."""
    x = nf.placeholder((3, 5, 7), dtype, name="x")
    g = nf.placeholder((15, 9), dtype, name="g")
    r = nf.reduce_axis(15, name="r")
    return nf.compute((7, 9), lambda i, j: nf.sum(x[r // 5, r % 5, i] * g[r, j], axis=r),
                      name="dw"), [x, g]


def test_flattened_output_axes_split_into_their_parts():
    t, _ = attention_grad_piece(B=8, T=64, H=4, hd=32, offset=128)
    view = delinearized(t)
    assert view.shape == (8, 64, 4, 32) and view.name == t.name and view.dtype == t.dtype
    assert divmod_count(view.op.body) == 0
    st = Stage(t)
    assert st.tensor.shape == (8, 64, 4, 32) and st.source is t
    # a dense batched contraction: the default register-blocks it along hd
    sc = default_config(kernels_for([t])[-1]).stages[0]
    assert sc.vectorize == "s3" and sc.cache_write and sc.tile["s3"] and sc.unroll


def test_flattened_reduce_axis_splits_too():
    t, _ = flattened_reduce()
    view = delinearized(t)
    assert view.shape == t.shape and divmod_count(view.op.body) == 0
    red = next(n for n in post_order(view.op.body) if hasattr(n, "axes"))
    assert [a.extent for a in red.axes] == [3, 5]


def test_no_view_when_nothing_splits_exactly():
    x = nf.placeholder((4, 14), name="x")
    r = nf.reduce_axis(14, name="r")
    t = nf.compute((14,), lambda i: nf.sum(x[i // 5, r] * x[3, i % 5], axis=r), name="t")
    assert delinearized(t) is None and Stage(t).tensor is t           # 5 does not divide 14
    m = nf.compute((4, 14), lambda i, j: nf.sum(x[i, r] * x[i, j], axis=r), name="m")
    assert delinearized(m) is None and Stage(m).tensor is m           # already affine


def test_a_view_that_loses_a_packable_operand_is_not_taken():
    # a grouped 1x1 conv: w[o, c] stays packable along o only while o is not split
    x = nf.placeholder((2, 8, 16), name="x")
    w = nf.placeholder((32, 4), name="w")
    c = nf.reduce_axis(4, name="c")
    t = nf.compute((2, 32, 16), lambda n, o, p: nf.sum(w[o, c] * x[n, (o // 16) * 4 + c, p],
                                                       axis=c), name="grouped")
    assert delinearized(t) is not None
    assert Stage(t).tensor is t


def test_a_short_inner_part_of_the_last_axis_is_not_taken():
    x = nf.placeholder((6, 20), name="x")
    r = nf.reduce_axis(6, name="r")
    t = nf.compute((20, 20), lambda i, j: nf.sum(x[r, j // 2] * x[r, i], axis=r), name="t")
    assert delinearized(t) is not None and Stage(t).tensor is t


# -- every schedule agrees -------------------------------------------------------------

CASES = {
    "q block": lambda: attention_grad_piece(),
    "k block": lambda: attention_grad_piece(offset=18, transposed=True),
    "odd sizes": lambda: attention_grad_piece(B=2, T=7, H=3, hd=11, offset=1),
    "reduce axis": flattened_reduce,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_default_and_random_schedules_agree_with_the_reference(case):
    t, inputs = CASES[case]()
    assert Stage(t).tensor is not t
    kernel = kernels_for([t])[-1]
    values = [RNG.standard_normal(p.shape) for p in inputs]
    want = nf.evaluate(t, dict(zip(inputs, values)))
    for config in [default_config(kernel)] + [sample_config(kernel, s) for s in range(6)]:
        f = compile_kernels([kernel], inputs, [t], [t], [config])
        np.testing.assert_allclose(f(*values)[0], want, rtol=1e-10, atol=1e-12,
                                   err_msg=config.to_json())


def test_the_tuners_mutations_of_a_view_agree_with_the_reference():
    t, inputs = attention_grad_piece(B=2, T=6, H=2, hd=8, offset=3, dtype="float32")
    kernel = kernels_for([t])[-1]
    st = Stage(t)
    values = [RNG.standard_normal(p.shape).astype(np.float32) for p in inputs]
    want = nf.evaluate(t, dict(zip(inputs, values)))
    sc, tried, rng = default_config(kernel).stages[0], 0, random.Random(3)
    while tried < 5:
        try:
            sc = mutate_stage(st, sc, rng, 8)
        except ConfigError:
            continue
        tried += 1
        f = compile_kernels([kernel], inputs, [t], [t], [Config([sc])])
        np.testing.assert_allclose(f(*values)[0], want, rtol=1e-4, atol=1e-5,
                                   err_msg=sc.to_dict())


def test_a_view_on_the_gpu_backend_agrees_with_the_reference():
    pytest.importorskip("triton", reason="target='cuda' needs triton (the gpu extra)")
    torch = pytest.importorskip("torch", reason="target='cuda' takes torch tensors")
    t, inputs = attention_grad_piece(dtype="float32")
    assert Stage(t).tensor is not t
    values = [RNG.standard_normal(p.shape).astype(np.float32) for p in inputs]
    got = nf.build(t, inputs, target="cuda")(*[torch.from_numpy(v) for v in values])
    np.testing.assert_allclose(np.asarray(got.cpu()), nf.evaluate(t, dict(zip(inputs, values))),
                               rtol=1e-5, atol=1e-5)


# -- reads through reshaped aliases ----------------------------------------------------

def scores(B=3, T=9, H=2, hd=8, dtype="float64"):
    """q . k^T straight from a flattened fused projection:
    s[b, h, i, j] = sum_e qkv[b * T + i, h * hd + e] * qkv[b * T + j, H * hd + h * hd + e]."""
    qkv = nf.placeholder((B * T, 2 * H * hd), dtype, name="qkv")
    e = nf.reduce_axis(hd, name="e")
    return nf.compute((B, H, T, T), lambda b, h, i, j: nf.sum(
        qkv[b * T + i, h * hd + e] * qkv[b * T + j, H * hd + h * hd + e], axis=e),
        name="scores"), [qkv]


def test_a_flattened_read_is_seen_reshaped_and_packed_along_the_rows():
    from neoflow.schedule.delinearize import alias_source
    t, (qkv,) = scores(T=64, hd=32)
    st = Stage(t)
    assert st.tensor is not t and st.tensor.shape == t.shape
    aliases = {r.tensor for r in reads(st.tensor.op.body)}
    assert all(alias_source(a) is qkv and a.shape == (3, 64, 4, 32) for a in aliases)
    along = {a: n for n, (_, a, _) in enumerate(st.packable)}
    assert "s3" in along                                  # k along j, the output's last axis
    sc = default_config(kernels_for([t])[-1]).stages[0]
    assert sc.pack == [along["s3"]] and sc.vectorize == "s3" and sc.cache_write


def test_reshaped_reads_and_random_schedules_agree_with_the_reference():
    t, inputs = scores()
    assert Stage(t).tensor is not t
    kernel = kernels_for([t])[-1]
    values = [RNG.standard_normal(p.shape) for p in inputs]
    want = nf.evaluate(t, dict(zip(inputs, values)))
    for config in [default_config(kernel)] + [sample_config(kernel, s) for s in range(6)]:
        f = compile_kernels([kernel], inputs, [t], [t], [config])
        np.testing.assert_allclose(f(*values)[0], want, rtol=1e-10, atol=1e-12,
                                   err_msg=config.to_json())


def test_a_matmul_that_streams_keeps_its_reads():
    # dense's B[k, j] streams along j: no reshaped alias, even with a flattened row read
    x = nf.placeholder((12, 8), name="x")
    w = nf.placeholder((8, 16), name="w")
    k = nf.reduce_axis(8, name="k")
    t = nf.compute((3, 4, 16), lambda b, i, j: nf.sum(x[b * 4 + i, k] * w[k, j], axis=k), name="t")
    assert Stage(t).tensor is t
