"""The scan driver as the Trainer runs it: after the first step (which
records), a training step with scans is ONE native call (segments and scan
loops replayed from a recorded program over held buffers), with the same
results as the step driven from Python, and a step's out-of-range read still
raises a NeoFlowError naming the tensor."""
import numpy as np
import pytest

import neoflow as nf
from neoflow.errors import OutOfBoundsError
from neoflow.runtime import scan_function
from neoflow.runtime.scan_function import ScanFunction
from neoflow.zoo import lstm_scan


def _train(steps, batch):
    net = lstm_scan.NETWORK
    model = net.build("small")
    with nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.5), tuning="off") as trainer:
        return [trainer.step(batch) for _ in range(steps)], trainer.parameters()


def test_a_trainer_step_with_scans_is_one_native_call(monkeypatch):
    batch = lstm_scan.NETWORK._make_batch(np.random.default_rng(0), "float32",
                                          **lstm_scan.NETWORK.small)
    calls = []
    program = scan_function._program()

    def counted(*args):
        calls.append(args[1])               # the op count of this native call
        return program(*args)
    monkeypatch.setattr(scan_function, "_program", lambda: counted)
    net = lstm_scan.NETWORK
    with nf.Trainer(net.build("small").loss, optimizer=nf.optim.SGD(lr=0.5),
                    tuning="off") as trainer:
        trainer.step(batch)
        first = len(calls)
        assert first > 2 and set(calls) == {1}      # recorded: each call alone
        del calls[:]
        trainer.step(batch)
        trainer.step(batch)
    assert len(calls) == 2 and calls[0] == first    # then one call per step, every op in it


def test_replayed_steps_equal_steps_driven_from_python(monkeypatch):
    batch = lstm_scan.NETWORK._make_batch(np.random.default_rng(1), "float32",
                                          **lstm_scan.NETWORK.small)
    replayed, p1 = _train(4, batch)
    monkeypatch.setattr(ScanFunction, "replay", lambda self, args: self._run(args))
    driven, p2 = _train(4, batch)
    np.testing.assert_array_equal(replayed, driven)
    for name in p1:
        np.testing.assert_array_equal(p1[name], p2[name])


def test_an_out_of_range_row_raises_in_a_replayed_step():
    T, N = 4, 3
    x = nf.placeholder((T, N), name="x")
    rows = nf.placeholder((T,), dtype="int64", name="rows")
    w = nf.parameter((N,), init="ones", name="w")
    h0 = nf.compute((N,), lambda i: nf.const(0.0), name="h0")
    hs = nf.scan(h0, lambda t, h: nf.compute((N,), lambda i: h[i] * w[i] + x[rows[t], i],
                                             name="gather"), T)
    r = [nf.reduce_axis(n) for n in hs.shape]
    loss = nf.compute((), lambda: nf.sum(hs[tuple(r)] ** 2.0, axis=r), name="loss")
    feed = {"x": np.ones((T, N), np.float32), "rows": np.array([0, 1, 2, 3])}
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.01), tuning="off") as trainer:
        trainer.step(feed)
        trainer.step(feed)                                      # replayed
        with pytest.raises(OutOfBoundsError, match="'x'"):
            trainer.step({**feed, "rows": np.array([0, 1, 4, 2])})
