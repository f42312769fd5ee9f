"""Kernel grouping (graph/grouping): sibling fusion and its cost estimate,
optimizer updates fused into the gradient's kernel, run-order and in-place
legality of the grouped training step, and the explain / Graphviz views."""
import sys

import numpy as np
import pytest

import neoflow as nf
from neoflow.graph.plan import plan_kernels
from neoflow.errors import InputError, MissingDependencyError
from neoflow.graph import fuse, fuse_training_graph, group_kernels, kernels_of
from neoflow.graph.explain import to_graphviz
from neoflow.graph.grouping import SIBLING_CACHE_BYTES
from neoflow.graph.training import training_graph
from neoflow.te.visit import tensor_inputs
from zoo_models import build


def gate_cell(n=4, d=8, dtype="float64"):
    """Two gate matmuls reading the same x (siblings), combined elementwise."""
    x = nf.placeholder((n, d), dtype, name="x")
    w1 = nf.placeholder((d, d), dtype, name="w1")
    w2 = nf.placeholder((d, d), dtype, name="w2")
    k = nf.reduce_axis(d, name="k")
    g1 = nf.compute((n, d), lambda i, j: nf.sum(x[i, k] * w1[k, j], axis=k), name="gate1")
    k2 = nf.reduce_axis(d, name="k2")
    g2 = nf.compute((n, d), lambda i, j: nf.sum(x[i, k2] * w2[k2, j], axis=k2), name="gate2")
    out = nf.compute((n, d), lambda i, j: nf.tanh(g1[i, j]) * nf.sigmoid(g2[i, j]), name="out")
    return [x, w1, w2], out


def test_sibling_gate_matmuls_share_one_kernel():
    inputs, out = gate_cell()
    part = fuse([out])
    kernels = kernels_of(part)
    assert [[t.name for t in k.stages] for k in kernels] == [["gate1", "gate2", "out"]]
    (sib,) = [d for d in part.grouping if d.kind == "sibling"]
    assert sib.fused and sib.consumer.name == "gate2" and "shares x" in sib.reason
    assert "parallel" in sib.reason
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(t.shape) for t in inputs]
    got = nf.build(out, inputs)(*values)
    np.testing.assert_allclose(got, nf.build(out, inputs, fusion=False)(*values), rtol=1e-12)
    np.testing.assert_allclose(got, nf.evaluate(out, dict(zip(inputs, values))), rtol=1e-12)


def test_sibling_refused_when_the_shared_input_leaves_the_cache():
    n = 128                       # x is 128 x 128 float64: 128 KiB, two of them exceed the budget
    _, out = gate_cell(n=n, d=n)
    part = fuse([out])
    kernels = kernels_of(part)
    assert len(kernels) == 2
    (sib,) = [d for d in part.grouping if d.kind == "sibling"]
    assert not sib.fused and f"> {SIBLING_CACHE_BYTES}" in sib.reason


def test_sharing_a_scalar_or_being_an_output_is_no_sibling():
    x = nf.placeholder((4, 8), name="x")
    s = nf.placeholder((), name="s")
    k = nf.reduce_axis(8, name="k")
    a = nf.compute((4,), lambda i: nf.sum(x[i, k], axis=k) * s[()], name="a")
    y = nf.placeholder((4, 8), name="y")
    k2 = nf.reduce_axis(8, name="k2")
    b = nf.compute((4,), lambda i: nf.max(y[i, k2], axis=k2) * s[()], name="b")
    assert len(plan_kernels([a, b], [x, y, s])[0]) == 2     # only the scalar s in common
    c = nf.compute((4,), lambda i: nf.max(x[i, k2], axis=k2), name="c")
    assert len(plan_kernels([a, c], [x, s])[0]) == 2        # outputs keep their kernels


def test_group_kernels_without_fusion_is_one_kernel_per_compute():
    _, out = gate_cell()
    part = fuse([out], fusion=False)
    kernels = group_kernels(part.computes, {id(out)}, fusion=False)
    assert [len(k.stages) for k in kernels] == [1, 1, 1]


def check_legal(graph, kernels):
    """Every compute runs after what it reads; an in-place update runs after
    every other reader of the value it replaces."""
    stages = [t for k in kernels for t in k.stages]
    position = {id(t): n for n, t in enumerate(stages)}
    for t in stages:
        for p in tensor_inputs(t):
            if p.is_compute:
                assert position[id(p)] < position[id(t)], (p.name, t.name)
    for a in graph.aliases:
        if a.inplace:
            readers = [t for t in stages if t is not a.value
                       and any(p is a.target for p in tensor_inputs(t))]
            assert all(position[id(r)] < position[id(a.value)] for r in readers), a


@pytest.mark.parametrize("name", ["mlp", "lltm", "milstm"])
@pytest.mark.parametrize("optimizer", [nf.optim.SGD(lr=0.1, momentum=0.9),
                                       nf.optim.Adam(lr=0.01)], ids=["sgd", "adam"])
def test_updates_join_the_gradient_kernel_and_the_order_stays_legal(name, optimizer):
    net = build(name)
    g = training_graph(net.loss, optimizer)
    fused, part = fuse_training_graph(g)
    check_legal(fused, part.kernels)
    assert [id(t) for k in part.kernels for t in k.stages] == [id(t) for t in fused.order]
    home = {id(t): n for n, k in enumerate(part.kernels) for t in k.stages}
    for a in fused.aliases:
        grad = fused.grads.get(a.target.name)
        if grad is not None and id(grad) in home:
            assert home[id(grad)] == home[id(a.value)], a   # the update is the grad's epilogue
    updates = [d for d in part.grouping if d.kind == "update"]
    assert updates and all(d.fused and "elementwise" in d.reason for d in updates)


def test_sunk_gradient_waits_for_the_readers_of_its_parameter():
    """MI-LSTM's alpha is read by later gradient computes: its gradient kernel
    moves after them, so alpha's in-place update can be its epilogue."""
    net = build("milstm")
    fused, part = fuse_training_graph(training_graph(net.loss, nf.optim.SGD(0.1, 0.9)))
    (kernel,) = [k for k in part.kernels if any(t.name == "mi.alpha.new" for t in k.stages)]
    names = [t.name for t in kernel.stages]
    start = names.index("dmi.alpha")
    assert names[start:start + 3] == ["dmi.alpha", "mi.alpha.momentum_buffer.new",
                                      "mi.alpha.new"]
    alias = next(a for a in fused.aliases if a.target.name == "mi.alpha")
    assert alias.inplace


def test_explain_lists_groups_and_dot():
    inputs, out = gate_cell()
    text = nf.explain(out)
    assert "groups:" in text and "(sibling)" in text and "(epilogue)" in text
    dot = nf.explain(out, format="dot")
    assert dot.startswith('digraph "partition" {') and dot.count("subgraph cluster_") == 1
    assert 'label="gate1 (4, 8)\\nreduction-' in dot and "->" in dot
    with pytest.raises(InputError, match="format"):
        nf.explain(out, format="svg")
    with pytest.raises(InputError, match="Trainer"):
        nf.explain(42)


def test_explain_trainer_names_the_update_fusion():
    net = build("mlp", batch=4)
    with nf.Trainer(net.loss, optimizer=nf.optim.SGD(lr=0.1, momentum=0.9),
                    backend="reference") as tr:
        text = nf.explain(tr)
        dot = nf.explain(tr, format="dot")
    assert "(update)" in text and "fc1.weight.new" in text
    assert dot.count("subgraph cluster_") == len(tr.kernels)


def test_to_graphviz_digraph_and_missing_package(monkeypatch):
    import graphviz    # the test extra installs it
    _, out = gate_cell()
    g = to_graphviz(out)
    assert isinstance(g, graphviz.Digraph)
    assert "subgraph cluster_0" in g.source and "gate2" in g.source
    monkeypatch.setitem(sys.modules, "graphviz", None)
    with pytest.raises(MissingDependencyError, match="pip install graphviz"):
        to_graphviz(out)


def test_milstm_adam_trainer_fused_matches_unfused():
    """Adam's two moments and the in-place parameter writes grouped with the
    gradients (alpha's after the later readers of alpha) change no result."""
    results = []
    for fusion in (False, True):
        net = build("milstm")
        data = net.make_batch(np.random.default_rng(1))
        with nf.Trainer(net.loss, optimizer=nf.optim.Adam(lr=0.01), fusion=fusion) as tr:
            losses = [tr.step(data) for _ in range(3)]
            results.append((losses, tr.parameters()))
    (l0, p0), (l1, p1) = results
    np.testing.assert_allclose(l1, l0, rtol=1e-5, atol=1e-6)
    for key in p0:
        np.testing.assert_allclose(p1[key], p0[key], rtol=1e-4, atol=1e-6)
