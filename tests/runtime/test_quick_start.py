"""Quick start (nf.Trainer(quick_start=True), runtime/native.py): the first
step runs on quick builds (toolchain's quick=True) of the kernels the disk
cache lacks, hot kernels are built optimised at once, and the optimised
builds take the quick ones' place between steps -- training the same values
up to float32 rounding, on every kernel, and leaving OpenMP's thread count
as it found it."""
import subprocess
import threading
import time

import numpy as np
import pytest

import neoflow as nf
from neoflow.codegen.c.prelude import PRELUDE
from neoflow.runtime import native
from neoflow.schedule.loop_ir import Buffer, For, Seq, Store, Var, iterations
from neoflow.te.expr import Const
from neoflow.toolchain import cached_c, compile_c, driver
from neoflow.toolchain.compiler import compile_flags, find_compiler

UPGRADE_LIMIT_S = 120


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))
    return tmp_path


def _mlp(hidden=37, batch=9, features=13, classes=5, seed=3):
    x = nf.placeholder((batch, features), name="x")
    y = nf.placeholder((batch,), dtype="int64", name="y")
    w1 = nf.parameter((hidden, features), name="w1")
    w2 = nf.parameter((classes, hidden), name="w2")
    h = nf.nn.tanh(nf.nn.dense(x, w1))
    logits = nf.nn.dense(nf.exp(-h * h) * h, w2)
    rng = np.random.default_rng(seed)
    batch_values = {x: rng.standard_normal((batch, features)).astype(np.float32),
                    y: rng.integers(0, classes, batch)}
    return nf.nn.cross_entropy(logits, y), batch_values


def _upgrading():
    return any(t.name == "neoflow-upgrade" for t in threading.enumerate())


def _wait_for_upgrade():
    deadline = time.monotonic() + UPGRADE_LIMIT_S
    while _upgrading():
        assert time.monotonic() < deadline, "the optimised builds never arrived"
        time.sleep(0.05)


def _step_until_optimised(trainer, batch):
    """Losses of the first step (quick), the second (timed, starts the
    upgrade) and, once the upgrade has compiled everything, a third that
    takes the optimised builds in."""
    losses = [trainer.step(batch), trainer.step(batch)]
    _wait_for_upgrade()
    losses.append(trainer.step(batch))
    return losses


def test_quick_flags_build_at_o1_without_unrolling():
    cc = find_compiler()
    quick = compile_flags(cc, openmp=True, sanitize=False, quick=True)
    full = compile_flags(cc, openmp=True, sanitize=False)
    assert quick[0] == "-O1" and "-DNF_QUICK" in quick and "-O3" not in quick
    assert full[0] == "-O3" and "-DNF_QUICK" not in full
    assert "-ffp-contract=fast" in quick            # the optimised build's multiply-adds
    sanitized = compile_flags(cc, openmp=True, sanitize=True, quick=True)
    assert "-DNF_QUICK" not in sanitized and "-fsanitize=address" in sanitized


@pytest.mark.parametrize("quick, pragma", [(False, True), (True, False)])
def test_nf_unroll_is_a_pragma_except_in_quick_builds(quick, pragma):
    source = PRELUDE + "void f(float* a) {\n    NF_UNROLL(4)\n    for (int i = 0; i < 8; ++i) a[i] = 0;\n}\n"
    command = [find_compiler().path, "-E", "-x", "c", "-"] + (["-DNF_QUICK"] if quick else [])
    out = subprocess.run(command, input=source, capture_output=True, text=True, check=True).stdout
    assert ("#pragma GCC unroll 4" in out) == pragma


def test_cached_c_finds_only_the_optimised_build(fresh_cache):
    source = "int nf_quick_probe(int x) { return 3 * x + 1; }\n"
    assert cached_c(source) is None
    quick = compile_c(source, quick=True)
    assert cached_c(source) is None                 # a quick build is not the optimised one
    full = compile_c(source)
    assert full.path != quick.path and cached_c(source).path == full.path
    for library in (quick, full):
        probe = library.get("nf_quick_probe", [native.ctypes.c_int], native.ctypes.c_int)
        assert probe(4) == 13


def test_iterations_counts_loops_of_constant_trips():
    def index(k):
        return Const(k, "int64")
    i, j = Var("i"), Var("j")
    out = Buffer("float32", (30,), "arg", "out")
    one = Const(1.0, "float32")
    body = For(i, index(0), index(6), "serial",
               Seq([For(j, index(0), index(5), "vectorized", Store(out, i * 5 + j, one)),
                    Store(out, i * 5, one)]))
    assert iterations(body) == 6 * (5 + 1)
    inner = For(j, i * 2, i * 2 + 3, "serial", Store(out, j, one))   # 3 trips each
    assert iterations(For(i, index(1), index(4), "serial", inner)) == 9


def test_translation_units_keep_each_side_apart():
    assert native.translation_units([5, 1, 1, 3], [0, 0, 0, 1], 2) == [[0], [1, 2], [3]]
    units = native.translation_units([4, 4, 2, 2, 1], ["a", "hot", "a", "hot", "a"], 2)
    assert sorted(map(sorted, units)) == [[0], [1], [2, 4], [3]]


def test_quick_start_trains_the_default_values(fresh_cache):
    loss, batch = _mlp()
    with nf.Trainer(loss, nf.optim.Adam(0.01), seed=5, quick_start=True) as quick:
        losses = [quick.step(batch)]
        assert 0 < quick.stats()["kernels_quick"] <= len(quick.kernels)
        losses += _step_until_optimised(quick, batch)
        assert quick.stats()["kernels_quick"] == 0
        losses += [quick.step(batch) for _ in range(3)]
        quick_params = quick.parameters()
    with nf.Trainer(loss, nf.optim.Adam(0.01), seed=5) as default:
        assert default.stats()["kernels_quick"] == 0
        expected = [default.step(batch) for _ in losses]
        default_params = default.parameters()
    np.testing.assert_allclose(losses, expected, rtol=2e-6)
    for name, value in default_params.items():
        np.testing.assert_allclose(quick_params[name], value, rtol=1e-5, atol=1e-7)


def test_hot_kernels_are_built_optimised_at_once(fresh_cache):
    n = 512                          # 512^3 multiply-adds: above HOT_ITERATIONS
    assert n ** 3 >= native.HOT_ITERATIONS
    a = nf.placeholder((n, n), name="a")
    w = nf.parameter((n, n), name="w")
    loss = (nf.nn.relu(a @ w) * 0.5).mean()
    batch = {a: np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)}
    with nf.Trainer(loss, nf.optim.SGD(0.1), quick_start=True) as trainer:
        trainer.step(batch)
        step = trainer._executor.program
        hot = [k for k, f in zip(trainer.kernels, step._program.kernels)
               if iterations(f.body) >= native.HOT_ITERATIONS]
        assert hot
        assert not any(id(step._running[trainer.kernels.index(k)].library) in step._quick
                       for k in hot)
        assert 0 < trainer.stats()["kernels_quick"] < len(trainer.kernels)


def test_openmp_threads_are_restored_after_the_upgrade(fresh_cache):
    if native._GOMP is None:
        pytest.skip("the kernels do not link GCC's OpenMP runtime here")
    before = native._GOMP.omp_get_max_threads()
    loss, batch = _mlp(hidden=21)
    with nf.Trainer(loss, nf.optim.SGD(0.1), quick_start=True) as trainer:
        _step_until_optimised(trainer, batch)
        assert trainer.stats()["kernels_quick"] == 0
        trainer.step(batch)
    assert native._GOMP.omp_get_max_threads() == before


def test_close_stops_the_upgrade(fresh_cache, monkeypatch):
    upgraded = []
    real = driver.compile_shared

    def slow_in_the_upgrade(cc, flags, c_file, out):
        if threading.current_thread().name == "neoflow-upgrade":
            upgraded.append(c_file)
            time.sleep(0.5)
        return real(cc, flags, c_file, out)
    monkeypatch.setattr(driver, "compile_shared", slow_in_the_upgrade)
    loss, batch = _mlp(hidden=29)
    trainer = nf.Trainer(loss, nf.optim.SGD(0.1), quick_start=True)
    trainer.step(batch)
    trainer.step(batch)              # (timed kernel by kernel; the upgrade starts)
    to_upgrade = trainer.stats()["kernels_quick"]
    assert to_upgrade > 2
    trainer.close()
    _wait_for_upgrade()
    assert len(upgraded) <= 1, "the upgrade kept compiling after close()"


def test_a_cached_network_starts_optimised(fresh_cache):
    loss, batch = _mlp(hidden=23)
    with nf.Trainer(loss, nf.optim.SGD(0.1)) as default:   # caches the optimised builds
        default.step(batch)
    loss, batch = _mlp(hidden=23)
    with nf.Trainer(loss, nf.optim.SGD(0.1), quick_start=True) as again:
        again.step(batch)
        assert again.stats()["kernels_quick"] == 0


def test_a_network_upgraded_before_starts_on_its_kernels_own_builds(fresh_cache):
    loss, batch = _mlp(hidden=19)
    with nf.Trainer(loss, nf.optim.SGD(0.1), quick_start=True) as first:
        _step_until_optimised(first, batch)        # (caches each kernel's own build)
        assert first.stats()["kernels_quick"] == 0
    loss, batch = _mlp(hidden=19)
    with nf.Trainer(loss, nf.optim.SGD(0.1), quick_start=True) as again:
        losses = [again.step(batch)]
        assert again.stats()["kernels_quick"] == 0 and not again._executor.program.upgrading
        losses += [again.step(batch) for _ in range(3)]
    loss, batch = _mlp(hidden=19)
    with nf.Trainer(loss, nf.optim.SGD(0.1)) as default:
        expected = [default.step(batch) for _ in losses]
    np.testing.assert_allclose(losses, expected, rtol=1e-6)


def test_the_default_builds_nothing_quick(fresh_cache, monkeypatch):
    flags_seen = []
    real = driver.compile_shared

    def recording(cc, flags, c_file, out):
        flags_seen.append(tuple(flags))
        return real(cc, flags, c_file, out)
    monkeypatch.setattr(driver, "compile_shared", recording)
    loss, batch = _mlp(hidden=17)
    with nf.Trainer(loss, nf.optim.SGD(0.1)) as trainer:      # (the step's entry included)
        trainer.step(batch)
        trainer.step(batch)
    assert flags_seen and not any("-DNF_QUICK" in f for f in flags_seen)
