"""Kernels of equal structure and schedule are compiled once (runtime/native.py
shared_kernels): an unrolled recurrence repeats its step's kernels, and
every repeat runs the first one's code -- same table address, same results
as the reference interpreter. A kernel with a checked read keeps code of its
own (its read sites are numbered program-wide)."""
import numpy as np

import neoflow as nf
from neoflow import zoo
from neoflow.toolchain import driver

# LLTM unrolled over 5 steps, at sizes where fusion leaves each step several kernels
SIZES = dict(steps=5, state=32, batch=8)


def _step_kernels(monkeypatch):
    compiled = []
    real = driver.compile_shared

    def counting(cc, flags, c_file, out):
        compiled.append(c_file.read_text().count("static void nf_kernel"))
        return real(cc, flags, c_file, out)
    monkeypatch.setattr(driver, "compile_shared", counting)
    return compiled


def test_repeated_kernels_compile_once_and_match_the_reference(monkeypatch, tmp_path):
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))
    compiled = _step_kernels(monkeypatch)
    model = zoo.get("lltm").build("small", **SIZES)
    batch = model.make_batch(np.random.default_rng(3))
    losses = {}
    for backend in ("native", "reference"):
        with nf.Trainer(model.loss, nf.optim.SGD(0.1), backend=backend, database=False,
                        seed=1) as trainer:
            losses[backend] = [trainer.step(batch) for _ in range(3)]
            if backend == "native":
                step = trainer._executor.program
                kernels = list(trainer.kernels)
    np.testing.assert_allclose(losses["native"], losses["reference"], rtol=1e-5)
    keys = [k.key for k in kernels]
    assert len(set(keys)) < len(keys)                 # the recurrence repeats kernels
    assert sum(compiled) < len(kernels)               # ... and they are compiled fewer times
    for n, k in enumerate(kernels):
        first = keys.index(k.key)
        if step.configs[n] == step.configs[first]:
            assert step._table[n] == step._table[first], (n, first)
    assert len({step._table[n] for n in range(len(kernels))}) == sum(compiled)


def test_a_kernel_with_a_checked_read_keeps_its_own_code(monkeypatch, tmp_path):
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))
    ids = nf.placeholder((4,), dtype="int64", name="ids")
    table = nf.parameter((6, 3), name="table")
    rows = [nf.compute((4, 3), lambda i, j: table[ids[i], j] * 2.0,
                       name=f"gather{s}") for s in range(2)]
    loss = (rows[0] * rows[1]).sum()
    with nf.Trainer(loss, nf.optim.SGD(0.1), database=False, fusion=False) as trainer:
        trainer.step({ids: np.array([0, 5, 2, 3])})
        step = trainer._executor.program
        gathers = [n for n, k in enumerate(trainer.kernels)
                   if k.stages[0].name.startswith("gather")]
        assert len(gathers) == 2
        assert step._table[gathers[0]] != step._table[gathers[1]]
        try:
            trainer.step({ids: np.array([0, 6, 2, 3])})
        except nf.NeoFlowError as err:
            assert "table" in str(err)
        else:
            raise AssertionError("an index out of range was not reported")
