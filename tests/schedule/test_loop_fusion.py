"""loop_fusion: sibling elementwise loops fused when no iteration meets a later
one's element, shared transcendentals computed once, results bit-identical;
and the default schedule chaining the stages where that pays (LLTM's cell)."""
import numpy as np

import neoflow as nf
from neoflow.graph.plan import plan_kernels
from neoflow.graph.kernel import Kernel
from neoflow.runtime.native import compile_kernels
from neoflow.schedule import default_config
from neoflow.schedule.loop_fusion import _meets_later, fuse_loops
from neoflow.schedule.loop_ir import Buffer, For, Load, Seq, Store, Var, dump
from neoflow.te import dtype as dt
from neoflow.te.expr import Binary, Const, Select, Unary
from neoflow.zoo import workloads

ROWS, COLS = 64, 256


def idx(var, shift=0):
    return var if shift == 0 else Binary("add", var, Const(shift, dt.INDEX), dt.INDEX)


def loop(var, n, *stores, begin=0, kind="vectorized"):
    return For(var, Const(begin, dt.INDEX), Const(begin + n, dt.INDEX), kind, Seq(list(stores)))


def f32(name, n=256):
    return Buffer("float32", (n,), "arg", name)


def exp(e):
    return Unary("exp", e, "float32")


def test_an_earlier_loops_element_read_at_the_same_iteration_fuses():
    x, a, b = f32("x"), f32("a"), f32("b")
    s, u = Var("s"), Var("u")
    out = fuse_loops(Seq([loop(s, 128, Store(a, s, exp(Load(x, s)))),
                          loop(u, 128, Store(b, u, Load(a, idx(u, -128))), begin=128)]))
    assert dump(out).count("for ") == 1
    assert "b[(s + 128)] = shared[0]" in dump(out)          # a[s], just stored


def test_reading_what_a_later_iteration_writes_does_not_fuse():
    x, a, b = f32("x"), f32("a"), f32("b")
    s, u = Var("s"), Var("u")
    reversed_ = Binary("sub", Const(127, dt.INDEX), u, dt.INDEX)
    for index in (idx(u, 1), reversed_):          # a[s + 1], a[127 - s]: written later
        out = fuse_loops(Seq([loop(s, 128, Store(a, s, exp(Load(x, s)))),
                              loop(u, 128, Store(b, u, Load(a, index)))]))
        assert dump(out).count("for ") == 2


def test_dependences_point_by_point():
    s, i = Var("s"), Var("i")
    row = Binary("mul", i, Const(384, dt.INDEX), dt.INDEX)

    def at(shift, coef=1):
        e = s if coef == 1 else Binary("mul", s, Const(coef, dt.INDEX), dt.INDEX)
        return Binary("add", row, idx(e, shift), dt.INDEX)
    assert not _meets_later(at(0), at(0), s, 0, 128)       # same element, same iteration
    assert not _meets_later(at(0), at(-1), s, 0, 128)      # written an iteration before
    assert _meets_later(at(0), at(1), s, 0, 128)           # written an iteration after
    assert not _meets_later(at(0), at(128), s, 0, 128)     # disjoint pieces of one row
    assert _meets_later(at(0), at(0, coef=2), s, 0, 128)   # a[2t] was a[t'] for t' = 2t > t
    assert not _meets_later(at(0, coef=2), at(0), s, 0, 128)
    other_row = Binary("add", Binary("mul", Var("k"), Const(384, dt.INDEX), dt.INDEX), s,
                       dt.INDEX)
    assert _meets_later(at(0), other_row, s, 0, 128)       # not comparable: assumed to meet
    scalar = Const(0, dt.INDEX)
    assert _meets_later(scalar, scalar, s, 0, 128)         # one element, every iteration


def test_a_loop_overwriting_what_an_earlier_one_still_reads_later_does_not_fuse():
    x, y, a = f32("x"), f32("y"), f32("a")
    s, u = Var("s"), Var("u")
    first = loop(s, 128, Store(a, s, Load(y, idx(s, -1))))    # reads y[s - 1] ...
    second = loop(u, 128, Store(y, u, Load(x, u)))           # ... that y[u] overwrites
    assert dump(fuse_loops(Seq([first, second]))).count("for ") == 2
    ahead = loop(s, 128, Store(a, s, Load(y, idx(s, 1))))    # y[s + 1] is read before
    assert dump(fuse_loops(Seq([ahead, second]))).count("for ") == 1


def test_loops_of_other_lengths_stay_apart():
    x, a, b = f32("x"), f32("a"), f32("b")
    s, u = Var("s"), Var("u")
    first = loop(s, 128, Store(a, s, Load(x, s)))
    assert dump(fuse_loops(Seq([first, loop(u, 64, Store(b, u, Load(x, u)))]))).count(
        "for ") == 2


def only_loop(stmt):
    loops = [st for st in stmt.stmts if isinstance(st, For)] if isinstance(stmt, Seq) else [stmt]
    assert len(loops) == 1, dump(stmt)
    return loops[0]


def test_an_independent_serial_loop_joins_a_vectorized_one_and_the_fused_loop_vectorizes():
    # a concatenation gradient's piece that loop partitioning freed of its checks is
    # serial; with no element shared between its iterations it fuses, vectorized
    x, a, b, c = f32("x"), f32("a"), f32("b"), f32("c", 512)
    s, u, w = Var("s"), Var("u"), Var("w")
    out = fuse_loops(Seq([
        loop(s, 128, Store(a, s, exp(Load(x, s)))),
        loop(u, 128, Store(c, idx(u, 256), Binary("mul", Load(a, u), exp(Load(x, u)),
                                                   "float32")), kind="serial"),
        loop(w, 128, Store(b, w, Load(a, w)))]))
    assert only_loop(out).kind == "vectorized"
    assert dump(out).count("exp(") == 1


def test_a_serial_loop_carrying_a_dependence_stays_apart_from_a_vectorized_one():
    x, a, b, acc = f32("x"), f32("a"), f32("b"), f32("acc", 1)
    s, u = Var("s"), Var("u")
    zero = Const(0, dt.INDEX)
    running = loop(u, 128, Store(b, idx(u, 1), Binary("add", Load(b, u), Load(x, u),
                                                       "float32")), kind="serial")
    total = loop(u, 128, Store(acc, zero, Binary("add", Load(acc, zero), Load(x, u),
                                                  "float32")), kind="serial")
    for carried in (running, total):
        vectorized = loop(s, 128, Store(a, s, Load(x, s)))
        assert dump(fuse_loops(Seq([vectorized, carried]))).count("for ") == 2
        serial = loop(s, 128, Store(a, s, Load(x, s)), kind="serial")
        assert only_loop(fuse_loops(Seq([serial, carried]))).kind == "serial"


def test_a_call_made_twice_is_made_once_but_not_out_of_a_select_branch():
    x, y, a, b = f32("x"), f32("y"), f32("a"), f32("b")
    s, u = Var("s"), Var("u")
    guarded = Select(Binary("gt", Load(y, u), Const(0.0, "float32"), dt.BOOL),
                     Unary("tanh", Load(x, u), "float32"), Const(0.0, "float32"))
    out = fuse_loops(Seq([
        loop(s, 128, Store(a, s, Binary("add", exp(Load(x, s)), Unary(
            "tanh", Load(x, s), "float32"), "float32"))),
        loop(u, 128, Store(b, u, Binary("mul", exp(Load(x, u)), guarded, "float32")))]))
    text = dump(out)
    assert text.count("exp(") == 1                          # shared: one scalar
    assert text.count("tanh(") == 2                         # the guarded one stays guarded
    assert "where((y[s] > 0.0), tanh(x[s]), 0.0)" in text


def test_a_stored_value_read_back_is_passed_on_in_a_scalar():
    x, a, b = f32("x"), f32("a"), f32("b")
    s, u = Var("s"), Var("u")
    out = dump(fuse_loops(Seq([
        loop(s, 128, Store(a, s, exp(Load(x, s)))),
        loop(u, 128, Store(b, u, Unary("tanh", Load(a, u), "float32")))])))
    assert "a[s] = shared[0]" in out and "tanh(shared[0])" in out and "tanh(a[s])" not in out


def lltm_chain():
    [w] = workloads.lltm_cell()
    kernels, _ = plan_kernels(w.outputs, w.inputs)
    [kernel] = [k for k in kernels if len(k.stages) == 5]
    return w, kernel


def test_the_default_chains_lltms_cell_update_and_gradient_and_not_milstms():
    _, kernel = lltm_chain()
    assert [t.name for t in kernel.stages] == ["gates", "c_new", "h_new", "dc_new", "dgates"]
    assert [sc.compute_at for sc in default_config(kernel).stages] == [
        False, False, True, True, True]
    [w] = workloads.milstm_gates()
    kernels, _ = plan_kernels(w.outputs, w.inputs)
    assert not any(sc.compute_at for k in kernels for sc in default_config(k).stages)


def test_chain_calls_shared_across_stages_and_pieces_bit_identical_and_right():
    # LLTM's fused cell update and gradient: one inner loop, exp, the two
    # sigmoids and tanh each evaluated once per point (13 calls before)
    w, kernel = lltm_chain()
    rng = np.random.default_rng(0)
    leaves = {t: rng.uniform(-1, 1, t.shape).astype(np.float32) for t in w.inputs}
    computed = [t for t in kernel.inputs if t.is_compute]
    values = dict(leaves)
    values.update(zip(computed, nf.evaluate(computed, leaves)))
    inputs = list(kernel.inputs)
    fused = compile_kernels([kernel], inputs, list(kernel.outputs), list(kernel.outputs),
                            [default_config(kernel)])
    apart_config = default_config(kernel)
    for sc in apart_config.stages:
        sc.compute_at = False
    apart = compile_kernels([kernel], inputs, list(kernel.outputs), list(kernel.outputs),
                            [apart_config])
    chain = fused.source[fused.source.index("/* kernel 0"):]
    tail = chain[chain.rindex("#pragma omp parallel"):]
    assert tail.count("for (") == 2                          # rows, then one inner loop
    assert tail.count("expf(") == 3 and tail.count("tanhf(") == 1
    args = [values[t] for t in inputs]
    got, ref = fused(*args), apart(*args)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)
    expected = nf.evaluate(list(kernel.outputs), leaves)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_a_chain_with_nothing_shared_keeps_one_loop_per_stage():
    x = nf.placeholder((ROWS, COLS), name="x")
    a = nf.compute((ROWS, COLS), lambda i, j: nf.exp(x[i, j]), name="a")
    b = nf.compute((ROWS, COLS), lambda i, j: nf.tanh(a[i, j]) * x[i, j], name="b")
    kernel = Kernel([a, b])
    assert [sc.compute_at for sc in default_config(kernel).stages] == [False, False]
    shared = nf.compute((ROWS, COLS), lambda i, j: nf.exp(x[i, j]) * b[i, j], name="shared")
    assert [sc.compute_at for sc in default_config(Kernel([a, b, shared])).stages] == [
        False, True, True]


def test_a_shared_call_inside_a_shared_call():
    x, a, b = f32("x"), f32("a"), f32("b")
    s, u = Var("s"), Var("u")

    def nested(v):
        return Unary("tanh", Unary("sigmoid", Load(x, v), "float32"), "float32")
    text = dump(fuse_loops(Seq([loop(s, 128, Store(a, s, nested(s))),
                                loop(u, 128, Store(b, u, exp(nested(u))))])))
    assert text.count("sigmoid(") == 1 and text.count("tanh(") == 1
    assert text.index("sigmoid(") < text.index("tanh(")
