"""Split sums (schedule/split_reduce.py): a long reduction into a small output
run as parallel partial sums and their sum agrees with nf.evaluate and with
float64 on odd sizes (the last chunk shorter), is chosen by the default
schedule for weight gradients and not for large outputs, round-trips as JSON,
is refused where it does not fit, survives random schedules and mutation,
and is no less accurate in float32."""
import copy
import random

import numpy as np
import pytest

import neoflow as nf
from neoflow.graph.kernel import Kernel
from neoflow.runtime.native import compile_kernels
from neoflow.schedule import Config, ConfigError, default_config, sample_config
from neoflow.schedule.config import validate
from neoflow.schedule.split_reduce import (choose_split, default_splits_off, split_axis,
                                           split_choices, split_tensors)
from neoflow.schedule.stage import Stage
from neoflow.tune.search import mutate_stage


def _weight_grad(T, B, J, K, name="dW", epilogue=None, where=None, lo=0):
    """dW[j, k] = sum over t, b of dy[t, b, j] * x[t, b, k] (reduce t over [lo, T))."""
    dy = nf.placeholder((T, B, J), name="dy")
    x = nf.placeholder((T, B, K), name="x")
    t = nf.reduce_axis((lo, T), name="t")
    b = nf.reduce_axis(B, name="b")

    def body(j, k):
        cond = None if where is None else where(t, b, j, k)
        s = nf.sum(dy[t, b, j] * x[t, b, k], axis=[t, b], where=cond)
        return s if epilogue is None else epilogue(s, j, k)
    return dy, x, nf.compute((J, K), body, name=name)


def _run(out, inputs, config, arrays):
    k = Kernel([out])
    return compile_kernels([k], inputs, [out], [out], [config])(*arrays)[0]


def _arrays(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _with_split(config, parts):
    config = copy.deepcopy(config)
    config.stages[0].split = parts
    return config


@pytest.mark.parametrize("parts", [2, 3, 5, 13])
def test_odd_sizes_agree_with_evaluate_and_float64(parts):
    dy, x, dW = _weight_grad(13, 7, 11, 9)
    a, c = _arrays([dy.shape, x.shape])
    base = default_config(Kernel([dW]))
    got = _run(dW, [dy, x], _with_split(base, parts), [a, c])
    exact = np.einsum("tbj,tbk->jk", a.astype(np.float64), c.astype(np.float64))
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, nf.evaluate(dW, {dy: a, x: c}), rtol=1e-5, atol=1e-5)


def test_epilogue_condition_and_offset_axis():
    """A reduce axis starting above 0, a where on it, and an epilogue after the sum."""
    bias = nf.placeholder((9,), name="bias")
    dy, x, dW = _weight_grad(
        17, 5, 11, 9, lo=3, where=lambda t, b, j, k: (t + j) % 3 != 1,
        epilogue=lambda s, j, k: nf.maximum(s * 0.5 + bias[k], 0.0))
    a, c, bb = _arrays([dy.shape, x.shape, (9,)])
    base = default_config(Kernel([dW]))
    ref = nf.evaluate(dW, {dy: a, x: c, bias: bb})
    t, j = np.arange(17)[:, None], np.arange(11)[None, :]
    mask = ((t >= 3) & ((t + j) % 3 != 1)).astype(np.float64)      # (t, j)
    exact = np.einsum("tbj,tbk,tj->jk", a.astype(np.float64), c.astype(np.float64), mask)
    exact = np.maximum(exact * 0.5 + bb.astype(np.float64), 0.0)
    for parts in (2, 4, 7):
        got = _run(dW, [dy, x, bias], _with_split(base, parts), [a, c, bb])
        np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_conv_weight_gradient_against_torch():
    torch = pytest.importorskip("torch")
    x = nf.placeholder((3, 4, 11, 9), name="x")
    w = nf.parameter((5, 4, 3, 3), name="w")
    loss = nf.nn.sum(nf.nn.conv2d(x, w, padding=1) ** 2)
    (gw,) = nf.grad(loss, [w])
    xa, wa = _arrays([x.shape, w.shape], seed=3)
    xt = torch.tensor(xa, dtype=torch.float64)
    wt = torch.tensor(wa, dtype=torch.float64, requires_grad=True)
    (torch.nn.functional.conv2d(xt, wt, padding=1) ** 2).sum().backward()
    kernels, _ = nf.graph.plan.plan_kernels(gw, [x, w])
    # the weight gradient's own kernel, split every way its longest reduce axis allows
    split = [n for n, k in enumerate(kernels) if split_choices(Stage(k.stages[-1]))]
    assert split, kernels
    configs = [default_config(k) for k in kernels]
    for parts in split_choices(Stage(kernels[split[-1]].stages[-1]))[:4]:
        configs[split[-1]].stages[-1].split = parts
        fn = nf.build(gw, [x, w], configs=configs)
        assert fn.configs[split[-1]].stages[-1].split == parts
        np.testing.assert_allclose(fn(xa, wa), wt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_default_splits_weight_gradients_not_large_outputs():
    _, _, dW = _weight_grad(256, 32, 512, 128)         # bench/scan.py's LSTM at T=256
    sc = default_config(Kernel([dW])).stages[0]
    with default_splits_off():                         # the rule off (A/B): packed, unsplit
        plain = default_config(Kernel([dW])).stages[0]
    assert plain.split == 0 and plain.pack, plain
    assert sc.split >= 8 and sc.pack == plain.pack, sc  # split, its panels still packed
    assert default_config(Kernel([dW])).stages[0].split == sc.split
    assert split_axis(Stage(dW)) == 0                  # t (256 points) rather than b (32)
    # a large output over a short reduction: every thread has tiles, partials would cost
    A, Bm = nf.placeholder((1024, 64), name="A"), nf.placeholder((64, 1024), name="B")
    k = nf.reduce_axis(64, name="k")
    C = nf.compute((1024, 1024), lambda i, j: nf.sum(A[i, k] * Bm[k, j], axis=k), name="C")
    assert default_config(Kernel([C])).stages[0].split == 0
    # a small problem: nothing to gain
    _, _, small = _weight_grad(4, 3, 8, 8)
    assert default_config(Kernel([small])).stages[0].split == 0
    # too few parallel tasks for the threads: a tiny output over a long reduction
    v = nf.placeholder((1 << 16, 8), name="v")
    r = nf.reduce_axis(1 << 16, name="r")
    col = nf.compute((8,), lambda j: nf.sum(v[r, j] * v[r, j], axis=r), name="col")
    st = Stage(col)
    sc = default_config(Kernel([col])).stages[0]
    assert choose_split(st, copy.deepcopy(sc), n_threads=2) >= 2
    assert choose_split(st, copy.deepcopy(sc), n_threads=1) == 0   # one thread: nothing to share


def test_default_reduce_loops_stream_in_address_order():
    """A register tile's reduce loops run in address order, the shortest step
    innermost, whatever their extents: t outside b for x[t, b, k]; the batch
    outside a short steps axis for x[b, t, k]."""
    for T, B, J, K in ((64, 32, 512, 128), (64, 32, 128, 64), (33, 17, 48, 40)):
        _, _, dW = _weight_grad(T, B, J, K)      # the first: bench/scan.py's LSTM at T=64
        order = default_config(Kernel([dW])).stages[0].order
        assert order.index("r0.0") < order.index("r1.0"), (T, B, J, K, order)
        dy, x, out = _weight_grad(T, B, 9, 7)          # odd sizes: the same sums
        arrays = _arrays([dy.shape, x.shape])
        got = _run(out, [dy, x], default_config(Kernel([out])), arrays)
        want = np.einsum("tbj,tbk->jk", *(a.astype(np.float64) for a in arrays))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # MI-LSTM's input-weight gradient: a long batch over a short steps axis
    dy = nf.placeholder((64, 8, 96), name="dy")
    x = nf.placeholder((64, 8, 80), name="x")
    b, t = nf.reduce_axis(64, name="b"), nf.reduce_axis(8, name="t")
    dw = nf.compute((96, 80), lambda i, j: nf.sum(dy[b, t, i] * x[b, t, j], axis=[b, t]),
                    name="dw")
    order = default_config(Kernel([dw])).stages[0].order
    assert [lv for lv in order if lv.startswith("r")] == ["r0.0", "r1.0"], order
    arrays = _arrays([dy.shape, x.shape], seed=3)
    got = _run(dw, [dy, x], default_config(Kernel([dw])), arrays)
    want = np.einsum("btj,btk->jk", *(a.astype(np.float64) for a in arrays))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_default_split_takes_the_targets_thread_count(monkeypatch):
    """Without n_threads choose_split (and default_config) use target().threads,
    which follows OMP_NUM_THREADS at every call (nothing to clear)."""
    v = nf.placeholder((1 << 16, 8), name="v")
    r = nf.reduce_axis(1 << 16, name="r")
    col = nf.compute((8,), lambda j: nf.sum(v[r, j] * v[r, j], axis=r), name="col")
    st = Stage(col)
    with default_splits_off():
        sc = default_config(Kernel([col])).stages[0]
    for n in (1, 2, 8):
        monkeypatch.setenv("OMP_NUM_THREADS", str(n))
        assert choose_split(st, copy.deepcopy(sc)) == choose_split(st, copy.deepcopy(sc), n)
        assert default_config(Kernel([col])).stages[0].split == choose_split(st, sc, n)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert default_config(Kernel([col])).stages[0].split == 0
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert default_config(Kernel([col])).stages[0].split >= 2


def test_max_reduction_and_bad_counts_refused():
    v = nf.placeholder((64, 8), name="v")
    r = nf.reduce_axis(64, name="r")
    mx = nf.compute((8,), lambda j: nf.max(v[r, j], axis=r), name="mx")
    assert split_choices(Stage(mx)) == []
    with pytest.raises(ConfigError, match="float sum"):
        validate(_with_split(default_config(Kernel([mx])), 2), Kernel([mx]))
    _, _, dW = _weight_grad(10, 3, 8, 8)
    kernel = Kernel([dW])
    assert 6 not in split_choices(Stage(dW))           # chunks of 2 would make 5 parts
    for bad in (6, 11, 1, -2):
        with pytest.raises(ConfigError, match="split"):
            validate(_with_split(default_config(kernel), bad), kernel)


def test_json_round_trip_and_compute_at_refused():
    _, _, dW = _weight_grad(10, 3, 8, 8)
    cfg = _with_split(default_config(Kernel([dW])), 5)
    assert Config.from_json(cfg.to_json()) == cfg and '"split": 5' in cfg.to_json()
    nxt = nf.compute((8, 8), lambda j, k: dW[j, k] * 2.0, name="twice")
    kernel = Kernel([dW, nxt])
    base = default_config(kernel)
    base.stages[0].split = 5
    base.stages[1].compute_at = True
    with pytest.raises(ConfigError, match="split"):
        validate(base, kernel)


def test_partials_shape_and_cached():
    _, _, dW = _weight_grad(13, 7, 11, 9)
    P, total = split_tensors(dW, Stage(dW), 5)
    assert P.shape == (5, 11, 9) and total.shape == dW.shape and total.name == dW.name
    assert split_tensors(dW, Stage(dW), 5) == (P, total)


def test_random_schedules_with_the_knob_agree():
    dy, x, dW = _weight_grad(19, 5, 13, 10)
    a, c = _arrays([dy.shape, x.shape], seed=1)
    kernel = Kernel([dW])
    ref = nf.evaluate(dW, {dy: a, x: c})
    seen = set()
    for seed in range(12):
        cfg = sample_config(kernel, seed)
        seen.add(cfg.stages[0].split)
        np.testing.assert_allclose(_run(dW, [dy, x], cfg, [a, c]), ref, rtol=1e-4, atol=1e-4,
                                   err_msg=cfg.to_json())
    assert 0 in seen and len(seen) > 1, seen           # the space samples splits and none
    rng, st, sc = random.Random(0), Stage(dW), default_config(kernel).stages[0]
    mutated = set()
    for _ in range(200):
        try:
            sc2 = mutate_stage(st, sc, rng, 8)
        except ConfigError:
            continue
        if sc2.split != sc.split and sc2.split not in mutated:
            mutated.add(sc2.split)
            got = _run(dW, [dy, x], Config([sc2]), [a, c])
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=str(sc2))
    assert mutated, "mutation never changed split"


def test_float32_accuracy_no_worse():
    """A long sum (2^16 terms per output) is at least as close to float64 split as unsplit."""
    dy, x, dW = _weight_grad(512, 128, 4, 8)
    rng = np.random.default_rng(5)
    a = rng.random(dy.shape).astype(np.float32)          # positive terms: errors add up
    c = rng.random(x.shape).astype(np.float32)
    exact = np.einsum("tbj,tbk->jk", a.astype(np.float64), c.astype(np.float64))
    base = default_config(Kernel([dW]))
    errors = {}
    for parts in (0, 2, 16, 64):
        got = _run(dW, [dy, x], _with_split(base, parts), [a, c]).astype(np.float64)
        errors[parts] = np.abs(got - exact).max() / np.abs(exact).max()
    # one running float32 sum of the same terms: what a lost cascade would cost
    terms = (a[:, :, 0] * c[:, :, 0]).reshape(-1)             # output (0, 0)'s 2^16 terms
    running = np.cumsum(terms, dtype=np.float32)[-1]           # sequential float32 adds
    sequential = abs(float(running) - exact[0, 0]) / exact[0, 0]
    eps = float(np.finfo(np.float32).eps)
    assert sequential > 5 * eps, sequential         # the case is long enough to tell
    for parts in (2, 16, 64):   # each within 2x of unsplit, at the float32 resolution
        assert errors[parts] <= max(2 * errors[0], 2 * eps), errors
