"""Changing only the optimizer recompiles no forward or backward kernel
(issue 16, item 8): the optimizer's update kernels get translation units of
their own (runtime/native.py translation_units), so the others' sources --
and their cached libraries -- stay the same. Counted at the compiler."""
import numpy as np

import neoflow as nf
from neoflow.codegen.c.printer import comment_safe
from neoflow.toolchain import driver


def _network():
    x = nf.placeholder((6, 5), name="x")
    y = nf.placeholder((6,), dtype="int64", name="y")
    w1 = nf.parameter((7, 5), name="w1")
    w2 = nf.parameter((3, 7), name="w2")
    h = nf.nn.tanh(nf.nn.dense(x, w1))
    return x, y, nf.nn.cross_entropy(nf.nn.dense(h, w2), y)


def _compiled_sources(monkeypatch):
    sources = []
    real = driver.compile_shared

    def counting(cc, flags, c_file, out):
        sources.append(c_file.read_text())
        return real(cc, flags, c_file, out)
    monkeypatch.setattr(driver, "compile_shared", counting)
    return sources


def test_second_trainer_with_another_optimizer_compiles_only_update_kernels(monkeypatch, tmp_path):
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))
    sources = _compiled_sources(monkeypatch)
    x, y, loss = _network()
    batch = {x: np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32),
             y: np.array([0, 1, 2, 0, 1, 2])}
    with nf.Trainer(loss, nf.optim.SGD(0.1)) as sgd:
        sgd.step(batch)
        first = len(sources)
    assert first >= 2                   # at least one unit of kernels and the entry point
    del sources[:]
    with nf.Trainer(loss, nf.optim.Adam(0.01)) as adam:
        adam.step(batch)
        updates = {id(a.value) for a in adam.graph.aliases}
        kept = [k for k in adam.kernels if not any(id(t) in updates for t in k.outputs)]
    assert kept                         # forward and backward kernels without updates
    kept_comments = {comment_safe(" ".join(t.name for t in k.stages).replace(" ", "_"))
                     for k in kept}
    compiled = {line[line.index(": ") + 2:-3] for src in sources for line in src.splitlines()
                if line.startswith("/* kernel ")}
    assert compiled and not compiled & kept_comments, compiled & kept_comments
    assert len(sources) < first
