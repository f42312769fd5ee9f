"""Unnamed parameters get stable names, and a parameter the loss does not
reach is named in a warning when the Trainer is built (issue 16, item 7)."""
import warnings

import numpy as np
import pytest

import neoflow as nf
from neoflow.graph.training import UnreachedParameterWarning


def _network():
    x = nf.placeholder((4, 3), name="x")
    w1 = nf.parameter((5, 3))
    w2 = nf.parameter((2, 5))
    return x, nf.nn.mean(nf.nn.dense(nf.nn.relu(nf.nn.dense(x, w1)), w2))


def test_rebuilt_network_gets_the_same_names():
    x, loss = _network()
    with nf.Trainer(loss, nf.optim.SGD(0.1)) as a:
        first = a.parameters()
        a.step({x: np.ones((4, 3), np.float32)})
        trained = a.parameters()
    assert sorted(first) == ["param0", "param1"]
    x2, loss2 = _network()
    with nf.Trainer(loss2, nf.optim.SGD(0.1)) as b:
        assert sorted(b.parameters()) == sorted(first)
        b.load_parameters(trained)
        for name, value in trained.items():
            np.testing.assert_array_equal(b.parameters()[name], value)


def test_given_names_are_kept_and_not_taken():
    x = nf.placeholder((4, 3), name="x")
    named = nf.parameter((5, 3), name="param0")
    other = nf.parameter((2, 5))
    loss = nf.nn.mean(nf.nn.dense(nf.nn.dense(x, named), other))
    with nf.Trainer(loss, nf.optim.SGD(0.1)) as t:
        assert sorted(t.parameters()) == ["param0", "param1"]
    assert named.name == "param0" and other.name == "param1"


def test_parameter_of_a_forgotten_branch_is_warned_about():
    x = nf.placeholder((4, 3), name="x")
    w1, w2 = nf.parameter((5, 3), name="w1"), nf.parameter((2, 5), name="w2")
    w3 = nf.parameter((7, 5), name="w3")
    h = nf.nn.dense(x, w1)
    out = nf.nn.dense(h, w2)
    aux = nf.nn.dense(h, w3)   # never added to the loss
    with pytest.warns(UnreachedParameterWarning, match=r"'w3' \(7, 5\)") as record:
        trainer = nf.Trainer(nf.nn.mean(out), nf.optim.SGD(0.1))
    assert "w1" not in str(record[0].message) and "w2" not in str(record[0].message)
    assert sorted(trainer.parameters()) == ["w1", "w2"]
    trainer.close()
    del aux


def test_no_warning_when_every_parameter_reaches_the_loss():
    x, loss = _network()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreachedParameterWarning)
        nf.Trainer(loss, nf.optim.SGD(0.1)).close()
        nf.Trainer(loss, nf.optim.Adam(0.1)).close()   # the first's update computes are no branch
