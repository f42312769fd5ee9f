"""The training graph (graph.training) and its buffer plan (graph.memory):
what is trained, which updates alias which buffers, run order constraints,
reuse of dead buffers, and one planned step against nf.evaluate of the
whole graph."""
import numpy as np
import pytest

import neoflow as nf
from neoflow.graph.memory import nbytes, plan_buffers
from neoflow.graph.training import training_graph
from neoflow.runtime.executor import Executor
from neoflow.runtime.reference import ReferenceBackend


def deep_mlp(layers=4, width=6, batch=5):
    x = nf.placeholder((batch, width), name="x")
    y = nf.placeholder((batch,), "int64", name="y")
    h = x
    for n in range(layers):
        h = nf.nn.dense(h, nf.parameter((width, width), name=f"w{n}"),
                        nf.parameter((width,), init="uniform", name=f"b{n}"))
        h = nf.nn.tanh(h)
    return nf.nn.cross_entropy(h, y), x, y


def test_graph_parts():
    loss, x, y = deep_mlp(layers=2)
    g = training_graph(loss, nf.optim.Adam(lr=0.1))
    assert [p.name for p in g.params] == ["w0", "b0", "w1", "b1"]
    assert g.inputs == [x, y] or g.inputs == [y, x]
    assert sorted(g.state["w0"]) == ["exp_avg", "exp_avg_sq"]
    assert sorted(name for name, _ in g.scalars) == ["bias_correction2_sqrt", "step_size"]
    assert len(g.aliases) == 3 * 4 and all(a.inplace for a in g.aliases)
    assert g.outputs[0] is loss
    assert len(g.kernels()) == len(g.order)


def test_in_place_update_runs_after_every_reader():
    loss, _, _ = deep_mlp()
    g = training_graph(loss, nf.optim.SGD(lr=0.1, momentum=0.9, weight_decay=0.1))
    position = {id(t): n for n, t in enumerate(g.order)}
    for a in g.aliases:
        readers = [t for t in g.order if any(r is a.target for r in _inputs(t))]
        assert all(position[id(r)] <= position[id(a.value)] for r in readers)
    for t in g.order:  # producers first
        assert all(position[id(p)] < position[id(t)] for p in _inputs(t) if p.is_compute)


def _inputs(t):
    from neoflow.te.visit import tensor_inputs
    return tensor_inputs(t)


class MirrorSGD(nf.optim.SGD):
    """An update that reads the parameter at another element: cannot be in place."""

    def param_expr(self, p, g, state, new_state, scalars, i):
        return p[(p.shape[0] - 1 - i[0],)] - scalars["lr"][()] * g[i]


def test_an_update_reading_other_elements_is_done_by_copy():
    x = nf.placeholder((5,), "float64", name="x")
    w = nf.parameter((5,), init=np.arange(5.0), dtype="float64", name="w")
    loss = nf.nn.sum(x * w)
    g = training_graph(loss, MirrorSGD(lr=0.5))
    (alias,) = g.aliases
    assert not alias.inplace
    with nf.Trainer(loss, optimizer=MirrorSGD(lr=0.5), backend="reference") as trainer:
        xb = np.arange(5.0) + 1
        trainer.step({x: xb})
        np.testing.assert_allclose(trainer.parameters()["w"], np.arange(5.0)[::-1] - 0.5 * xb)


@pytest.mark.parametrize("layers", [1, 6])
def test_buffers_are_reused_and_never_shared_while_live(layers):
    loss, _, _ = deep_mlp(layers=layers)
    g = training_graph(loss, nf.optim.SGD(lr=0.1, momentum=0.9))
    kernels = g.kernels()
    plan = plan_buffers(g, kernels)
    stats = plan.stats(g)
    assert stats["activation_bytes_lower_bound"] <= stats["activation_bytes"]
    assert stats["activation_bytes"] <= 1.25 * stats["activation_bytes_lower_bound"]
    if layers > 1:
        assert stats["activation_bytes"] < 0.7 * stats["activation_bytes_without_reuse"]
    # independent liveness: [writer, last reader] per arena tensor
    live = {}
    for k, kernel in enumerate(kernels):
        for t in kernel.outputs:
            live[id(t)] = [k, k, t]
        for t in kernel.inputs:
            if id(t) in live:
                live[id(t)][1] = k
    for t in g.outputs:
        if id(t) in live:
            live[id(t)][1] = len(kernels)
    ranges = [(plan.home[i][1], plan.home[i][1] + nbytes(t), s, e, t)
              for i, (s, e, t) in live.items() if plan.home[i][0] == "arena"]
    assert ranges and all(lo % 64 == 0 and hi <= plan.arena_bytes for lo, hi, *_ in ranges)
    for n, (lo_a, hi_a, s_a, e_a, a) in enumerate(ranges):
        for lo_b, hi_b, s_b, e_b, b in ranges[n + 1:]:
            if not (e_a < s_b or e_b < s_a):
                assert hi_a <= lo_b or hi_b <= lo_a, f"{a.name} and {b.name} overlap while live"


def test_planned_step_matches_evaluate_of_the_whole_graph():
    loss, x, y = deep_mlp(layers=3)
    g = training_graph(loss, nf.optim.Adam(lr=0.1, weight_decay=0.01))
    kernels = g.kernels()
    ex = Executor(g, kernels, plan_buffers(g, kernels), ReferenceBackend())
    rng = np.random.default_rng(0)
    values = {}
    for t in g.leaves:
        if t.dtype == "int64":
            values[t] = rng.integers(0, 6, t.shape)
        else:
            values[t] = rng.uniform(0.1, 1.0, t.shape).astype(t.dtype)
        ex.buffer(t)[...] = values[t]
    expected = nf.evaluate(g.outputs, values)
    ex.step()
    np.testing.assert_allclose(ex.buffer(g.loss), expected[0], rtol=1e-6)
    for a, value in zip(g.aliases, expected[1:]):
        np.testing.assert_allclose(ex.buffer(a.target), value, rtol=1e-5, atol=1e-7,
                                   err_msg=a.target.name)


def test_native_and_reference_backends_agree():
    loss, x, y = deep_mlp(layers=3)
    rng = np.random.default_rng(0)
    batches = [{"x": rng.standard_normal((5, 6)).astype(np.float32),
                "y": rng.integers(0, 6, 5)} for _ in range(3)]
    losses = {}
    for backend in ("reference", "native"):
        with nf.Trainer(loss, optimizer=nf.optim.Adam(lr=0.05), backend=backend) as trainer:
            assert trainer.stats()["backend"] == backend
            losses[backend] = [trainer.step(b) for b in batches]
            losses[backend].append(trainer.parameters())
    for a, b in zip(losses["reference"][:3], losses["native"][:3]):
        assert a == pytest.approx(b, rel=1e-5)
    for name, value in losses["reference"][3].items():
        np.testing.assert_allclose(losses["native"][3][name], value, rtol=1e-5, atol=1e-6)
