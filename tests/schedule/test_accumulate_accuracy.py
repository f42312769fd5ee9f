"""Float32 sums are as accurate as PyTorch's (issue 16, item 6): blocked
accumulation (schedule/accumulate.py) keeps each reduction's error against
float64 (the largest over a reduction's outputs) within 2x of torch's -- or
of half an ulp of the largest result, the best a float32 answer can be -- for 10^3 to 10^7 random elements."""
import numpy as np
import pytest

import neoflow as nf

torch = pytest.importorskip("torch")

# name -> (neoflow op, torch op, input shape of n elements)
CASES = {
    "sum": (lambda x: nf.nn.sum(x), lambda t: t.sum(), lambda n: (n,)),
    "mean": (lambda x: nf.nn.mean(x), lambda t: t.mean(), lambda n: (n // 40, 40)),
    "rows": (lambda x: nf.nn.sum(x, -1), lambda t: t.sum(-1), lambda n: (8, n // 8)),
    "columns": (lambda x: nf.nn.sum(x, 0), lambda t: t.sum(0), lambda n: (n // 24, 24)),
}


def _errors(kind, n, data, seed=0):
    nf_op, torch_op, shape_of = CASES[kind]
    shape = shape_of(n)
    rng = np.random.default_rng(seed)
    x = (rng.random(shape) if data == "uniform" else rng.standard_normal(shape)).astype(np.float32)
    p = nf.placeholder(shape, name="x")
    got = np.asarray(nf.build(nf_op(p), [p])(x), dtype=np.float64)
    exact = torch_op(torch.from_numpy(x.astype(np.float64))).numpy()
    theirs = torch_op(torch.from_numpy(x)).double().numpy()
    floor = float(np.spacing(np.float32(np.abs(exact).max()))) / 2
    return np.abs(got - exact).max(), max(np.abs(theirs - exact).max(), floor)


def _mse_errors(n, seed=0):
    rng = np.random.default_rng(seed)
    shape = (n // 100, 100)
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    pa, pb = nf.placeholder(shape, name="a"), nf.placeholder(shape, name="b")
    got = float(nf.build(nf.nn.mse_loss(pa, pb), [pa, pb])(a, b))
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    exact = torch.nn.functional.mse_loss(ta.double(), tb.double()).item()
    theirs = torch.nn.functional.mse_loss(ta, tb).item()
    return abs(got - exact), max(abs(theirs - exact), float(np.spacing(np.float32(exact))) / 2)


def _seeds(n):
    return range(10 if n <= 100_000 else 3)   # small sums: luck dominates one draw


SIZES = [1000, 30_000, 1_000_000, pytest.param(10_000_000, marks=pytest.mark.slow)]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("data", ["uniform", "normal"])
def test_sum_error_within_twice_torch(kind, n, data):
    ours, theirs = np.sum([_errors(kind, n, data, seed) for seed in _seeds(n)], axis=0)
    assert ours <= 2 * theirs, (
        f"{kind} of {n} {data} values: error {ours:.3g} vs torch's {theirs:.3g}")


@pytest.mark.parametrize("n", SIZES)
def test_mse_error_within_twice_torch(n):
    ours, theirs = np.sum([_mse_errors(n, seed) for seed in _seeds(n)], axis=0)
    assert ours <= 2 * theirs, f"mse over {n}: error {ours:.3g} vs torch's {theirs:.3g}"


def test_a_loop_whose_trip_count_is_unknown_is_never_cut():
    # conv_transpose2d's window loops have bounds the interval analysis cannot
    # size; cutting them as if they ran 2**40 times nested ~20 levels of
    # partial tiles around each (30x slower); they stay one loop
    x = nf.placeholder((2, 16, 5, 5), name="x")
    w = nf.placeholder((16, 8, 4, 4), name="w")
    y = nf.nn.conv_transpose2d(x, w, stride=2, padding=1)
    f = nf.build(y, [x, w], database=False)
    assert f.source.count("nf_max_i64(0, (((nf_max_i64(0,") == 0
    xv = np.random.default_rng(0).standard_normal((2, 16, 5, 5)).astype(np.float32)
    wv = np.random.default_rng(1).standard_normal((16, 8, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(f(xv, wv), nf.evaluate(y, {x: xv, w: wv}), rtol=1e-4, atol=1e-4)


def test_a_clipped_window_loop_is_bounded_by_its_outer_sides_and_cut():
    # a strided, padded conv's weight gradient sums over batch x clipped window
    # loops (max(0, ..) .. min(16, ..) of a divided index): 16 x 16 x 16 terms
    # per weight, which used to be one sequence (2.5x torch's error here)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 3, 32, 32)).astype(np.float32)
    w = (rng.standard_normal((32, 3, 4, 4)) * 0.1).astype(np.float32)
    dy = rng.standard_normal((16, 32, 16, 16)).astype(np.float32)
    px, pw = nf.placeholder(x.shape, name="x"), nf.parameter(w.shape, name="w")
    pdy = nf.placeholder(dy.shape, name="dy")
    (gw,) = nf.grad(nf.nn.sum(nf.nn.conv2d(px, pw, stride=2, padding=1) * pdy), [pw])
    got = np.asarray(nf.build(gw, [px, pw, pdy], database=False)(x, w, dy), dtype=np.float64)

    def torch_grad(dtype):
        tw = torch.from_numpy(w).to(dtype).requires_grad_()
        y = torch.nn.functional.conv2d(torch.from_numpy(x).to(dtype), tw, stride=2, padding=1)
        (y * torch.from_numpy(dy).to(dtype)).sum().backward()
        return tw.grad.double().numpy()

    exact, theirs = torch_grad(torch.float64), torch_grad(torch.float32)
    assert np.abs(got - exact).max() <= 2 * np.abs(theirs - exact).max()


@pytest.mark.parametrize("k", [37, 1000, 4099])
def test_contraction_error_within_twice_torch(k):
    # a register tile of products runs 128 adds between partials
    # (CONTRACTION_TILE_BLOCK), as BLAS does; still within 2x torch.mm's error
    rng = np.random.default_rng(k)
    a = rng.standard_normal((29, k)).astype(np.float32)
    b = rng.standard_normal((k, 67)).astype(np.float32)
    pa, pb = nf.placeholder(a.shape, name="a"), nf.placeholder(b.shape, name="b")
    r = nf.reduce_axis(k, name="r")
    c = nf.compute((29, 67), lambda i, j: nf.sum(pa[i, r] * pb[r, j], axis=r), name="c")
    got = np.asarray(nf.build(c, [pa, pb])(a, b), dtype=np.float64)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    theirs = (torch.from_numpy(a) @ torch.from_numpy(b)).double().numpy()
    floor = float(np.spacing(np.float32(np.abs(exact).max()))) / 2
    assert np.abs(got - exact).max() <= 2 * max(np.abs(theirs - exact).max(), floor)


def test_only_contractions_take_the_long_tile_block():
    # the chunk loops of a register tile's partials: `for (v = c * 128; v < c * 128 + 128 ...`
    import re
    from neoflow.schedule.accumulate import CONTRACTION_TILE_BLOCK, TILE_BLOCK
    x = nf.placeholder((300, 24), name="x")
    w = nf.placeholder((300, 24), name="w")
    r = nf.reduce_axis(300, name="r")
    chunks = {}
    for name, term in (("dot", lambda i, j: x[r, i] * w[r, j]),
                       ("add", lambda i, j: x[r, i] + w[r, j])):
        c = nf.compute((24, 24), lambda i, j: nf.sum(term(i, j), axis=r), name=name)
        src = nf.build(c, [x, w], database=False).source
        chunks[name] = {int(n) for n in re.findall(r"\(v\d+ \* (\d+)\) \+ \1\)", src)}
    assert max(chunks["dot"]) == CONTRACTION_TILE_BLOCK
    assert max(chunks["add"]) == TILE_BLOCK
