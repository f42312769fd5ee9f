"""nf.build of graphs with scans: compiled code against nf.evaluate (forward
and gradients, an LSTM and a cumulative sum), and the kernel count and the
generated code size equal for length 8 and 512."""
import re

import numpy as np
import pytest

import neoflow as nf
from neoflow.zoo import lstm_scan
from neoflow.zoo.lstm_scan import lstm_layer


def _lstm_grads(T, B=2, I=3, H=4, dtype="float64"):
    x = nf.placeholder((T, B, I), dtype, name="x")
    h0 = nf.placeholder((B, H), dtype, name="h0")
    ws = [nf.placeholder(s, dtype, name=n) for n, s in
          [("wi", (4 * H, I)), ("wh", (4 * H, H)), ("bi", (4 * H,)), ("bh", (4 * H,))]]
    hs, cs = lstm_layer(x, h0, h0, *ws)
    r = [nf.reduce_axis(n) for n in hs.shape]
    loss = nf.compute((), lambda: nf.sum(hs[tuple(r)] * cs[tuple(r)], axis=r))
    inputs = [x, h0] + ws
    return [loss] + nf.grad(loss, inputs), inputs


def test_compiled_lstm_and_gradients_match_evaluate():
    outs, inputs = _lstm_grads(7)
    rng = np.random.default_rng(0)
    feed = [rng.normal(size=t.shape) * 0.5 for t in inputs]
    got = nf.build(outs, inputs)(*feed)
    want = nf.evaluate(outs, dict(zip(inputs, feed)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_compiled_cumsum_matches_evaluate():
    x = nf.placeholder((5, 9), name="x")
    y = nf.nn.cumsum(x, -1)
    xv = np.random.default_rng(1).normal(size=(5, 9)).astype(np.float32)
    np.testing.assert_allclose(nf.build(y, [x])(xv), nf.evaluate(y, {x: xv}), rtol=1e-5)


def test_kernel_count_and_code_size_do_not_grow_with_length():
    """The steps (forward and reverse scan) compile to the same code for any
    length (up to the numbers in it: bounds and strides that involve it); the
    segments outside the scans are one kernel set each, sized by their own
    schedules -- their reductions over t accumulate in blocks (one more loop
    level per 4x of length, schedule/accumulate.py), so their code grows with
    log(length) at most: 512 to 4096 steps adds under 20% (8x the steps)."""
    seen = []
    for T in (8, 512):
        outs, inputs = _lstm_grads(T, dtype="float32")
        f = nf.build(outs, inputs)
        steps = [p[3][0] for p in f._plan]
        seen.append((f.kernel_count, [len(s.kernels) for s in steps],
                     [re.sub(r"\d+", "N", s.source) for s in steps], f.source_size))
    (k8, sk8, ss8, total8), (k512, sk512, ss512, total512) = seen
    assert k8 == k512 and sk8 == sk512 and len(sk8) == 2
    assert ss8 == ss512
    outs, inputs = _lstm_grads(4096, dtype="float32")
    total4096 = nf.build(outs, inputs).source_size
    assert total8 <= total512 <= total4096 < 1.2 * total512


def test_trainer_trains_a_scanned_model():
    """nf.Trainer on zoo.lstm_scan: the first step's loss is nf.evaluate's, SGD lowers it."""
    net = lstm_scan.NETWORK
    model = net.build("small")
    batch = net._make_batch(np.random.default_rng(0), "float32", **net.small)
    with nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.5), tuning="off") as trainer:
        start = trainer.parameters()
        feed = {**{model.inputs[k]: v for k, v in batch.items()},
                **{model.params[n]: v for n, v in start.items()}}
        want = float(nf.evaluate(model.loss, feed))
        losses = [trainer.step(batch) for _ in range(25)]
        assert trainer.stats()["backend"].startswith("scan+")
    assert losses[0] == pytest.approx(want, rel=1e-5)
    assert losses[-1] < 0.7 * losses[0]


def test_trainer_groups_each_steps_computes_into_kernels_as_build_does():
    """The Trainer's scan steps (NativeBackend.function over the fused graph)
    group their computes as nf.build does: the forward step is one kernel,
    the gates' GEMM with c and h as epilogue stages."""
    model = lstm_scan.NETWORK.build("small")
    with nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.1), tuning="off") as trainer:
        steps = [p[3][0] for p in trainer._backend.scan_function._plan]
        forward = [[t.name for t in k.stages] for k in steps[0].kernels]
        assert len(forward) == 1 and len(forward[0]) == 3, forward
        assert all(len(k.stages) >= 2 for k in steps[1].kernels[:1]), steps[1].kernels


def test_backward_cell_kernel_runs_its_stages_in_one_vectorized_loop():
    """The backward step's cell kernel chains dc, the four gate gradients (pieces
    of one (B, 4H) tensor, serial loops once loop partitioning has decided their
    guards) and dc_prev: loop fusion makes them one vectorized inner loop per
    row, sigmoid(o), tanh(c) and sigmoid(f) each evaluated once per point (5
    calls where the three loops made 8); the losses stay the reference's."""
    model = lstm_scan.NETWORK.build("small", batch=32, hidden=128)
    batches = [model.make_batch(np.random.default_rng(n)) for n in range(3)]
    losses = {}
    for backend in ("native", "reference"):
        with nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.1), tuning="off",
                        backend=backend) as trainer:
            if backend == "native":
                backward = [p[3][0] for p in trainer._backend.scan_function._plan][1]
                cell = backward.source[backward.source.index("/* kernel 0"):
                                       backward.source.index("/* kernel 1")]
            losses[backend] = [trainer.step(b) for b in batches]
    rows = cell[cell.index("#pragma omp parallel for"):]
    assert rows.count("for (") == 2, rows               # the rows, one inner loop
    assert "#pragma GCC ivdep" in rows
    assert rows.count("expf(") == 3 and rows.count("tanhf(") == 2, rows
    np.testing.assert_allclose(losses["native"], losses["reference"], rtol=1e-5)


def test_trainer_with_tuning_refuses_a_scan():
    from neoflow.errors import NeoFlowError
    model = lstm_scan.NETWORK.build("small")
    with pytest.raises(NeoFlowError, match="tuning='background' does not cover a loss with "
                                           "nf.scan"):
        nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.05), tuning="background")


def test_zoo_lstm_scan_loss_and_gradients_match_its_torch_twin():
    import torch
    net = lstm_scan.NETWORK
    model = net.build("small", dtype="float64")
    rng = np.random.default_rng(2)
    batch = net._make_batch(rng, "float64", **net.small)
    values = {n: rng.normal(size=t.shape) * 0.5 for n, t in model.params.items()}
    grads = nf.grad(model.loss, [model.params[n] for n in values])
    feed = {**{model.inputs[k]: v for k, v in batch.items()},
            **{model.params[n]: v for n, v in values.items()}}
    loss, *ours = nf.evaluate([model.loss] + grads, feed)
    p = {n: torch.tensor(v, requires_grad=True) for n, v in values.items()}
    ref = net._torch_loss(p, {k: torch.tensor(v) for k, v in batch.items()}, **net.small)
    ref.backward()
    np.testing.assert_allclose(loss, ref.item(), rtol=1e-10)
    for n, g in zip(values, ours):
        np.testing.assert_allclose(g, p[n].grad.numpy(), rtol=1e-8, atol=1e-12)


def test_native_build_runs_the_loop_over_t_in_c(monkeypatch):
    from neoflow.runtime.scan_function import ScanFunction

    def refuse(*a):
        raise AssertionError("the Python loop ran")
    monkeypatch.setattr(ScanFunction, "_python_loop", refuse)
    x = nf.placeholder((6, 4), "float64", name="x")
    y = nf.nn.cumprod(x, 0)
    (dx,) = nf.grad(y, [x], head=(head := nf.placeholder((6, 4), "float64", name="head")))
    rng = np.random.default_rng(4)
    xv, hv = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    got = nf.build([y, dx], [x, head])(xv, hv)
    want = nf.evaluate([y, dx], {x: xv, head: hv})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_a_step_reading_past_the_end_is_refused_or_raises_out_of_bounds():
    from neoflow.errors import OutOfBoundsError
    x = nf.placeholder((4, 3), name="x")
    h0 = nf.placeholder((3,), name="h0")
    with pytest.raises(OutOfBoundsError, match="'x'"):      # provably outside: at construction
        nf.scan(h0, lambda t, h: nf.compute((3,), lambda i: h[i] + x[t + 1, i], name="ahead"), 4)
    rows = nf.placeholder((4,), dtype="int64", name="rows")  # a gathered row: at run time
    hs = nf.scan(h0, lambda t, h: nf.compute((3,), lambda i: h[i] + x[rows[t], i], name="gather"),
                 4)
    f = nf.build(hs, [x, h0, rows])
    feed = (np.ones((4, 3), np.float32), np.zeros(3, np.float32), np.array([0, 1, 4, 2]))
    with pytest.raises(OutOfBoundsError, match="'x'"):
        f(*feed)
    with pytest.raises(OutOfBoundsError, match="'x'"):
        nf.evaluate(hs, dict(zip((x, h0, rows), feed)))


def test_reference_backend_trainer_runs_the_python_loop_and_agrees_with_native():
    net = lstm_scan.NETWORK
    batch = net._make_batch(np.random.default_rng(5), "float32", **net.small)
    losses = []
    for backend in ("reference", "native"):
        model = net.build("small")
        with nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.5), tuning="off",
                        backend=backend) as trainer:
            assert trainer.stats()["backend"] == f"scan+{backend}"
            losses.append([trainer.step(batch) for _ in range(3)])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-4)
