"""tune/ray_runner: measuring on every node of a Ray cluster.

The driver (nf.tune, the background tuner) keeps the search, the cost
model and the one writer of the SQLite database; it generates each
candidate's C source and ships the source, not a library: a
-march=native library built elsewhere may not run on a node. Each node
with CPUs runs one measuring actor (NodeActor), pinned to it
(NodeAffinitySchedulingStrategy, soft=False), which compiles the sources
with the node's own compiler and times them in NeoFlow's isolated worker
processes (tune/measure.SourceMeasurer), on the thread count asked for --
not the OMP_NUM_THREADS Ray derives from the actor's num_cpus. Each
timing comes back with the node's hardware fingerprint; nodes with the
same fingerprint form one class, whose batches they share.

Faults: a candidate that crashes its worker is a "crash" record and the
actor carries on (the worker is restarted, as locally). A node that dies,
is removed or stops answering loses only the chunk it was measuring: the
chunk goes to another node of its class, else to any node, else -- when
no node is left -- to this machine, with one warning.

Network: `RayRunner("local")` starts a private instance whose every
process binds and connects to 127.0.0.1 only (loopback_settings()).

Hands on: a runner for tune/tuner.py (tune/runner.py's interface).
"""
import collections
import os
import shutil
import tempfile
import threading
import time
import uuid
import warnings
from contextlib import contextmanager
from pathlib import Path

from ..errors import NeoFlowError
from ..schedule import default_config
from ..toolchain.target import cpus
from .hardware import Hardware, detect
from .measure import Cancelled, Measurement, SourceMeasurer, kernel_source, worker_specs
from .runner import LocalRunner, Runner

INSTALL = "pip install 'neoflow[ray]'"
START_S = 120.0       # an actor's start and its first compile (neoflow imported on the node)
COMPILE_S = 30.0      # allowance per candidate, besides its run timeout, before a node is given up
POLL_S = 0.1          # how often a waiting batch looks at the stop event


class RayRunnerError(NeoFlowError):
    """Ray is missing, or the cluster cannot be used as asked."""


class RayRunnerWarning(RuntimeWarning):
    """A node was lost, or no node could measure (tuning goes on locally)."""


def import_ray():
    """The ray module, or RayRunnerError naming the pip command.

    >>> ray = import_ray()                        # doctest: +SKIP
    """
    try:
        import ray
    except ImportError as e:
        raise RayRunnerError(f"nf.RayRunner needs Ray, which is not installed ({e}); "
                             f"install it with: {INSTALL}") from None
    return ray


LOOPBACK = "127.0.0.1"     # every Ray process of NeoFlow's binds and connects here only


def loopback_cluster(scratch):
    """A `ray.cluster_utils.Cluster` whose head (no CPUs: it measures nothing)
    binds LOOPBACK and keeps its files under `scratch`; nodes are added with
    `add_node(node_ip_address=LOOPBACK, ...)`. Start it inside
    `environment(loopback_settings(scratch))` after `keep_loopback(ray)`
    (the simulated clusters of the tests and of bench/tune_ray.py).

    >>> with environment(loopback_settings(scratch)):       # doctest: +SKIP
    ...     cluster = loopback_cluster(scratch)
    """
    from ray.cluster_utils import Cluster
    return Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=0, node_ip_address=LOOPBACK, include_dashboard=False,
        temp_dir=os.path.join(scratch, "ray")))


def loopback_settings(scratch):
    """The environment that keeps a local Ray instance on 127.0.0.1 and out
    of the home directory: HOME and RAY_TMPDIR in `scratch` (which holds a
    ray_bootstrap_config.yaml, so Ray's start-up code does not probe cloud
    metadata servers), no usage stats, no token authentication, loopback
    addresses kept as they are, HTTP proxies pointed at a closed loopback
    port. Creates what `scratch` needs.

    >>> loopback_settings("/tmp/nf-ray")["RAY_AUTH_MODE"]
    'disabled'
    """
    scratch = Path(scratch)
    (scratch / "ray").mkdir(parents=True, exist_ok=True)
    bootstrap = scratch / "ray_bootstrap_config.yaml"
    if not bootstrap.exists():
        bootstrap.write_text("# empty: keeps Ray from probing cloud metadata servers\n")
    closed = "http://127.0.0.1:9"
    return {"HOME": str(scratch), "RAY_TMPDIR": str(scratch), "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "http_proxy": closed, "https_proxy": closed, "HTTP_PROXY": closed,
            "HTTPS_PROXY": closed, "no_proxy": "127.0.0.1,localhost",
            "NO_PROXY": "127.0.0.1,localhost"}


def keep_loopback(ray):
    """Make this process's Ray keep 127.0.0.1 as it is: by default Ray swaps
    a loopback node address for the host's primary one (what
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 does, for a ray already imported)."""
    ray._private.ray_constants.ENABLE_RAY_CLUSTER = False


_env_lock = threading.Lock()


@contextmanager
def environment(settings):
    """os.environ with `settings` applied, restored afterwards (processes
    started meanwhile keep them)."""
    with _env_lock:
        saved = {k: os.environ.get(k) for k in settings}
        os.environ.update(settings)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class NodeActor:
    """The measuring actor of one node (made remote by RayRunner): compiles
    shipped C sources here and times them in isolated worker processes.

    >>> actor = ray.remote(NodeActor).remote()        # doctest: +SKIP
    """

    def __init__(self):
        self.sessions = {}

    def open(self, sid, reference, specs, options, threads):
        """Start measuring one kernel; {"fingerprint", "hardware", "threads",
        "node"} of this node with kernels on `threads` OpenMP threads
        (None: this node's cores), or {"error": text}."""
        import ray
        threads = int(threads) if threads else cpus()
        hw = detect(threads)
        info = {"fingerprint": hw.fingerprint, "hardware": hw.to_dict(), "threads": threads,
                "node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "omp_env": os.environ.get("OMP_NUM_THREADS")}
        try:
            self.sessions[sid] = SourceMeasurer(reference, specs, jobs=hw.cores,
                                                env={"OMP_NUM_THREADS": str(threads)}, **options)
        except NeoFlowError as e:
            info["error"] = str(e)
        return info

    def measure(self, sid, items):
        """Build and time [(config JSON, C source)] -> [(status, median_s, detail)]."""
        results = self.sessions[sid].measure_sources(items)
        return [(r.status, r.median_s, r.detail) for r in results]

    def close(self, sid):
        measurer = self.sessions.pop(sid, None)
        if measurer is not None:
            measurer.close()


class RayRunner(Runner):
    """Measures candidates on every node of a Ray cluster, one actor a node.

    `address`: the cluster ("auto": the one running on this machine, "local":
    a private instance on 127.0.0.1 for this process, or "host:port"); when
    this process is already connected (ray.is_initialized()) that
    connection is used instead. `threads`: OpenMP threads every node times
    kernels with -- give the count your training job uses (default: each
    node's cores, what OpenMP takes where OMP_NUM_THREADS is unset; the
    background tuner asks for the trainer's own count). `num_cpus`: what
    each measuring actor reserves on its node (raise it to keep other Ray
    work off a node while it measures). `start_s`: how long a node may take
    to start its actor before it is left out. `measured`: candidates each
    node (by Ray node id) has measured so far.

    >>> rec = nf.tune(C, [A, B], trials=64, runner=nf.RayRunner("auto"))   # doctest: +SKIP
    """

    def __init__(self, address="auto", *, threads=None, num_cpus=1, start_s=START_S):
        self.ray = import_ray()
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise RayRunnerError(f"RayRunner: threads={threads!r}: expected a positive int")
        self.address, self.threads, self.num_cpus, self.start_s = (address, threads, num_cpus,
                                                                   start_s)
        self._actors = {}          # node id -> actor handle
        self.measured = collections.Counter()
        self._started_ray = False
        self._scratch = None
        self._lock = threading.Lock()

    def __repr__(self):
        return f"RayRunner({self.address!r})"

    @property
    def forkable(self):
        """False once this process holds a Ray connection (a fork cannot use it)."""
        return not self.ray.is_initialized()

    # -- the cluster ------------------------------------------------------------
    def connect(self):
        """Connect to the cluster (once; reuses this process's connection)."""
        ray = self.ray
        if ray.is_initialized():
            return
        if self.address == "local":
            self._scratch = tempfile.mkdtemp(prefix="neoflow-ray-")
            settings = loopback_settings(self._scratch)
            keep_loopback(ray)
            with environment(settings):
                ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False,
                         _node_ip_address=LOOPBACK, _temp_dir=str(Path(self._scratch) / "ray"),
                         configure_logging=False, log_to_driver=False)
        else:
            ray.init(address=self.address, configure_logging=False, log_to_driver=False)
        self._started_ray = True

    def actors(self):
        """{node id: actor} for every live node with CPUs (actors are made once)."""
        self.connect()
        ray = self.ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        remote = ray.remote(NodeActor)
        with self._lock:
            alive = {n["NodeID"] for n in ray.nodes()
                     if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0}
            for node in list(self._actors):
                if node not in alive:
                    del self._actors[node]
            for node in alive - set(self._actors):
                self._actors[node] = remote.options(
                    num_cpus=self.num_cpus, max_restarts=0, max_concurrency=1,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
            return dict(self._actors)

    def forget(self, node):
        """Drop (and kill) the actor of a node that failed."""
        with self._lock:
            actor = self._actors.pop(node, None)
        if actor is not None:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 -- the node may be gone already
                pass

    def close(self):
        """Kill the actors; shut Ray down if this runner started it."""
        for node in list(self._actors):
            self.forget(node)
        if self._started_ray and self.ray.is_initialized():
            self.ray.shutdown()
        self._started_ray = False
        if self._scratch is not None:       # the private instance's HOME and temp files
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- measuring ----------------------------------------------------------------
    def session(self, kernel, *, timeout=10.0, seed=0, source_hook=None, jobs=None, stop=None,
                hardware=None, threads=None):
        return RaySession(self, kernel, timeout=timeout, seed=seed, source_hook=source_hook,
                          stop=stop, hardware=hardware, threads=self.threads or threads)


class _Node:
    def __init__(self, node, actor, fingerprint):
        self.node, self.actor, self.fingerprint = node, actor, fingerprint


class RaySession:
    """One kernel measured on a RayRunner's nodes (tune/runner.py's Session).

    >>> with runner.session(kernel, timeout=5) as s:             # doctest: +SKIP
    ...     s.measure({fp: configs for fp in s.hardware})
    """

    def __init__(self, runner, kernel, *, timeout, seed, source_hook, stop, hardware, threads):
        self.runner, self.ray, self.kernel = runner, runner.ray, kernel
        self.timeout, self.seed, self.source_hook, self.stop = timeout, seed, source_hook, stop
        self.threads, self.only = threads, hardware
        self.sid = uuid.uuid4().hex
        self.hardware = {}            # fingerprint -> Hardware of the live classes
        self.nodes = []               # live _Nodes
        self._local = None            # the fallback session on this machine
        self._open()

    def _open(self):
        ray = self.ray
        reference = kernel_source(self.kernel, default_config(self.kernel))
        options = {"timeout": self.timeout, "seed": self.seed, "label": str(self.kernel)}
        actors = self.runner.actors()
        refs = {node: actor.open.remote(self.sid, reference, worker_specs(self.kernel),
                                        options, self.threads)
                for node, actor in actors.items()}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs),
                            timeout=self.runner.start_s) if refs else ([], [])
        problems = []
        for node, ref in refs.items():
            if ref not in ready:
                problems.append(f"node {node[:8]} did not start within "
                                f"{self.runner.start_s:g} s")
                self.runner.forget(node)
                continue
            try:
                info = ray.get(ref)
            except ray.exceptions.RayError as e:
                problems.append(f"node {node[:8]}: {type(e).__name__}")
                self.runner.forget(node)
                continue
            if "error" in info:
                problems.append(f"node {node[:8]}: {info['error'].splitlines()[0][:200]}")
                continue
            if self.only is not None and info["fingerprint"] != self.only:
                actors[node].close.remote(self.sid)
                continue
            self.nodes.append(_Node(node, actors[node], info["fingerprint"]))
            self.hardware[info["fingerprint"]] = Hardware(**info["hardware"])
        if problems:
            warnings.warn("RayRunner: " + "; ".join(problems), RayRunnerWarning, stacklevel=4)
        if not self.nodes:
            wanted = f" on hardware {self.only}" if self.only else ""
            self._fall_back(f"no Ray node can measure{wanted} ({len(actors)} node(s) tried)")

    # -- measuring ----------------------------------------------------------------
    def width(self, fingerprint):
        """Live nodes of `fingerprint`'s class (1 when measuring locally)."""
        return max(1, sum(n.fingerprint == fingerprint for n in self.nodes))

    def measure(self, batches):
        """Measure {fingerprint: [Config]} on the nodes of each class (a
        lost node's chunk goes elsewhere); Measurements in input order,
        each stamped with the fingerprint of the node that measured it."""
        items = [(fp, c) for fp, configs in batches.items() for c in configs]
        sources = [self._source(c) for _, c in items]
        out = [None] * len(items)
        queue = []                     # (preferred fingerprint, [indices])
        for fp in batches:
            idx = [i for i, (f, _) in enumerate(items) if f == fp]
            nodes = [n for n in self.nodes if n.fingerprint == fp] or self.nodes or [None]
            for k, node in enumerate(nodes):
                part = idx[k::len(nodes)]
                if part:
                    queue.append((fp, part, node))
        flight = {}                    # ref -> (node, fingerprint, indices, deadline)
        while queue or flight:
            while queue:
                fp, part, node = queue.pop()
                if node is None or node not in self.nodes:
                    node = self._choose(fp)
                if node is None:
                    self._measure_locally(items, sources, part, out)
                    continue
                ref = node.actor.measure.remote(
                    self.sid, [(items[i][1].to_json(), sources[i]) for i in part])
                limit = len(part) * (self.timeout + COMPILE_S) + COMPILE_S
                flight[ref] = (node, fp, part, time.monotonic() + limit, limit)
            ready, _ = self.ray.wait(list(flight), num_returns=1, timeout=POLL_S)
            self._check_stop(flight)
            for ref in ready:
                node, fp, part, _, _ = flight.pop(ref)
                try:
                    replies = self.ray.get(ref)
                except self.ray.exceptions.RayError as e:
                    self._lose(node, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
                    queue.append((fp, part, None))
                    continue
                self.runner.measured[node.node] += len(part)
                for i, (status, median_s, detail) in zip(part, replies):
                    out[i] = Measurement(items[i][1], status, median_s, detail, node.fingerprint)
            now = time.monotonic()
            for ref, (node, fp, part, deadline, limit) in list(flight.items()):
                if now > deadline:
                    flight.pop(ref)
                    self._lose(node, f"no answer within {limit:.0f} s")
                    queue.append((fp, part, None))
        return out

    def _source(self, config):
        source = kernel_source(self.kernel, config)
        return source if self.source_hook is None else self.source_hook(config, source)

    def _choose(self, fingerprint):
        """A live node, of `fingerprint`'s class if one is left."""
        same = [n for n in self.nodes if n.fingerprint == fingerprint]
        pool = same or self.nodes
        return pool[0] if pool else None

    def _lose(self, node, why):
        if node in self.nodes:
            self.nodes.remove(node)
            warnings.warn(f"RayRunner: lost node {node.node[:8]} ({why}); its candidates in "
                          "flight go to another node", RayRunnerWarning, stacklevel=4)
            self.runner.forget(node.node)
            if not any(n.fingerprint == node.fingerprint for n in self.nodes):
                self.hardware.pop(node.fingerprint, None)
        if not self.nodes and self._local is None:
            self._fall_back("every Ray node is lost")

    def _fall_back(self, why):
        warnings.warn(f"RayRunner: {why}; measuring on this machine instead",
                      RayRunnerWarning, stacklevel=5)
        self._local = LocalRunner().session(self.kernel, timeout=self.timeout, seed=self.seed,
                                            source_hook=self.source_hook, stop=self.stop,
                                            threads=self.threads)
        self.hardware.update(self._local.hardware)

    def _measure_locally(self, items, sources, part, out):
        if self._local is None:
            self._fall_back("no Ray node is left")
        results = self._local.measurer.measure_sources([(items[i][1], sources[i]) for i in part])
        for i, r in zip(part, results):
            r.hardware = self._local.fingerprint
            out[i] = r

    def _check_stop(self, flight):
        if self.stop is not None and self.stop.is_set():
            for ref in flight:
                try:
                    self.ray.cancel(ref)
                except Exception:  # noqa: BLE001 -- the node may be gone already
                    pass
            raise Cancelled(f"measuring {self.kernel} was stopped")

    def close(self):
        for node in self.nodes:
            try:
                node.actor.close.remote(self.sid)
            except Exception:  # noqa: BLE001 -- a node lost meanwhile
                pass
        if self._local is not None:
            self._local.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
