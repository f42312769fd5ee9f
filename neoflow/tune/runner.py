"""tune/runner: where candidates are measured, behind one interface.

The tuner (tune/tuner.py) keeps the search, the cost model and the one
writer of the database; a runner only measures. `runner.session(kernel,
...)` opens a Session for one kernel: `session.hardware` maps each
hardware fingerprint it can measure on to that machine's Hardware (a
class of identical machines: their records are shared);
`session.width(fingerprint)` says how many machines of a class measure
at once; `session.measure({fingerprint: [Config, ...]})` returns one
Measurement per Config, each stamped with the fingerprint of the machine
that really measured it (a node lost mid-batch hands its Configs on).

LocalRunner measures on this machine in NeoFlow's isolated worker
processes (tune/measure.py), as nf.tune always has; RayRunner
(tune/ray_runner.py) fans the batches out to one measuring actor per Ray
node.

Hands on: `Measurement`s with their `hardware` set.
"""
from .hardware import detect
from .measure import Measurer


class Runner:
    """What the tuner asks of a runner (LocalRunner and RayRunner are two).
    `forkable`: whether a forked child process may use it (the background
    tuner's child; a Ray connection cannot cross a fork).

    >>> with runner.session(kernel, timeout=5.0, seed=0) as session:
    ...     [fp] = session.hardware
    ...     results = session.measure({fp: [default_config(kernel)]})
    """
    forkable = True

    def session(self, kernel, *, timeout=10.0, seed=0, source_hook=None, jobs=None, stop=None,
                hardware=None, threads=None):
        """A Session measuring `kernel`. `hardware`: a fingerprint; only
        machines that have it measure (the background tuner wants schedules
        for the machine it trains on). `threads`: the OpenMP threads kernels
        are timed with where the runner does not fix it."""
        raise NotImplementedError

    def close(self):
        """Release what the runner holds (nothing, locally)."""


class LocalRunner(Runner):
    """Measures on this machine, in isolated worker processes.

    `hw`: the Hardware records are stored under (default: detect(), this
    process's thread count).

    >>> nf.tune(C, [A, B], trials=16, runner=LocalRunner())       # doctest: +SKIP
    """

    def __init__(self, hw=None):
        self.hw = hw

    def __repr__(self):
        return "LocalRunner()"

    def session(self, kernel, *, timeout=10.0, seed=0, source_hook=None, jobs=None, stop=None,
                hardware=None, threads=None):
        hw = self.hw or detect(threads)
        env = None if threads is None else {"OMP_NUM_THREADS": str(threads)}
        measurer = Measurer(kernel, timeout=timeout, seed=seed, source_hook=source_hook,
                            jobs=jobs, stop=stop, env=env)
        return LocalSession(measurer, hw)


class LocalSession:
    """A Measurer on this machine as a runner Session.

    >>> session.measure({session.fingerprint: configs})       # doctest: +SKIP
    """

    def __init__(self, measurer, hw):
        self.measurer, self.fingerprint = measurer, hw.fingerprint
        self.hardware = {hw.fingerprint: hw}

    def width(self, fingerprint):
        """Machines of `fingerprint`'s class that measure at once (here: one)."""
        return 1

    def measure(self, batches):
        """Every Config of `batches` measured here, in order, stamped with this machine."""
        results = self.measurer.measure([c for configs in batches.values() for c in configs])
        for r in results:
            r.hardware = self.fingerprint
        return results

    def close(self):
        self.measurer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
