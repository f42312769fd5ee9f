"""nf.random_uniform: the Philox generator (Random123's known answers), the
generated C bit for bit equal to nf.evaluate, the moments and independence
of the values, seeds that reproduce, fresh draws per call and per step, and
the same values wherever a fused kernel reads them."""
import math

import numpy as np
import pytest

import neoflow as nf
from neoflow.errors import DTypeError, InputError, ShapeError
from neoflow.te.random import philox4x32, state_array

KAT = [  # Random123 kat_vectors, philox4x32_10: counter words, key words -> output words
    ((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
]


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_philox_known_answers(counter, key, expected):
    assert tuple(int(w) for w in philox4x32(*counter, *key)) == expected


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(), (1,), (37,), (5, 13), (3, 4, 7)])
def test_compiled_equals_evaluate_bitwise(shape, dtype):
    u = nf.random_uniform(shape, dtype=dtype, name="u")
    f = nf.build(u, [])
    for seed in (0, 7, 2 ** 64 - 1, -3):
        ours = f(seed=seed)
        ref = nf.evaluate(u, {}, seed=seed)
        assert ours.dtype == np.dtype(dtype) and ours.shape == shape
        assert ours.tobytes() == ref.tobytes()


def test_fused_reads_see_the_same_values():
    """u read by an elementwise consumer, a reduction and a transposed read,
    each fused into its own kernel, sees the values u itself has."""
    n, m = 9, 17
    x = nf.placeholder((n, m), name="x")
    u = nf.random_uniform((n, m), name="u")
    twice = nf.compute((n, m), lambda i, j: u[i, j] * 2.0 + x[i, j] * 0.0, name="twice")
    k = nf.reduce_axis(m, name="k")
    rows = nf.compute((n,), lambda i: nf.max(u[i, k], axis=k), name="rows")
    flipped = nf.compute((m, n), lambda j, i: u[i, j], name="flipped")
    f = nf.build([twice, rows, flipped], [x])
    xv = np.random.default_rng(1).standard_normal((n, m)).astype(np.float32)
    a, r, t = f(xv, seed=5)
    ref = nf.evaluate(u, {}, seed=5)
    assert (a == ref * 2).all() and (r == ref.max(axis=1)).all() and (t == ref.T).all()
    assert all(s.count("nf_uniform_f32(") for s in [f.source])
    assert not any(t.name == "u" for k in f.kernels for t in k.outputs)  # recomputed, not stored


def _draw(shape, seed, dtype="float32"):
    return nf.evaluate(nf.random_uniform(shape, dtype=dtype), {}, seed=seed)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_moments_and_uniformity(dtype):
    n = 1 << 18
    v = nf.build(nf.random_uniform((n,), dtype=dtype), [])(seed=11).astype(np.float64)
    assert v.min() >= 0 and v.max() < 1
    sigma = math.sqrt(1 / 12 / n)
    assert abs(v.mean() - 0.5) < 5 * sigma
    assert abs(v.var() - 1 / 12) < 5 * math.sqrt(1 / 180 / n)   # var of (u - 1/2)^2 is 1/180
    counts = np.bincount((v * 64).astype(int), minlength=64)
    chi2 = ((counts - n / 64) ** 2 / (n / 64)).sum()
    assert chi2 < 63 + 5 * math.sqrt(2 * 63)                    # chi-square, 63 degrees
    ks = np.abs(np.sort(v) - (np.arange(n) + 0.5) / n).max()
    assert ks < 1.95 / math.sqrt(n)                             # Kolmogorov-Smirnov, 0.1%


def test_independence_between_elements_streams_draws_and_seeds():
    n = 1 << 16
    bound = 5 / math.sqrt(n)          # |correlation| of independent samples: ~ N(0, 1/n)

    def corr(a, b):
        return abs(np.corrcoef(a.ravel(), b.ravel())[0, 1])
    u = nf.random_uniform((256, 256), name="u")
    w = nf.random_uniform((256, 256), name="w")
    f = nf.build([u, w], [])
    (a, b), (c, _) = f(seed=3), f(seed=4)
    d, _ = f()
    e, _ = f()
    flat = a.ravel()
    for lag in (1, 2, 8, 256):                              # neighbours, lanes, rows
        assert corr(flat[:-lag], flat[lag:]) < bound, lag
    assert corr(a, b) < bound                              # two random tensors (streams)
    assert corr(a, c) < bound and corr(d, e) < bound       # two seeds; two unseeded calls
    assert corr(a[:, :-1], a[:, 1:]) < bound
    pairs = (a[::2] * 8).astype(int) * 8 + (a[1::2] * 8).astype(int)   # joint of neighbours
    counts = np.bincount(pairs.ravel(), minlength=64)
    expected = pairs.size / 64
    assert ((counts - expected) ** 2 / expected).sum() < 63 + 5 * math.sqrt(2 * 63)


def test_seeds_reproduce_and_calls_draw_afresh():
    x = nf.placeholder((4, 6), name="x")
    u = nf.random_uniform((4, 6), name="u")
    y = nf.compute((4, 6), lambda i, j: x[i, j] + u[i, j], name="y")
    f = nf.build(y, [x])
    xv = np.zeros((4, 6), np.float32)
    assert (f(xv, seed=7) == f(xv, seed=7)).all()
    assert (f(xv, seed=7) != f(xv, seed=8)).mean() > 0.9
    assert (f(xv) != f(xv)).mean() > 0.9
    assert (f(xv, seed=7) == nf.evaluate(y, {x: xv}, seed=7)).all()
    g = nf.build(y, [x])                                   # another build: same numbers
    assert (g(xv, seed=7) == f(xv, seed=7)).all()
    assert (nf.evaluate(y, {x: xv}) != nf.evaluate(y, {x: xv})).mean() > 0.9


def test_state_array_words():
    assert state_array(-1, 2 ** 63, 5).view(np.uint64).tolist() == [2 ** 64 - 1, 2 ** 63, 5]


def test_bad_arguments():
    with pytest.raises(DTypeError, match="float32 or float64"):
        nf.random_uniform((3,), dtype="int32")
    with pytest.raises(ShapeError, match="positive int"):
        nf.random_uniform((3, 0))
    with pytest.raises(ShapeError, match="2\\*\\*32"):
        nf.random_uniform((1 << 16, 1 << 16, 2))
    f = nf.build(nf.random_uniform((3,)), [])
    with pytest.raises(InputError, match="seed must be an int"):
        f(seed=1.5)
    with pytest.raises(InputError, match="seed must be an int"):
        nf.evaluate(nf.random_uniform((3,)), {}, seed="7")


def _trainer(seed, backend="native"):
    x = nf.placeholder((6, 10), name="x")
    w = nf.parameter((6, 10), init=np.linspace(0.5, 1.5, 60).reshape(6, 10).astype(np.float32),
                     name="w")
    u = nf.random_uniform((6, 10), name="u")
    loss = nf.nn.sum(nf.compute((6, 10), lambda i, j: x[i, j] * w[i, j] * u[i, j], name="p"))
    return x, nf.Trainer(loss, nf.optim.SGD(lr=0.1), seed=seed, backend=backend)


def test_trainer_steps_draw_afresh_and_seeds_reproduce():
    xb = np.ones((6, 10), np.float32)
    x, a = _trainer(3)
    _, b = _trainer(3)
    _, c = _trainer(4)
    la = [a.step({x: xb}) for _ in range(3)]
    lb = [b.step({"x": xb}) for _ in range(3)]
    lc = [c.step({"x": xb}) for _ in range(3)]
    assert la == lb and la != lc
    assert len(set(la)) == 3
    _, r = _trainer(3, backend="reference")      # the interpreter draws the same numbers
    lr = [r.step({"x": xb}) for _ in range(3)]
    assert lr == pytest.approx(la, rel=1e-5)


def test_trainer_run_draws_without_disturbing_the_steps():
    xb = np.ones((6, 10), np.float32)
    x, a = _trainer(3)
    _, b = _trainer(3)
    la = [a.step({x: xb}) for _ in range(3)]
    lb = [b.step({"x": xb})]
    loss = b.unfused_graph.loss
    assert b.run(loss, {"x": xb}) != b.run(loss, {"x": xb})
    lb += [b.step({"x": xb}) for _ in range(2)]
    assert la == lb


def test_a_resumed_trainer_continues_the_same_draws(tmp_path):
    xb = np.ones((6, 10), np.float32)
    x, a = _trainer(5)
    la = [a.step({x: xb}) for _ in range(4)]
    _, b = _trainer(5)
    lb = [b.step({"x": xb}) for _ in range(2)]
    b.save(tmp_path / "ckpt.npz")
    _, c = _trainer(5)
    c.load(tmp_path / "ckpt.npz")
    lb += [c.step({"x": xb}) for _ in range(2)]
    assert lb == la
