"""Hardware model, pruning and search, without measuring: the estimate
stands in for the clock so results are exact and fast."""
import numpy as np

from neoflow.graph import kernels_for
from neoflow.schedule import default_config
from neoflow.tune.cost_model import BoostedTrees
from neoflow.tune.estimate import kernel_estimate
from neoflow.tune.hardware import Hardware, detect
from neoflow.tune.prune import Pruner, prune_report
from neoflow.tune.search import WARMUP, Search, factor_choices

from tune_helpers import matmul

HW = Hardware(cores=4, simd_bytes=32, fma=True, l1=32 << 10, l2=512 << 10, l3=16 << 20,
              model="test", arch="x86_64")


def fake_seconds(kernel, config):
    return sum(e.cycles for e in kernel_estimate(kernel, config, HW)) / 3e9


def big_matmul():
    C, _ = matmul(256, 256, 256)
    return kernels_for([C])[0]


def test_hardware_is_detected():
    hw = detect()
    assert hw.cores >= 1 and hw.simd_bytes in (8, 16, 32, 64)
    assert hw.l1 < hw.l2 <= hw.l3
    assert hw.lanes("float32") == hw.simd_bytes // 4
    assert len(hw.fingerprint) == 16 and hw.fingerprint == detect().fingerprint
    assert HW.fingerprint != Hardware(**{**HW.__dict__, "cores": 8}).fingerprint


def test_pruning_drops_much_and_keeps_the_default(monkeypatch):
    monkeypatch.setenv("NEOFLOW_VECTOR_BYTES", "32")   # HW is an AVX2 machine: its schedules
    kernel = big_matmul()
    report = prune_report(kernel, HW, samples=200)
    assert report["pruned_fraction"] > 0.5
    assert set(report["by_rule"]) <= {"parallel", "vector-width", "registers", "cache"}
    assert Pruner(kernel, HW).reject(default_config(kernel)) is None


def test_pruning_reasons_name_the_rule(monkeypatch):
    monkeypatch.setenv("NEOFLOW_VECTOR_BYTES", "32")   # HW is an AVX2 machine: its schedules
    kernel = big_matmul()
    config = default_config(kernel)
    pruner = Pruner(kernel, HW)
    config.stages[0].parallel = 0                  # one thread: allowed
    assert pruner.reject(config) is None
    config.stages[0].tile["s0"] = [128]            # two chunks for four cores
    config.stages[0].parallel = 1
    assert "parallel: 2 chunk(s) for 4 cores" in pruner.reject(config)
    config = default_config(kernel)
    config.stages[0].tile["s1"] = [12]             # 12 columns for 8 lanes
    assert "vector-width" in pruner.reject(config)


def test_factor_choices_hold_lane_multiples_and_divisors():
    assert factor_choices(96, 8)[:3] == [2, 3, 4]
    assert {8, 16, 24, 32, 48, 64} <= set(factor_choices(96, 8))
    assert max(factor_choices(10, 8)) < 10


def test_search_is_reproducible_from_a_seed():
    kernel = big_matmul()

    def run(seed):
        search = Search(kernel, HW, seed=seed)
        proposed = []
        for _ in range(3):       # two random batches, then one evolved
            batch = search.propose(8)
            proposed += [c.to_json() for c in batch]
            search.observe([(c, fake_seconds(kernel, c)) for c in batch])
        return proposed
    first = run(3)
    assert first == run(3)
    assert first[:8] != run(4)[:8]
    assert len(set(first)) == len(first)      # nothing proposed twice


def test_model_guided_batches_beat_random_ones():
    """Against the analytic clock, evolution guided by the learned model
    proposes faster schedules than random sampling does."""
    kernel = big_matmul()
    search = Search(kernel, HW, seed=0)
    while len(search.seen) < WARMUP:
        batch = search.propose(8)
        search.observe([(c, fake_seconds(kernel, c)) for c in batch])
    guided = search._evolve(16)
    sampled = search._random(16, set())
    guided_t = np.median([fake_seconds(kernel, c) for c in guided])
    random_t = np.median([fake_seconds(kernel, c) for c in sampled])
    assert guided_t < random_t


def test_boosted_trees_learn_a_ranking():
    rng = np.random.default_rng(0)
    X = rng.random((200, 6))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2
    model = BoostedTrees().fit(X[:150], y[:150])
    assert np.corrcoef(model.predict(X[150:]), y[150:])[0, 1] > 0.9
    assert np.allclose(BoostedTrees().fit(X, y).predict(X), model.fit(X, y).predict(X))
