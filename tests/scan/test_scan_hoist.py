"""What a scan takes out of its loop and keeps: the work that does not
depend on the state hoisted before the loop (an LSTM written naturally,
x[t] @ W_ih inside the step, gets one (T*B, I) x (I, 4H) contraction
outside), the forward's step tensors the reverse step reads kept instead of
computed again, and random tensors made in a step drawn afresh per t.
Each against torch (float64) or nf.evaluate."""
import re

import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow.te.expr import Reduce
from neoflow.te.visit import post_order, topo_tensors

from scan_check import check

B, I, H = 2, 3, 4


def natural_lstm(x, h0, c0, wi, wh, bi, bh):
    """torch.nn.LSTM's cell written as it reads: both projections in the step."""
    T = x.shape[0]
    i, k = nf.reduce_axis(I, name="i"), nf.reduce_axis(H, name="k")

    def step(t, prev):
        h, c = prev
        pre = nf.compute((B, 4 * H), lambda b, j: nf.sum(x[t, b, i] * wi[j, i], axis=i) + bi[j]
                         + nf.sum(h[b, k] * wh[j, k], axis=k) + bh[j], name="gates")
        c2 = nf.compute((B, H), lambda b, s: nf.sigmoid(pre[b, H + s]) * c[b, s]
                        + nf.sigmoid(pre[b, s]) * nf.tanh(pre[b, 2 * H + s]), name="c")
        h2 = nf.compute((B, H), lambda b, s: nf.sigmoid(pre[b, 3 * H + s]) * nf.tanh(c2[b, s]),
                        name="h")
        return h2, c2
    return nf.scan((h0, c0), step, T, name="lstm")


def _reduce_extents(tensors):
    return [sorted(a.extent for a in n.axes) for t in tensors if t.is_compute
            for n in post_order(t.op.body) if isinstance(n, Reduce)]


def test_input_projection_is_hoisted_out_of_the_step():
    T = 6
    x = nf.placeholder((T, B, I), name="x")
    h0 = nf.placeholder((B, H), name="h0")
    ws = [nf.placeholder(s, name=n) for n, s in
          [("wi", (4 * H, I)), ("wh", (4 * H, H)), ("bi", (4 * H,)), ("bh", (4 * H,))]]
    hs, _ = natural_lstm(x, h0, h0, *ws)
    g = hs.op.group
    assert _reduce_extents(g.body) == [[H]]            # only h @ W_hh is left in the loop
    (hoisted,) = [e for e in g.externals if e.is_compute]
    assert hoisted.shape == (T, B, 4 * H) and _reduce_extents([hoisted]) == [[I]]
    # compiled: no step kernel contracts over I; the hoisted one is a segment's
    r = [nf.reduce_axis(n) for n in hs.shape]
    loss = nf.compute((), lambda: nf.sum(hs[tuple(r)], axis=r))
    inputs = [x, h0] + ws
    f = nf.build(nf.grad(loss, inputs), inputs)
    steps = [p[3][0] for p in f._plan]
    assert len(steps) == 2
    for step in steps:
        assert [I] not in _reduce_extents(topo_tensors(step.outputs)), step
    segments = [fn for fn in f.functions if all(fn is not s for s in steps)]
    assert any(e == [I] for fn in segments for e in _reduce_extents(topo_tensors(fn.outputs)))


@pytest.mark.parametrize("T", [1, 5])
def test_hoisted_lstm_matches_torch_nn_lstm(T):
    def ours(*args):
        hs, cs = natural_lstm(*args)
        return nf.compute(hs.shape, lambda t, b, s: hs[t, b, s] * cs[t, b, s])

    def theirs(x, h0, c0, wi, wh, bi, bh):
        rnn = torch.nn.LSTM(I, H).double()
        params = dict(weight_ih_l0=wi, weight_hh_l0=wh, bias_ih_l0=bi, bias_hh_l0=bh)
        hs = torch.func.functional_call(rnn, params, (x, (h0[None], c0[None])))[0]
        cs, c = [], c0                      # torch.nn.LSTM hands back h only: rebuild c
        for t in range(T):
            h = h0 if t == 0 else hs[t - 1]
            i, f, g, o = (x[t] @ wi.T + bi + h @ wh.T + bh).chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            cs.append(c)
        return hs * torch.stack(cs)
    check(ours, theirs, [(T, B, I), (B, H), (B, H), (4 * H, I), (4 * H, H), (4 * H,), (4 * H,)],
          seed=T)


def test_hoisted_lstm_compiles_like_evaluate_and_the_same_for_any_length():
    seen = []
    for T in (8, 512):
        x = nf.placeholder((T, B, I), "float64", name="x")
        h0 = nf.placeholder((B, H), "float64", name="h0")
        ws = [nf.placeholder(s, "float64", name=n) for n, s in
              [("wi", (4 * H, I)), ("wh", (4 * H, H)), ("bi", (4 * H,)), ("bh", (4 * H,))]]
        hs, cs = natural_lstm(x, h0, h0, *ws)
        r = [nf.reduce_axis(n) for n in hs.shape]
        loss = nf.compute((), lambda: nf.sum(hs[tuple(r)] * cs[tuple(r)], axis=r))
        inputs = [x, h0] + ws
        outs = [loss] + nf.grad(loss, inputs)
        f = nf.build(outs, inputs)
        steps = [p[3][0] for p in f._plan]
        seen.append((f.kernel_count, [re.sub(r"\d+", "N", s.source) for s in steps]))
        if T == 8:
            rng = np.random.default_rng(3)
            feed = [rng.normal(size=t.shape) * 0.5 for t in inputs]
            for g, w in zip(f(*feed), nf.evaluate(outs, dict(zip(inputs, feed)))):
                np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    assert seen[0] == seen[1]


def test_reverse_step_reads_the_kept_gates_instead_of_recomputing_them():
    """The forward keeps the step tensor with the recurrent contraction (one row
    per t); the reverse step has one contraction (the adjoint through W_hh),
    not the forward's again."""
    T = 5
    x = nf.placeholder((T, B, I), name="x")
    h0 = nf.placeholder((B, H), name="h0")
    ws = [nf.placeholder(s, name=n) for n, s in
          [("wi", (4 * H, I)), ("wh", (4 * H, H)), ("bi", (4 * H,)), ("bh", (4 * H,))]]
    hs, _ = natural_lstm(x, h0, h0, *ws)
    r = [nf.reduce_axis(n) for n in hs.shape]
    loss = nf.compute((), lambda: nf.sum(hs[tuple(r)], axis=r))
    grads = nf.grad(loss, ws)
    g = hs.op.group
    assert [s.name for s in g.saved] == ["gates"]
    (reverse,) = {t.op.group for t in topo_tensors(grads) if hasattr(t.op, "group")} - {g}
    assert _reduce_extents(reverse.body) == [[4 * H]]


def test_a_reduction_under_a_where_stays_in_the_step():
    """Only the chosen branch of a where is read: x[t - 1] at t = 0 is never
    read in the step, so the guarded contraction is not hoisted."""
    T = 4
    x = nf.placeholder((T, 3), "float64", name="x")
    w = nf.placeholder((3, 3), "float64", name="w")
    h0 = nf.placeholder((3,), "float64", name="h0")
    i = nf.reduce_axis(3, name="i")
    hs = nf.scan(h0, lambda t, h: nf.compute((3,), lambda j: 0.5 * h[j] + nf.where(
        t >= 1, nf.sum(x[t - 1, i] * w[j, i], axis=i), 0.0), name="lag"), T, name="lagged")
    assert _reduce_extents(hs.op.group.body) == [[3]]
    rng = np.random.default_rng(1)
    feed = [rng.normal(size=s.shape) for s in (x, w, h0)]
    np.testing.assert_allclose(nf.build(hs, [x, w, h0])(*feed),
                               nf.evaluate(hs, dict(zip((x, w, h0), feed))), rtol=1e-12)


def _gated(x, h0, w):
    i = nf.reduce_axis(x.shape[1], name="i")

    def step(t, h):
        a = nf.compute((4,), lambda j: nf.sigmoid(nf.sum(x[t, i] * w[j, i], axis=i)),
                       name="gate")
        return nf.compute((4,), lambda j: a[j] * h[j] + x[t, j], name="hn")
    return nf.scan(h0, step, x.shape[0], name="sel")


def test_a_reduction_without_the_state_in_a_state_free_step_tensor_is_hoisted():
    """The gate reads no state: its contraction leaves the loop, its sigmoid
    (element-wise) stays in the step."""
    T = 5
    hs = _gated(*[nf.placeholder(s, name=n) for n, s in (("x", (T, 4)), ("h0", (4,)),
                                                         ("w", (4, 4)))])
    g = hs.op.group
    assert sorted(b.name for b in g.body) == ["gate", "hn"] and _reduce_extents(g.body) == []
    assert any(e.shape == (T, 4) and e.is_compute for e in g.externals)

    def theirs(x, h0, w):
        h, out = h0, []
        for t in range(T):
            h = torch.sigmoid(w @ x[t]) * h + x[t]
            out.append(h)
        return torch.stack(out)
    check(_gated, theirs, [(T, 4), (4,), (4, 4)])


# -- random tensors in a step -------------------------------------------------------

T_R, N_R = 6, 5


def _noisy(dtype="float64"):
    """h_t = h_{t-1} + w * u_t, u_t = nf.random_uniform made in the step; with
    loss = sum_t sum_i h_t[i] and h0 = 0, dloss/dw = sum_t (T - t) u_t, and
    u_t = (h_t - h_{t-1}) / w: the backward's draw is the forward's if they agree."""
    h0 = nf.placeholder((N_R,), dtype, name="h0")
    w = nf.parameter((N_R,), init="ones", dtype=dtype, name="w")

    def step(t, h):
        u = nf.random_uniform((N_R,), dtype, name="u")
        return nf.compute((N_R,), lambda i: h[i] + w[i] * u[i], name="hn")
    hs = nf.scan(h0, step, T_R, name="noisy")
    r = [nf.reduce_axis(n) for n in hs.shape]
    return h0, w, hs, nf.compute((), lambda: nf.sum(hs[tuple(r)], axis=r), name="loss")


def _draws(hs_value, h0, w):
    return np.diff(np.concatenate([h0[None], hs_value]), axis=0) / w


def test_random_in_a_step_is_fresh_per_t_and_the_backward_sees_the_same_draw():
    h0, w, hs, loss = _noisy()
    (dw,) = nf.grad(loss, [w])
    hv, wv = np.zeros(N_R), np.linspace(0.5, 1.5, N_R)
    f = nf.build([hs, dw], [h0, w])
    for run in (lambda: nf.evaluate([hs, dw], {h0: hv, w: wv}, seed=3),
                lambda: f(hv, wv, seed=3)):
        states, grad = run()
        u = _draws(states, hv, wv)
        assert ((0 <= u) & (u < 1)).all() and len(np.unique(u.round(12))) == u.size  # per t
        np.testing.assert_allclose(grad, ((T_R - np.arange(T_R))[:, None] * u).sum(0),
                                   rtol=1e-12)
    np.testing.assert_allclose(f(hv, wv, seed=3)[0], nf.evaluate(hs, {h0: hv, w: wv}, seed=3))
    assert not np.allclose(f(hv, wv)[0], f(hv, wv)[0])            # afresh per call


def test_random_in_a_step_trains_with_fresh_draws_per_trainer_step():
    """loss = w . dloss/dw here: the Trainer's loss and its SGD update agree
    (same draw forward and backward); two steps draw differently."""
    h0, w, hs, loss = _noisy("float32")
    lr = 0.01
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=lr), tuning="off") as trainer:
        feed = {"h0": np.zeros(N_R, np.float32)}
        seen = []
        for _ in range(2):
            before = trainer.parameters()["w"]
            value = trainer.step(feed)
            grad = (before - trainer.parameters()["w"]) / lr
            assert value == pytest.approx(float(before @ grad), rel=1e-4)
            seen.append(grad)
    assert not np.allclose(seen[0], seen[1])


def test_second_order_through_a_kept_step_tensor():
    """The first gradient reads the kept pre-activation (a reduction over the
    state); its own gradient flows back into that kept tensor at every step."""
    T, N = 4, 3

    def ours(x, h0, w):
        k = nf.reduce_axis(N, name="k")

        def step(t, h):
            pre = nf.compute((N,), lambda i: nf.sum(w[i, k] * h[k], axis=k) + x[t, i], name="pre")
            return nf.compute((N,), lambda i: nf.tanh(pre[i]) * pre[i], name="hn")
        hs = nf.scan(h0, step, T, name="rnn")
        r = [nf.reduce_axis(n) for n in hs.shape]
        loss = nf.compute((), lambda: nf.sum(hs[tuple(r)] * hs[tuple(r)], axis=r))
        (dw,) = nf.grad(loss, [w])
        assert [s.name for s in hs.op.group.saved] == ["pre"]
        return nf.compute((N, N), lambda i, j: dw[i, j] * dw[i, j] + x[0, i] * dw[i, j])

    def theirs(x, h0, w):
        h, out = h0, []
        for t in range(T):
            pre = w @ h + x[t]
            h = torch.tanh(pre) * pre
            out.append(h)
        (dw,) = torch.autograd.grad((torch.stack(out) ** 2).sum(), [w], create_graph=True)
        return dw * dw + x[0][:, None] * dw
    check(ours, theirs, [(T, N), (N,), (N, N)], seed=5)
