"""nf.Trainer: the API of API.md "Training" — step, run, parameters,
load_parameters, save/load, stats, memory_stats, close and the context
manager; feed errors naming the placeholder; NaN/Inf detection."""
import warnings

import numpy as np
import pytest

import neoflow as nf
from neoflow.runtime import NonFiniteLossError, NonFiniteLossWarning

BATCH, N_IN, HIDDEN, N_OUT = 8, 6, 5, 3


def mlp(dtype="float32"):
    x = nf.placeholder((BATCH, N_IN), dtype, name="x")
    y = nf.placeholder((BATCH,), "int64", name="y")
    w1 = nf.parameter((HIDDEN, N_IN), init="kaiming", dtype=dtype, name="w1")
    b1 = nf.parameter((HIDDEN,), init="zeros", dtype=dtype, name="b1")
    w2 = nf.parameter((N_OUT, HIDDEN), init="xavier", dtype=dtype, name="w2")
    logits = nf.nn.dense(nf.nn.relu(nf.nn.dense(x, w1, b1)), w2)
    return nf.nn.cross_entropy(logits, y), logits, x, y


def batch(seed=0, dtype="float32"):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((BATCH, N_IN)).astype(dtype),
            rng.integers(0, N_OUT, BATCH).astype(np.int64))


@pytest.fixture
def model():
    return mlp()


def test_step_returns_the_loss_before_the_update_and_trains(model):
    loss, logits, x, y = model
    xb, yb = batch()
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.5), tuning="off") as trainer:
        before = trainer.parameters()
        first = trainer.step({x: xb, y: yb})
        assert isinstance(first, float)
        expected = nf.evaluate(loss, {x: xb, y: yb, **{
            p: before[p.name] for p in trainer.graph.params}})
        assert first == pytest.approx(float(expected), rel=1e-6)
        losses = [trainer.step({"x": xb, "y": yb}) for _ in range(20)]
    assert losses[-1] < 0.5 * first


def test_run_is_forward_only_with_current_parameters(model):
    loss, logits, x, y = model
    xb, yb = batch()
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1)) as trainer:
        trainer.step({x: xb, y: yb})
        params = trainer.parameters()
        out = trainer.run(logits, {x: xb})
        (out2,) = trainer.run([logits], {"x": xb, "y": yb})    # y: known, not needed
        ref = nf.evaluate(logits, {x: xb, **{p: params[p.name] for p in trainer.graph.params}})
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(out, out2)
        assert trainer.parameters()["w1"].tobytes() == params["w1"].tobytes()
        with pytest.raises(nf.NeoFlowError, match="'x'"):
            trainer.run([logits], {y: yb})


@pytest.mark.parametrize("feed, message", [
    (lambda x, y, xb, yb: {x: xb}, "no value fed for input 'y'"),
    (lambda x, y, xb, yb: {x: xb, y: yb, "z": xb}, "'z' is not an input"),
    (lambda x, y, xb, yb: {x: xb[:4], y: yb}, r"input 'x': expected shape \(8, 6\)"),
    (lambda x, y, xb, yb: {x: xb.astype(np.float64), y: yb}, "input 'x': expected dtype float32"),
    (lambda x, y, xb, yb: {x: xb, y: yb.astype(np.float32)}, "input 'y': expected dtype int64"),
    (lambda x, y, xb, yb: {x: xb.tolist(), y: yb}, "input 'x'"),
    (lambda x, y, xb, yb: [xb, yb], "must be a dict"),
])
def test_feed_errors_name_the_placeholder(model, feed, message):
    loss, _, x, y = model
    xb, yb = batch()
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1)) as trainer:
        with pytest.raises(nf.NeoFlowError, match=message):
            trainer.step(feed(x, y, xb, yb))
        assert trainer.stats()["steps"] == 0


def test_feeding_a_parameter_is_an_error(model):
    loss, _, x, y = model
    xb, yb = batch()
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1)) as trainer:
        w1 = trainer.graph.params[0]
        with pytest.raises(nf.NeoFlowError, match="'w1' is a parameter"):
            trainer.step({x: xb, y: yb, w1: np.zeros(w1.shape, np.float32)})


def poison(trainer, value):
    """Put `value` into the last layer's weights, so the logits and the loss take it."""
    w2 = trainer.parameters()["w2"]
    w2[0, 0] = value
    trainer.load_parameters({"w2": w2})


def test_nan_loss_warns_with_the_step_number(model):
    loss, _, x, y = model
    xb, yb = batch()
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1)) as trainer:
        trainer.step({x: xb, y: yb})
        poison(trainer, np.nan)
        with pytest.warns(NonFiniteLossWarning, match="step 2: the loss .* nan"):
            value = trainer.step({x: xb, y: yb})
        assert np.isnan(value)


def test_nan_check_error_and_off(model):
    loss, _, x, y = model
    xb, yb = batch()
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1), nan_check="error") as trainer:
        poison(trainer, np.inf)
        with pytest.raises(NonFiniteLossError, match="step 1"):
            trainer.step({x: xb, y: yb})
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1), nan_check="off") as trainer:
        poison(trainer, np.nan)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not np.isfinite(trainer.step({x: xb, y: yb}))


def test_parameters_are_copies_and_load_parameters_sets_them(model):
    loss, _, x, y = model
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1)) as trainer:
        params = trainer.parameters()
        assert set(params) == {"w1", "b1", "w2"}
        params["w1"][...] = 7
        assert not np.any(trainer.parameters()["w1"] == 7)
        trainer.load_parameters({"w1": np.full((HIDDEN, N_IN), 0.5, np.float32)})
        assert np.all(trainer.parameters()["w1"] == 0.5)
        with pytest.raises(nf.NeoFlowError, match="no parameter named 'nope'"):
            trainer.load_parameters({"nope": np.zeros(3)})
        with pytest.raises(nf.NeoFlowError, match=r"input 'w2': expected shape \(3, 5\)"):
            trainer.load_parameters({"w2": np.zeros((5, 3), np.float32)})


def test_save_and_load_round_trip_restores_optimizer_state(model, tmp_path):
    loss, _, x, y = model
    batches = [batch(s) for s in range(6)]
    opt = nf.optim.Adam(lr=0.01)
    with nf.Trainer(loss, optimizer=opt) as trainer:
        for xb, yb in batches[:3]:
            trainer.step({x: xb, y: yb})
        trainer.save(tmp_path / "ckpt.npz")
        expected = [trainer.step({x: xb, y: yb}) for xb, yb in batches[3:]]
        final = trainer.parameters()
    with nf.Trainer(loss, optimizer=nf.optim.Adam(lr=0.01), seed=123) as other:
        other.load(tmp_path / "ckpt.npz")
        assert other.stats()["steps"] == 3
        got = [other.step({x: xb, y: yb}) for xb, yb in batches[3:]]
        assert got == expected
        for name, value in other.parameters().items():
            np.testing.assert_array_equal(value, final[name])


def test_load_rejects_a_checkpoint_of_another_model(model, tmp_path):
    loss, _, x, y = model
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1, momentum=0.9)) as trainer:
        trainer.save(tmp_path / "sgd.npz")
    with nf.Trainer(loss, optimizer=nf.optim.Adam(lr=0.1)) as trainer:
        with pytest.raises(nf.NeoFlowError, match=r"has no optimizer state '\w+\.exp_avg'"):
            trainer.load(tmp_path / "sgd.npz")
        (tmp_path / "junk.npz").write_bytes(b"not a zip")
        with pytest.raises(nf.NeoFlowError, match="junk.npz"):
            trainer.load(tmp_path / "junk.npz")


def test_context_manager_closes(model):
    loss, _, x, y = model
    xb, yb = batch()
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1)) as trainer:
        trainer.step({x: xb, y: yb})
    with pytest.raises(nf.NeoFlowError, match="closed"):
        trainer.step({x: xb, y: yb})
    with pytest.raises(nf.NeoFlowError, match="closed"):
        trainer.parameters()


@pytest.mark.parametrize("kwargs, message", [
    (dict(tuning="background", backend="reference"), "native backend"),
    (dict(tuning="ahead", tuning_options="fast"), "TuningOptions"),
    (dict(tuning="sometimes"), "tuning='sometimes'"),
    (dict(target="tpu"), "target='tpu'"),
    (dict(nan_check="maybe"), "nan_check"),
])
def test_bad_options(model, kwargs, message):
    with pytest.raises(nf.NeoFlowError, match=message):
        nf.Trainer(model[0], optimizer=nf.optim.SGD(lr=0.1), **kwargs)


def test_bad_loss_and_optimizer(model):
    _, logits, x, _ = model
    with pytest.raises(nf.NeoFlowError, match="0-d"):
        nf.Trainer(logits, optimizer=nf.optim.SGD(lr=0.1))
    with pytest.raises(nf.NeoFlowError, match="optimizer"):
        nf.Trainer(model[0], optimizer="sgd")
    no_params = nf.compute((), lambda: x[0, 0] * 2, name="no_params")
    with pytest.raises(nf.NeoFlowError, match="nothing to train"):
        nf.Trainer(no_params, optimizer=nf.optim.SGD(lr=0.1))


def test_duplicate_names_are_rejected():
    x = nf.placeholder((3,), name="v")
    w = nf.parameter((3,), name="v")
    loss = nf.compute((), lambda: x[0] * w[0], name="loss")
    with pytest.raises(nf.NeoFlowError, match="named 'v'"):
        nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1))


def test_stats_and_memory_stats(model):
    loss, _, x, y = model
    xb, yb = batch()
    with nf.Trainer(loss, optimizer=nf.optim.Adam(lr=0.1)) as trainer:
        assert trainer.stats()["step_ms"] is None
        for _ in range(3):
            trainer.step({x: xb, y: yb})
        stats = trainer.stats()
        assert stats["kernels"] == len(trainer.kernels) > 0
        assert stats["steps"] == 3 and stats["kernels_tuned"] == 0
        assert stats["time_to_first_step_s"] > 0 and stats["step_ms"] > 0
        mem = trainer.memory_stats()
        assert mem["parameter_bytes"] == 4 * (HIDDEN * N_IN + HIDDEN + N_OUT * HIDDEN)
        assert mem["optimizer_state_bytes"] == 2 * mem["parameter_bytes"]
        assert 0 < mem["activation_bytes"] <= mem["activation_bytes_without_reuse"]
        assert mem["peak_bytes"] == (mem["parameter_bytes"] + mem["optimizer_state_bytes"]
                                     + mem["input_bytes"] + mem["activation_bytes"])


def test_seeded_initialisation(model):
    loss = model[0]
    a = nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1), seed=1).parameters()
    b = nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1), seed=1).parameters()
    c = nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1), seed=2).parameters()
    np.testing.assert_array_equal(a["w1"], b["w1"])
    assert not np.array_equal(a["w1"], c["w1"])
    assert np.all(a["b1"] == 0)


def test_frozen_parameters_are_not_trained():
    x = nf.placeholder((4, 3), name="x")
    w = nf.parameter((2, 3), name="w")
    scale = nf.parameter((2,), init="ones", name="scale", requires_grad=False)
    out = nf.nn.dense(x, w) * scale
    loss = nf.nn.mean(out * out)
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1)) as trainer:
        assert [p.name for p in trainer.graph.params] == ["w"]
        w0 = trainer.parameters()["w"]
        trainer.step({x: np.ones((4, 3), np.float32)})
        params = trainer.parameters()
        assert np.all(params["scale"] == 1) and not np.array_equal(params["w"], w0)


def test_batch_norm_running_statistics_follow_torch():
    import torch
    n, c = 6, 3
    x = nf.placeholder((n, c, 2, 2), "float64", name="x")
    w = nf.parameter((c,), init="ones", dtype="float64", name="bn.weight")
    rm = nf.parameter((c,), init="zeros", dtype="float64", name="bn.running_mean",
                      requires_grad=False)
    rv = nf.parameter((c,), init="ones", dtype="float64", name="bn.running_var",
                      requires_grad=False)
    y = nf.nn.batch_norm(x, rm, rv, weight=w, momentum=0.2)
    loss = nf.nn.mean(y * y * y)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((n, c, 2, 2)) * 3 + 1 for _ in range(3)]
    t_rm, t_rv = torch.zeros(c, dtype=torch.float64), torch.ones(c, dtype=torch.float64)
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1)) as trainer:
        assert {a.target.name for a in trainer.graph.aliases} >= {"bn.running_mean",
                                                                  "bn.running_var"}
        for xb in xs:
            trainer.step({x: xb})
            torch.nn.functional.batch_norm(torch.tensor(xb), t_rm, t_rv, training=True,
                                           momentum=0.2)
        params = trainer.parameters()
    np.testing.assert_allclose(params["bn.running_mean"], t_rm.numpy(), rtol=1e-12)
    np.testing.assert_allclose(params["bn.running_var"], t_rv.numpy(), rtol=1e-12)


def _activated(act, sizes=(8, 5, 3)):
    n, i, o = sizes
    x = nf.placeholder((n, i), name="x")
    w = nf.parameter((i, o), name="w")
    k = nf.reduce_axis(i, name="k")
    h = nf.compute((n, o), lambda a, j: nf.sum(x[a, k] * w[k, j], axis=k), name="h")
    y = nf.compute((n, o), lambda a, j: act(h[a, j]), name="y")
    return x, nf.nn.mean(y * y)


def test_trainers_whose_step_entries_print_the_same_c_run_their_own_kernels():
    """Two networks that differ only in an activation print the same step
    entry, one library in the process: each trainer still runs its own
    kernels, before and after the other is built (each step's kernel table
    is its own), and trains as it does alone."""
    xv = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)

    def losses(trainer, x, steps):
        return [float(trainer.step({x: xv})) for _ in range(steps)]

    x, loss = _activated(nf.tanh)
    with nf.Trainer(loss, nf.optim.SGD(lr=0.5), database=False, seed=3) as alone:
        expected = losses(alone, x, 6)
    x1, tanh_loss = _activated(nf.tanh)
    x2, sigmoid_loss = _activated(nf.sigmoid)
    with nf.Trainer(tanh_loss, nf.optim.SGD(lr=0.5), database=False, seed=3) as first:
        got = losses(first, x1, 3)
        with nf.Trainer(sigmoid_loss, nf.optim.SGD(lr=0.5), database=False, seed=3) as second:
            other = losses(second, x2, 3)
            entries = [t._executor.program._errors.library for t in (first, second)]
            assert entries[0] is entries[1]           # the case: one entry library
            got += losses(first, x1, 3)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert not np.allclose(other, expected[:3])
