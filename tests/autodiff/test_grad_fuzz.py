"""Random index maps and random expression trees: nf.grad against central
finite differences (float64, interpreter)."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import neoflow as nf
from grad_check import Spec, check_fd

FUZZ = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
A_SHAPE, OUT_SHAPE, K = (5, 4), (3, 4), 3


@st.composite
def index_maps(draw):
    """One read's index expressions: affine in (i, j, k), sometimes // or % a constant."""
    out = []
    for _ in range(2):
        coeffs = [draw(st.integers(-2, 2)) for _ in range(3)]
        offset = draw(st.integers(-2, 3))
        wrap = draw(st.sampled_from([None, None, "//", "%"]))
        q = draw(st.integers(2, 3))
        out.append((coeffs, offset, wrap, q))
    return out


def _index(spec, i, j, k):
    (c0, c1, c2), offset, wrap, q = spec
    e = i * c0 + j * c1 + k * c2 + offset
    return e // q if wrap == "//" else (e % q if wrap == "%" else e)


def _guarded_read(a, spec, i, j, k):
    r0, r1 = _index(spec[0], i, j, k), _index(spec[1], i, j, k)
    inside = (r0 >= 0) & (r0 < a.shape[0]) & (r1 >= 0) & (r1 < a.shape[1])
    return nf.where(inside, a[r0, r1], 0.0)


@FUZZ
@given(maps=st.lists(index_maps(), min_size=1, max_size=2), op=st.sampled_from(["sum", "max"]))
def test_random_affine_index_maps(maps, op):
    def build(a, w):
        k = nf.reduce_axis(K, name="k")
        reduce = nf.sum if op == "sum" else nf.max

        def body(i, j):
            value = None
            for spec in maps:
                read = _guarded_read(a, spec, i, j, k) * w[k]
                value = read if value is None else value + read * read
            return reduce(value, axis=k)
        return nf.compute(OUT_SHAPE, body)
    check_fd(build, [Spec(A_SHAPE), Spec((K,))])


UNARY = {
    "exp_tanh": lambda v: nf.exp(nf.tanh(v)), "log": lambda v: nf.log(nf.abs(v) + 1.0),
    "sqrt": lambda v: nf.sqrt(v * v + 0.5), "rsqrt": lambda v: nf.rsqrt(v * v + 0.5),
    "sigmoid": nf.sigmoid, "tanh": nf.tanh, "erf": nf.erf, "abs": nf.abs, "neg": lambda v: -v,
    "pow": lambda v: nf.pow(v * v + 0.5, 1.5), "cast": lambda v: nf.cast(
        nf.cast(v, "float32"), "float64") * 0.0 + v,
}
BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (nf.abs(b) + 1.0), "max": nf.maximum, "min": nf.minimum,
    "where": lambda a, b: nf.where(a > b, a * b, a - b),
    "pow": lambda a, b: nf.pow(a * a + 0.5, nf.tanh(b)),
}


@st.composite
def trees(draw, depth=3):
    """A random expression over the leaves x, y (as a nested tuple)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(["x", "y", "xs", "c"]))
    if draw(st.booleans()):
        return (draw(st.sampled_from(sorted(UNARY))), draw(trees(depth=depth - 1)))
    return (draw(st.sampled_from(sorted(BINARY))), draw(trees(depth=depth - 1)),
            draw(trees(depth=depth - 1)))


def _build_tree(tree, leaves):
    if isinstance(tree, str):
        return leaves[tree]
    if len(tree) == 2:
        return UNARY[tree[0]](_build_tree(tree[1], leaves))
    return BINARY[tree[0]](_build_tree(tree[1], leaves), _build_tree(tree[2], leaves))


@FUZZ
@given(tree=trees(), reduce=st.sampled_from([None, "sum", "max", "min"]))
def test_random_expression_trees(tree, reduce):
    def build(x, y):
        k = nf.reduce_axis(3, name="k")

        def body(i):
            leaves = {"x": x[i, 0], "y": y[i], "xs": x[i, k] if reduce else x[i, 1],
                      "c": nf.const(0.7, "float64")}
            value = _build_tree(tree, leaves)
            if reduce is None:
                return value
            return {"sum": nf.sum, "max": nf.max, "min": nf.min}[reduce](value, axis=k)
        return nf.compute((4,), body)
    check_fd(build, [Spec((4, 3)), Spec((4,))], tol=1e-5)
