"""compute_at: a stage run inside the previous stage's parallel row loop --
legality, lowering to one parallel loop, agreement with the reference, JSON,
and the search space."""
import random

import numpy as np
import pytest

import neoflow as nf
from neoflow.graph.kernel import Kernel
from neoflow.runtime.native import compile_kernels
from neoflow.schedule import Config, ConfigError, Stage, default_config, validate
from neoflow.schedule.config import compute_at_problem
from neoflow.schedule.space import ConfigSpace
from neoflow.tune.search import canonical, mutate_stage

ROWS, COLS = 64, 256


def chain():
    """x -> a -> b -> c (c divides by b's row sum), all per row."""
    x = nf.placeholder((ROWS, COLS), name="x")
    a = nf.compute((ROWS, COLS), lambda i, j: nf.sigmoid(x[i, j]) * nf.tanh(x[i, j]), name="a")
    b = nf.compute((ROWS, COLS), lambda i, j: nf.exp(a[i, j]) * a[i, COLS - 1 - j], name="b")
    r = nf.reduce_axis(COLS, name="r")
    c = nf.compute((ROWS, COLS), lambda i, j: b[i, j] / nf.sum(b[i, r], axis=r)
                   + nf.tanh(a[i, j]), name="c")
    return x, a, b, c


def with_compute_at(kernel, config):
    """`config` with every stage that legally can be computed at the one before."""
    space = ConfigSpace(kernel)
    for n in range(1, len(config.stages)):
        config.stages[n].compute_at = space.can_compute_at(config.stages, n)
    return config


def run(kernel, config, x, value):
    f = compile_kernels([kernel], [x], list(kernel.outputs), list(kernel.outputs), [config])
    return f, f(value)


def test_a_chain_of_row_parallel_stages_becomes_one_parallel_loop(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    x, a, b, c = chain()
    kernel = Kernel([a, b, c])
    config = default_config(kernel)
    assert [sc.compute_at for sc in config.stages] == [False, False, False]
    config = with_compute_at(kernel, config)
    assert [sc.compute_at for sc in config.stages] == [False, True, True]
    xv = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
    f, got = run(kernel, config, x, xv)
    assert f.source.count("#pragma omp parallel") == 1
    for sc in config.stages:
        sc.compute_at = False
    g, apart = run(kernel, config, x, xv)
    assert g.source.count("#pragma omp parallel") == 3
    assert kernel.outputs == (c,)                     # a and b are kernel-local
    for out, sep, ref in zip(got, apart, nf.evaluate([c], {x: xv})):
        np.testing.assert_allclose(out, ref, rtol=2e-5, atol=1e-6)
        np.testing.assert_array_equal(out, sep)


def test_problems_name_the_stage_and_the_reason():
    x, a, b, c = chain()
    shifted = nf.compute((ROWS, COLS), lambda i, j: nf.tanh(a[(i + 1) % ROWS, j]),
                         name="shifted")
    kernel = Kernel([a, shifted])
    config = with_compute_at(kernel, default_config(kernel))
    assert config.stages[1].compute_at is False
    stages = [Stage(t) for t in kernel.stages]
    assert "reads 'a' at another row" in compute_at_problem(stages, config.stages, 1,
                                                            kernel.inputs)
    config.stages[1].compute_at = True
    with pytest.raises(ConfigError, match="stage 1 .*'shifted'.*at another row"):
        validate(config, kernel)
    first = default_config(Kernel([a, b]))
    first.stages[0].compute_at = True
    with pytest.raises(ConfigError, match="it is the first stage"):
        validate(first, Kernel([a, b]))
    serial = with_compute_at(Kernel([a, b]), default_config(Kernel([a, b])))
    assert serial.stages[1].compute_at
    serial.stages[0].parallel = 0
    with pytest.raises(ConfigError, match="stage 'a' must run its first axis s0"):
        validate(serial, Kernel([a, b]))


def test_an_input_with_as_many_rows_read_at_another_row_blocks_it():
    # the buffer plan may give b's output the memory of such an input (in place)
    x = nf.placeholder((ROWS, COLS), name="x")
    y = nf.placeholder((ROWS, COLS), name="y")
    a = nf.compute((ROWS, COLS), lambda i, j: nf.exp(x[i, j]) + y[ROWS - 1 - i, j], name="a")
    b = nf.compute((ROWS, COLS), lambda i, j: nf.tanh(a[i, j]) * nf.exp(a[i, j]), name="b")
    kernel = Kernel([a, b])
    stages = [Stage(t) for t in kernel.stages]
    config = default_config(kernel)
    config.stages[1].compute_at = False
    assert "reads 'y' at another row" in compute_at_problem(stages, config.stages, 1,
                                                            kernel.inputs)


def test_a_reduction_over_all_rows_blocks_it():
    x, a, _, _ = chain()
    z = nf.placeholder((8, 16), name="z")
    r, s = nf.reduce_axis(8, name="r"), nf.reduce_axis(16, name="s")
    centred = nf.compute((ROWS, COLS), lambda i, j: nf.exp(a[i, j] - nf.sum(
        z[r, s], axis=[r, s])), name="centred")
    kernel = Kernel([a, centred])
    stages = [Stage(t) for t in kernel.stages]
    config = with_compute_at(kernel, default_config(kernel))
    assert not config.stages[1].compute_at
    assert "reduction that does not depend on its row" in compute_at_problem(
        stages, config.stages, 1, kernel.inputs)


def test_json_round_trip_and_records_without_the_field():
    _, a, b, c = chain()
    config = with_compute_at(Kernel([a, b, c]), default_config(Kernel([a, b, c])))
    text = config.to_json()
    assert '"compute_at": true' in text
    assert Config.from_json(text) == config
    old = Config.from_json(text.replace(', "compute_at": true', ""))
    assert [sc.compute_at for sc in old.stages] == [False] * 3
    bad = Config.from_json(text.replace('"compute_at": true', '"compute_at": "yes"'))
    with pytest.raises(ConfigError, match="compute_at must be true or false"):
        validate(bad, Kernel([a, b, c]))


def test_searched_configs_with_and_without_compute_at_agree_with_the_reference():
    # what the search explores: mutations of a schedule with compute_at on and
    # flips of compute_at, repaired by canonical() where a change made it illegal
    x, a, b, c = chain()
    kernel = Kernel([a, b, c])
    space = ConfigSpace(kernel)
    rng = random.Random(3)
    xv = np.random.default_rng(1).standard_normal((ROWS, COLS)).astype(np.float32)
    [ref] = nf.evaluate([c], {x: xv})
    flags = set()
    for trial in range(12):
        config = with_compute_at(kernel, default_config(kernel))
        n = rng.randrange(3)
        if trial % 3 == 0:
            config.stages[n].compute_at = not config.stages[n].compute_at
        else:
            try:
                config.stages[n] = mutate_stage(space.stages[n], config.stages[n], rng, 8)
            except ConfigError:
                continue
        config = canonical(space, config)
        validate(config, kernel)
        flags.add(tuple(sc.compute_at for sc in config.stages))
        _, [got] = run(kernel, config, x, xv)
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=1e-6)
    assert any(any(f) for f in flags) and any(f != (False, True, True) for f in flags)
