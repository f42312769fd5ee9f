"""The training step's C compiles in the background (runtime/native.py
start_compile / await_libraries): nf.Trainer returns while the compilers
still run -- its parameter initialisation and the caller's first batch
overlap them -- and the first step waits for them. A missing compiler is
still reported when the trainer is built; a compiler failure at the first
step, as a BuildError."""
import threading

import numpy as np
import pytest

import neoflow as nf
from neoflow.errors import BuildError, CompilerNotFoundError
from neoflow.toolchain import driver


def _network():
    x = nf.placeholder((7, 5), name="x")
    y = nf.placeholder((7,), dtype="int64", name="y")
    w1 = nf.parameter((9, 5), name="w1")
    w2 = nf.parameter((3, 9), name="w2")
    loss = nf.nn.cross_entropy(nf.nn.dense(nf.nn.tanh(nf.nn.dense(x, w1)), w2), y)
    rng = np.random.default_rng(4)
    batch = {x: rng.standard_normal((7, 5)).astype(np.float32),
             y: np.array([0, 1, 2, 0, 1, 2, 1])}
    return loss, batch


def test_trainer_is_built_while_the_compilers_run(monkeypatch, tmp_path):
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))
    release, started = threading.Event(), threading.Event()
    real = driver.compile_shared

    def held(cc, flags, c_file, out):
        started.set()
        assert release.wait(60), "the compilers were never released"
        return real(cc, flags, c_file, out)
    monkeypatch.setattr(driver, "compile_shared", held)
    loss, batch = _network()
    with nf.Trainer(loss, nf.optim.SGD(0.1), database=False, seed=3) as trainer:
        assert started.wait(60)
        assert not release.is_set()            # built, and the compilers are still held
        assert trainer.parameters()["w1"].shape == (9, 5)   # initialised meanwhile
        release.set()
        native = [trainer.step(batch) for _ in range(3)]
    with nf.Trainer(loss, nf.optim.SGD(0.1), backend="reference", seed=3) as reference:
        want = [reference.step(batch) for _ in range(3)]
    np.testing.assert_allclose(native, want, rtol=1e-5)


def test_a_compiler_failure_is_raised_at_the_first_step(monkeypatch, tmp_path):
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))

    def failing(cc, flags, c_file, out):
        raise BuildError(f"C compiler failed (exit 1) on {c_file}")
    monkeypatch.setattr(driver, "compile_shared", failing)
    loss, batch = _network()
    with nf.Trainer(loss, nf.optim.SGD(0.1), database=False) as trainer:
        for _ in range(2):                     # and again: no half-built step runs
            with pytest.raises(BuildError, match="C compiler failed"):
                trainer.step(batch)


def test_a_missing_compiler_is_reported_when_the_trainer_is_built(monkeypatch, tmp_path):
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    loss, _ = _network()
    with pytest.raises(CompilerNotFoundError, match="no-such-cc"):
        nf.Trainer(loss, nf.optim.SGD(0.1), database=False, backend="native")
