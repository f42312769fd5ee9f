"""Tuning on Ray: a local cluster (one per test session: a head without
CPUs, measuring nodes added and removed by each test, each with a
hardware tag standing in for different machines), everything on
127.0.0.1. Both nodes get work and keep their records apart; nodes of one
hardware share; a node removed mid-tuning or every node lost does not
stop tuning; a crashing candidate is recorded; kernels run on the thread
count asked for; no Ray socket leaves loopback."""
import faulthandler
import ipaddress
import os
import shutil
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'neoflow[ray]')")
psutil = pytest.importorskip("psutil", reason="psutil is not installed (the sockets check)")

import neoflow as nf  # noqa: E402
from neoflow.graph import kernels_for  # noqa: E402
from neoflow.schedule import default_config  # noqa: E402
from neoflow.tune import Database, tune_kernel  # noqa: E402
from neoflow.tune.hardware import TAG_ENV, Hardware, detect  # noqa: E402
from neoflow.tune.ray_runner import LOOPBACK as LOCAL  # noqa: E402
from neoflow.tune.ray_runner import (RayRunnerWarning, environment, keep_loopback,  # noqa: E402
                                     loopback_cluster, loopback_settings)
from tune_helpers import matmul  # noqa: E402

ENTRY = "int64_t nf_main(void* const* args, int64_t* err) {"
CRASH = "#include <signal.h>\n" + ENTRY + " raise(SIGSEGV);"
THREADS = "#include <omp.h>\n" + ENTRY + " return 1000 + omp_get_max_threads();"


class LocalCluster:
    """The session's cluster, with the loopback settings applied to every
    process it starts."""

    def __init__(self):
        self.scratch = tempfile.mkdtemp(prefix="nfray-", dir="/tmp")   # short: socket paths
        self.settings = loopback_settings(self.scratch)
        keep_loopback(ray)
        with environment(self.settings):
            self.cluster = loopback_cluster(self.scratch)
            ray.init(address=self.cluster.address, _node_ip_address=LOCAL,
                     log_to_driver=False, configure_logging=False)

    def add(self, tag=None):
        env = {} if tag is None else {TAG_ENV: tag}
        with environment(self.settings):
            return self.cluster.add_node(num_cpus=1, node_ip_address=LOCAL, env_vars=env)

    def remove(self, node):
        if node in self.cluster.worker_nodes:
            self.cluster.remove_node(node)

    @contextmanager
    def nodes(self, *tags):
        added = [self.add(tag) for tag in tags]
        try:
            yield added
        finally:
            for node in added:
                self.remove(node)

    def shutdown(self):
        ray.shutdown()
        self.cluster.shutdown()
        shutil.rmtree(self.scratch, ignore_errors=True)


START_LIMIT_S = 240      # Ray's start-up has no timeout of its own: end the run instead


@pytest.fixture(scope="session")
def cluster():
    faulthandler.dump_traceback_later(START_LIMIT_S, exit=True)
    try:
        c = LocalCluster()
    finally:
        faulthandler.cancel_dump_traceback_later()
    yield c
    faulthandler.dump_traceback_later(START_LIMIT_S, exit=True)
    try:
        c.shutdown()
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def kernel():
    C, _ = matmul(20, 12, 9)
    return kernels_for([C])[0]


def fingerprint(tag, threads=None):
    """The fingerprint a simulated node of this host reports."""
    hw = detect(threads or len(os.sched_getaffinity(0)))
    return Hardware(**{**hw.to_dict(), "tag": tag}).fingerprint


def tune_on(runner, kernel, db, trials=6, **kwargs):
    kwargs.setdefault("timeout", 5.0)
    return tune_kernel(kernel, db=db, trials=trials, runner=runner, **kwargs)


def test_both_nodes_get_work_and_keep_their_records_apart(cluster, kernel, tmp_path):
    with cluster.nodes("node-a", "node-b"), nf.RayRunner() as runner, \
            Database(tmp_path / "t.sqlite") as db:
        C, (A, B) = matmul(20, 12, 9)
        rec = nf.tune(C, [A, B], trials=6, database=db, runner=runner, progress=False,
                      timeout=5.0)
        assert len(runner.measured) == 2 and all(n >= 6 for n in runner.measured.values())
        by_hw = {r.hardware: r for r in db.records()}
        assert set(by_hw) == {fingerprint("node-a"), fingerprint("node-b")}
        assert rec.hardware in by_hw
        for fp in by_hw:
            trials = db.trials(kernel.key, "cpu", fp)
            assert len(trials) == 6 and {s for _, s, _, _ in trials} == {"ok"}
        # never used on different hardware: this machine sees none of them
        assert db.best(kernel.key, "cpu", detect().fingerprint) is None


def test_nodes_of_one_hardware_share_a_search_and_its_records(cluster, kernel, tmp_path):
    with cluster.nodes("twin", "twin"), nf.RayRunner() as runner, \
            Database(tmp_path / "t.sqlite") as db:
        rec = tune_on(runner, kernel, db, trials=8)
        assert rec.hardware == fingerprint("twin")
        assert [r.hardware for r in db.records()] == [rec.hardware]
        assert len(db.trials(kernel.key, "cpu", rec.hardware)) == 8
        assert len(runner.measured) == 2, runner.measured     # the batches were split


def test_a_node_removed_mid_tuning_loses_nothing(cluster, kernel, tmp_path):
    with cluster.nodes("pair", "pair") as (a, b), nf.RayRunner() as runner, \
            Database(tmp_path / "t.sqlite") as db:
        node_b = b.node_id

        def remove_b_once_it_works():
            deadline = time.monotonic() + 60
            while runner.measured[node_b] == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            cluster.remove(b)
        remover = threading.Thread(target=remove_b_once_it_works)
        remover.start()
        with pytest.warns(RayRunnerWarning, match="lost node"):
            rec = tune_on(runner, kernel, db, trials=24)
        remover.join()
        assert rec.hardware == fingerprint("pair")
        # every proposed candidate was measured once, the lost ones by node a
        assert len(db.trials(kernel.key, "cpu", rec.hardware)) == 24
        assert runner.measured[a.node_id] > 0


def test_losing_every_node_falls_back_to_this_machine(cluster, kernel, tmp_path):
    with cluster.nodes("solo") as [node], nf.RayRunner() as runner, \
            Database(tmp_path / "t.sqlite") as db:
        calls = []

        def remove_node_later(config, source):
            calls.append(1)
            if len(calls) == 10:          # in the second batch
                cluster.remove(node)
            return source
        with pytest.warns(RayRunnerWarning) as caught:
            rec = tune_on(runner, kernel, db, trials=16, source_hook=remove_node_later)
        said = " ".join(str(w.message) for w in caught)
        assert "lost node" in said and "measuring on this machine instead" in said, said
        here = detect().fingerprint
        assert rec.hardware == here
        assert len(db.trials(kernel.key, "cpu", fingerprint("solo"))) == 8   # the first batch
        assert len(db.trials(kernel.key, "cpu", here)) >= 8       # the second, and on


def test_a_crashing_candidate_is_recorded_and_the_actor_carries_on(cluster, kernel, tmp_path):
    default = default_config(kernel).to_json()

    def crash_others(config, source):
        return source if config.to_json() == default else source.replace(ENTRY, CRASH)
    with cluster.nodes("crashy") as [node], nf.RayRunner() as runner, \
            Database(tmp_path / "t.sqlite") as db:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RayRunnerWarning)     # the node is not lost
            rec = tune_on(runner, kernel, db, trials=5, source_hook=crash_others)
        assert rec.config.to_json() == default and rec.hardware == fingerprint("crashy")
        trials = db.trials(kernel.key, "cpu", rec.hardware)
        assert sorted(s for _, s, _, _ in trials) == ["crash"] * 4 + ["ok"]
        assert all("SIGSEGV" in d for _, s, _, d in trials if s == "crash")
        assert runner.measured == {node.node_id: 5}


@pytest.mark.parametrize("threads", [3, None])
def test_the_actor_times_kernels_with_the_thread_count_asked_for(cluster, kernel, tmp_path,
                                                                threads):
    """Ray sets OMP_NUM_THREADS=1 in an actor with num_cpus=1; the measured
    kernel reports omp_get_max_threads() as its error code."""
    default = default_config(kernel).to_json()

    def report_threads(config, source):
        return source if config.to_json() == default else source.replace(ENTRY, THREADS)
    expected = threads or len(os.sched_getaffinity(0))
    with cluster.nodes("omp"), nf.RayRunner(threads=threads) as runner, \
            Database(tmp_path / "t.sqlite") as db:
        rec = tune_on(runner, kernel, db, trials=3, source_hook=report_threads)
        assert rec.hardware == fingerprint("omp", expected)
        details = {d for _, s, _, d in db.trials(kernel.key, "cpu", rec.hardware) if s != "ok"}
        assert details == {f"the kernel reported error {1000 + expected}"}


def mlp_loss():
    x = nf.placeholder((8, 6), name="x")
    y = nf.placeholder((8,), "int64", name="y")
    w1 = nf.parameter((10, 6), init="kaiming", name="w1")
    w2 = nf.parameter((3, 10), init="xavier", name="w2")
    return nf.nn.cross_entropy(nf.nn.dense(nf.nn.relu(nf.nn.dense(x, w1)), w2), y)


def test_the_background_tuner_measures_on_nodes_of_this_machines_hardware(cluster, tmp_path):
    rng = np.random.default_rng(0)
    data = [{"x": rng.standard_normal((8, 6)).astype(np.float32),
             "y": rng.integers(0, 3, 8).astype(np.int64)} for _ in range(3)]
    with cluster.nodes(None, "elsewhere"), nf.RayRunner() as runner:
        options = nf.TuningOptions(workers=1, timeout=5.0, trials=4, budget_s=60,
                                   priority="normal", runner=runner)
        path = tmp_path / "t.sqlite"
        with nf.Trainer(mlp_loss(), optimizer=nf.optim.SGD(lr=0.1), tuning="background",
                        database=path, tuning_options=options) as t:
            deadline = time.monotonic() + 90
            for b in data:
                t.step(b)
            while not t.stats()["tuning_done"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert t.stats()["tuning_done"], t.stats()
            assert t.stats()["kernels_tuned"] >= 1, t._tuner.errors
        [node] = list(runner.measured)           # only the node that matches this machine
        with Database(path) as db:
            assert {r.hardware for r in db.records()} == {detect().fingerprint}


def _loopback(address):
    if not address:
        return True
    ip = ipaddress.ip_address(address.ip)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


def test_no_ray_socket_leaves_loopback(cluster):
    with cluster.nodes("net"), nf.RayRunner() as runner:
        runner.actors()                       # a node and its actor are up
        me = psutil.Process()
        processes = [me] + me.children(recursive=True)
        assert len(processes) > 4            # gcs, raylets, workers...
        seen = 0
        for p in processes:
            try:
                sockets = p.net_connections(kind="inet")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            for s in sockets:
                seen += 1
                assert _loopback(s.laddr) and _loopback(s.raddr), (p.name(), p.cmdline()[:3], s)
        assert seen > 0


def test_cli_tune_with_ray(cluster, tmp_path, capsys):
    from neoflow.cli import main
    path = str(tmp_path / "t.sqlite")
    with cluster.nodes("cli"):
        assert main(["tune", "matmul:16,12,8", "--trials", "3", "--ray", "auto", "--threads", "1",
                     "--database", path]) == 0
    printed = capsys.readouterr().out
    assert "records of every hardware" in printed
    with Database(path) as db:
        assert [r.hardware for r in db.records()] == [fingerprint("cli", 1)]
