"""schedule/space: the valid schedules of a kernel, to sample or enumerate.

Per stage the space is: split factors per axis (up to two levels, divisors
and -- when sampling -- factors that leave tails, two of the target's
vectors among them), any interleaving of the loops that keeps each axis'
loops outer to inner, a vectorised axis (its innermost loop moved
innermost), a parallel prefix of spatial loops, unroll factors (up to 16
where the target has 32 vector registers for taller register tiles), the
local accumulator on or off, which packable inputs are
copied into panels (and which paddable ones zero-padded) first, and --
across stages, when sampling -- whether a stage is computed at the one
before it (where that is legal), and whether a long sum runs as parallel
partial sums (`split`, schedule/split_reduce.py; sampled only, never
enumerated).

A stage read through flattened indices is seen through its delinearised
view (schedule/stage.py): its split axes are tiled, ordered and vectorised
like any others.

Hands on: `Config`s that `validate` accepts.
"""
import itertools
import random

from .config import (MAX_ACCUMULATOR, Config, ConfigError, StageConfig, accumulator_size,
                     compute_at_problem, level_names, validate, validate_stage)
from .default import default_config
from ..toolchain.target import target
from .split_reduce import sample_split
from .stage import Stage

SAMPLE_TRIES = 200
_SMALL = (2, 3, 4, 5, 7, 8, 16)
UNROLLS = {16: (2, 4, 8), 32: (2, 4, 8, 16)}   # by the target's vector registers


def config_space(kernel):
    """The schedule space of `kernel`.

    >>> space = config_space(kernel)
    >>> cfg = space.sample(random.Random(0)); next(iter(space))
    """
    return ConfigSpace(kernel)


def sample_config(kernel, rng):
    """A random valid Config of `kernel`; `rng` is a random.Random or a seed.

    >>> sample_config(kernel, 7) == sample_config(kernel, 7)
    True
    """
    return ConfigSpace(kernel).sample(rng)


class ConfigSpace:
    """Sample (`sample(rng)`) or enumerate (iterate, lazily) valid Configs."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.stages = [Stage(t) for t in kernel.stages]

    def sample(self, rng):
        rng = rng if isinstance(rng, random.Random) else random.Random(rng)
        stages = []
        for n, st in enumerate(self.stages):
            for _ in range(SAMPLE_TRIES):
                sc = _sample_stage(st, rng)
                if _valid(st, sc):
                    break
            else:
                sc = default_config(self.kernel).stages[n]
            stages.append(sc)
        for n in range(1, len(stages)):
            stages[n].compute_at = self.can_compute_at(stages, n) and rng.random() < 0.5
        for st, sc in zip(self.stages, stages):     # schedule/split_reduce.py
            sample_split(st, sc, rng, stages)
        config = Config(stages)
        validate(config, self.kernel)
        return config

    def can_compute_at(self, stage_configs, n):
        """Whether stage `n` may be computed at stage n - 1 under `stage_configs`."""
        return compute_at_problem(self.stages, stage_configs, n, self.kernel.inputs) is None

    def __iter__(self):
        def rec(n):
            if n == len(self.stages):
                yield []
                return
            for sc in _enumerate_stage(self.stages[n]):
                for rest in rec(n + 1):
                    yield [sc] + rest
        for stages in rec(0):
            yield Config(stages)


def _valid(st, sc):
    try:
        validate_stage(st, sc, "sample")
    except ConfigError:
        return False
    return True


def _divisors(n, limit=64):
    return [f for f in range(2, min(n, limit) + 1) if n % f == 0 and f < n]


def _sample_factors(rng, extent, small=_SMALL):
    count = rng.choices((0, 1, 2), weights=(7, 10, 3))[0]
    factors, left = [], extent
    for _ in range(count):
        options = sorted(set(_divisors(left) + [f for f in small if f < left]))
        if not options:
            break
        f = rng.choice(options)
        factors.append(f)
        left = -(-left // f)
    return list(reversed(factors))


def _interleave(rng, st, tile):
    queues = {a: level_names(a, tile[a]) for a in st.axis_names}
    order = []
    while any(queues.values()):
        a = rng.choice([a for a, q in queues.items() if q])
        order.append(queues[a].pop(0))
    return order


def _sample_stage(st, rng):
    simd = target()
    small = _SMALL + (2 * simd.lanes(st.tensor.dtype),)
    tile = {a: _sample_factors(rng, st.extent(a), small) for a in st.axis_names}
    order = _interleave(rng, st, tile)
    spatial = [a for a in st.axis_names if a.startswith("s")]
    vectorize = None
    if spatial and rng.random() < 0.75:
        vectorize = spatial[-1] if rng.random() < 0.7 else rng.choice(spatial)
    cache_write = st.reduction is not None and (
        rng.random() < 0.75 or st.reduction.dtype != st.tensor.dtype)
    if st.reduction is not None and cache_write and rng.random() < 0.2:
        vectorize = rng.choice([a for a in st.axis_names if a.startswith("r")])
    if vectorize is not None:
        last = level_names(vectorize, tile[vectorize])[-1]
        order.remove(last)
        order.append(last)
    prefix = next((n for n, lv in enumerate(order) if lv.startswith("r")), len(order))
    if vectorize is not None:
        prefix = min(prefix, len(order) - 1)
    parallel = rng.randint(0, prefix) if prefix else 0
    serial = [lv for lv in order[parallel:] if vectorize is None or lv != order[-1]]
    unrolls = UNROLLS.get(simd.vector_registers, UNROLLS[16])
    unroll = {rng.choice(serial): rng.choice(unrolls)} if serial and rng.random() < 0.3 else {}
    pack = [n for n, (_, axis, _) in enumerate(st.packable)
            if tile[axis] and rng.random() < 0.3]
    pad = [n for n in range(len(st.paddable)) if rng.random() < 0.5]
    sc = StageConfig(tile, order, parallel, vectorize, unroll, cache_write, pack, pad)
    if cache_write and accumulator_size(st, sc) > MAX_ACCUMULATOR:
        sc.cache_write = st.reduction.dtype != st.tensor.dtype
    return sc


def _enumerate_stage(st):
    """Stage schedules from splits by divisors, every interleaving, a vector
    axis (or none), the largest parallel prefix, cache_write on when it fits."""
    per_axis = [[[]] + [[f] for f in _divisors(st.extent(a))] for a in st.axis_names]
    spatial = [a for a in st.axis_names if a.startswith("s")]
    for factors in itertools.product(*per_axis):
        tile = dict(zip(st.axis_names, factors))
        for order in _interleavings([level_names(a, tile[a]) for a in st.axis_names]):
            for vectorize in [None] + spatial[::-1]:
                if vectorize is not None and order[-1] != level_names(vectorize,
                                                                      tile[vectorize])[-1]:
                    continue
                prefix = next((n for n, lv in enumerate(order) if lv.startswith("r")),
                              len(order))
                if vectorize is not None:
                    prefix = min(prefix, len(order) - 1)
                for cache_write in ((True, False) if st.reduction is not None else (False,)):
                    sc = StageConfig(dict(tile), list(order), prefix, vectorize, {},
                                     cache_write)
                    if _valid(st, sc):
                        yield sc


def _interleavings(queues):
    """Every merge of the lists in `queues` that keeps each list's order."""
    queues = [q for q in queues if q]
    if not queues:
        yield []
        return
    for n, q in enumerate(queues):
        rest = queues[:n] + [q[1:]] + queues[n + 1:]
        for tail in _interleavings(rest):
            yield [q[0]] + tail
