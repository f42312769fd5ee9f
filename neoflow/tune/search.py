"""tune/search: which schedules to measure next.

First random samples of the space (those the pruner keeps) and mutations
of the best schedule measured so far (the default, at first); then
evolutionary search guided by the cost model: the fastest schedules
measured so far and fresh samples form a population, mutation (retile an
axis, move a loop, change the parallel depth, the vector axis, unrolling,
the local accumulator, which inputs are packed or padded) and crossover
(stage schedules swapped between parents) make children, the pruner drops
the hopeless, the model scores the rest and the best survive a few
generations. A batch is the top of the last generation by predicted time,
plus a share of random samples so the model keeps seeing new ground. Everything draws on one random.Random: the same
seed proposes the same schedules for the same measurements.

Hands on: lists of Configs not measured before.
"""
import copy
import math
import random

import numpy as np

from ..schedule import Config, ConfigError, ConfigSpace
from ..schedule.config import MAX_UNROLL, level_names, loop_extent, validate_stage
from ..schedule.split_reduce import split_choices
from .cost_model import make_model
from .estimate import Estimates
from .features import Featurizer
from .prune import Pruner

WARMUP = 16            # measured schedules before the model guides the search
POPULATION = 96
GENERATIONS = 3
ELITES = 8
EXPLORE = 0.2          # share of a batch drawn at random
COMPUTE_AT_FLIP = 0.15  # share of mutations that flip a stage's compute_at instead
MAX_LEVELS = 2         # split factors per axis that mutation makes
_FACTORS = (2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)


class Search:
    """Proposes batches of unmeasured Configs for one kernel.

    >>> search = Search(kernel, detect(), seed=0)
    >>> batch = search.propose(8)
    >>> search.observe([(cfg, 0.01) for cfg in batch])   # seconds; None = failed
    """

    def __init__(self, kernel, hw, seed=0, prune=True):
        self.kernel, self.hw = kernel, hw
        self.rng = random.Random(seed)
        self.space = ConfigSpace(kernel)
        estimates = Estimates(kernel, hw)
        self.pruner = Pruner(kernel, hw, estimates) if prune else None
        self.featurize = Featurizer(kernel, hw, estimates)
        self.model = make_model()
        self.seen = {}            # config JSON -> seconds (inf: failed)
        self._rows, self._times, self._configs = [], [], {}

    # -- data -------------------------------------------------------------------
    def observe(self, results):
        """Add measured (Config, seconds or None) pairs and refit the model."""
        for config, seconds in results:
            key = config.to_json()
            t = math.inf if seconds is None else float(seconds)
            self.seen[key] = t
            self._configs[key] = config
            if math.isfinite(t):
                self._rows.append(self.featurize(config))
                self._times.append(math.log(t))
        if len(self._times) >= WARMUP // 2:
            self.model.fit(np.stack(self._rows), np.asarray(self._times))

    def keep(self, config):
        """True if the pruner (when on) keeps `config`."""
        return self.pruner is None or self.pruner.reject(config) is None

    # -- proposing --------------------------------------------------------------
    def propose(self, n):
        """Up to `n` Configs not seen before (fewer when the space runs dry)."""
        measured = sum(math.isfinite(t) for t in self.seen.values())
        if measured < WARMUP:      # half random, half neighbours of the best so far
            near = self._neighbours(n // 2) if measured else []
            return near + self._random(n - len(near), {c.to_json() for c in near})
        explore = max(1, int(round(n * EXPLORE)))
        picked = self._evolve(n - explore)
        taken = {c.to_json() for c in picked}
        return picked + self._random(n - len(picked), taken)

    def _random(self, n, taken):
        out = []
        for _ in range(n * 64):
            if len(out) == n:
                break
            config = canonical(self.space, self.space.sample(self.rng))
            key = config.to_json()
            if key in self.seen or key in taken or not self.keep(config):
                continue
            taken.add(key)
            out.append(config)
        return out

    def _neighbours(self, n):
        """Up to `n` unseen mutations of the fastest schedules measured."""
        ranked = sorted((t, k) for k, t in self.seen.items() if math.isfinite(t))
        elites = [self._configs[k] for _, k in ranked[:ELITES]]
        out, taken = [], set()
        for _ in range(n * 32):
            if len(out) == n:
                break
            child = self._child(elites)
            if child is None:
                continue
            key = child.to_json()
            if key not in self.seen and key not in taken and self.keep(child):
                taken.add(key)
                out.append(child)
        return out

    def _evolve(self, n):
        ranked = sorted((t, k) for k, t in self.seen.items() if math.isfinite(t))
        elites = [self._configs[k] for _, k in ranked[:ELITES]]
        population = elites + self._random(POPULATION // 4, set())
        scored = {}
        for _ in range(GENERATIONS):
            children = []
            for _ in range(POPULATION * 2):
                if len(children) >= POPULATION:
                    break
                child = self._child(population)
                if child is None:
                    continue
                key = child.to_json()
                if key in self.seen or key in scored or not self.keep(child):
                    continue
                children.append(child)
                scored[key] = None
            if not children:
                break
            scores = self.model.predict(self.featurize.matrix(children))
            for c, s in zip(children, scores):
                scored[c.to_json()] = (s, c)
            best = sorted((v for v in scored.values() if v is not None), key=lambda v: v[0])
            population = elites + [c for _, c in best[:POPULATION // 2]]
        best = sorted((v for v in scored.values() if v is not None), key=lambda v: v[0])
        return [c for _, c in best[:n]]

    def _child(self, population):
        """A mutated (sometimes crossed-over) copy of a member, or None if invalid."""
        rng = self.rng
        # rank-weighted parent choice: the fittest (listed first) more often
        weights = [1.0 / (1 + i) for i in range(len(population))]
        parent = rng.choices(population, weights)[0]
        stages = [copy.deepcopy(s) for s in parent.stages]
        if len(stages) > 1 and rng.random() < 0.3:
            other = rng.choice(population)
            n = rng.randrange(len(stages))
            stages[n] = copy.deepcopy(other.stages[n])
        n = rng.randrange(len(stages))
        if n > 0 and rng.random() < COMPUTE_AT_FLIP:
            stages[n].compute_at = not stages[n].compute_at
        else:
            try:
                stages[n] = mutate_stage(self.space.stages[n], stages[n], rng,
                                         self.hw.lanes(self.space.stages[n].tensor.dtype))
            except ConfigError:
                return None
        return canonical(self.space, Config(stages))


def canonical(space, config):
    """`config` with every unroll factor at most its loop's trip count (a
    larger factor makes the same code): equal schedules compare equal; and
    compute_at off where the stages no longer allow it.

    >>> canonical(ConfigSpace(kernel), config).to_json()      # doctest: +SKIP
    """
    for st, sc in zip(space.stages, config.stages):
        clamped = {lv: min(f, loop_extent(st, sc, lv)) for lv, f in sc.unroll.items()}
        sc.unroll = {lv: f for lv, f in clamped.items() if f >= 2}
    for n, sc in enumerate(config.stages):   # a change may have made compute_at illegal
        sc.compute_at = sc.compute_at and space.can_compute_at(config.stages, n)
    return config


def factor_choices(extent, lanes):
    """Split factors worth trying for an axis of `extent`: small numbers,
    SIMD-lane multiples and divisors up to 64, all below the extent.

    >>> factor_choices(24, 8)
    [2, 3, 4, 5, 6, 7, 8, 12, 16]
    """
    divisors = [f for f in range(2, min(extent, 65)) if extent % f == 0]
    lane = [lanes * k for k in range(1, 9)]
    return sorted({f for f in list(_FACTORS) + divisors + lane if 1 < f < extent})


def mutate_stage(st, sc, rng, lanes):
    """A random valid neighbour of StageConfig `sc` of Stage `st`; raises
    ConfigError when the change made does not fit.

    >>> mutate_stage(Stage(C), default_config(kernel).stages[0], random.Random(1), 8)
    """
    sc = copy.deepcopy(sc)
    op = rng.choice(("tile", "tile", "order", "order", "parallel", "vectorize", "unroll",
                     "cache_write", "pack", "pad", "split"))
    if op == "tile":
        _retile(st, sc, rng, lanes)
    elif op == "order":
        _move_loop(sc, rng)
    elif op == "parallel":
        sc.parallel = rng.randint(0, max(0, _parallel_limit(sc)))
    elif op == "vectorize":
        options = [None] + [a for a in st.axis_names if a != sc.vectorize]
        sc.vectorize = rng.choice(options)
    elif op == "unroll":
        serial = [lv for lv in sc.order[sc.parallel:]]
        if sc.unroll and rng.random() < 0.5:
            sc.unroll.pop(rng.choice(sorted(sc.unroll)))
        elif serial:
            sc.unroll[rng.choice(serial)] = rng.choice([f for f in (2, 4, 6, 8, 16)
                                                        if f <= MAX_UNROLL])
    elif op == "pack" and st.packable:
        sc.pack = sorted(set(sc.pack) ^ {rng.randrange(len(st.packable))})
    elif op == "pad" and st.paddable:
        sc.pad = sorted(set(sc.pad) ^ {rng.randrange(len(st.paddable))})
    elif op == "cache_write" and st.reduction is not None:
        sc.cache_write = not sc.cache_write
    elif op == "split" and split_choices(st):     # schedule/split_reduce.py
        sc.split = rng.choice([0] + split_choices(st))
    _repair(st, sc)
    validate_stage(st, sc, "mutation")
    return sc


def _retile(st, sc, rng, lanes):
    if not st.axis_names:          # a 0-d stage (a loss): nothing to split
        return
    axis = rng.choice(st.axis_names)
    factors = list(sc.tile[axis])
    choices = factor_choices(st.extent(axis), lanes)
    if not choices:
        return
    r = rng.random()
    if factors and (r < 0.25 or len(factors) == MAX_LEVELS and r < 0.5):
        factors.pop(rng.randrange(len(factors)))
    elif len(factors) < MAX_LEVELS and r < 0.6:
        factors.insert(rng.randint(0, len(factors)), rng.choice(choices))
    elif factors:
        factors[rng.randrange(len(factors))] = rng.choice(choices)
    else:
        factors = [rng.choice(choices)]
    _set_factors(sc, axis, factors)


def _set_factors(sc, axis, factors):
    """Give `axis` new split factors, keeping its loops' places in the order:
    the outer levels stay where they were, the innermost stays innermost of
    the axis, levels made or dropped go just before it."""
    old = level_names(axis, sc.tile[axis])
    new = level_names(axis, factors)
    slots = [n for n, lv in enumerate(sc.order) if lv in old]
    keep = min(len(old), len(new)) - 1          # outer levels that keep a slot
    order = []
    for n, lv in enumerate(sc.order):
        if lv not in old:
            order.append(lv)
        elif n in slots[:keep]:
            order.append(new[slots.index(n)])
        elif n == slots[-1]:
            order.extend(new[keep:])
    for old_level in old:
        sc.unroll.pop(old_level, None)
    sc.tile[axis], sc.order = list(factors), order


def _move_loop(sc, rng):
    """Move one loop to another place between its axis' neighbouring levels."""
    if len(sc.order) < 2:
        return
    n = rng.randrange(len(sc.order))
    lv = sc.order.pop(n)
    axis, j = lv.split(".")[0], int(lv.split(".")[1])
    lo = max((i + 1 for i, x in enumerate(sc.order)
              if x.split(".")[0] == axis and int(x.split(".")[1]) < j), default=0)
    hi = min((i for i, x in enumerate(sc.order)
              if x.split(".")[0] == axis and int(x.split(".")[1]) > j), default=len(sc.order))
    sc.order.insert(rng.randint(lo, hi), lv)


def _parallel_limit(sc):
    """Outer loops that may run in parallel: spatial, and not the vector loop."""
    limit = next((n for n, lv in enumerate(sc.order) if lv.startswith("r")), len(sc.order))
    if sc.vectorize is not None:
        limit = min(limit, len(sc.order) - 1)
    return limit


def _repair(st, sc):
    """Restore the rules a mutation may break: the vector loop innermost, the
    parallel prefix spatial, unrolled loops serial, packed axes split."""
    if sc.vectorize is not None:
        last = level_names(sc.vectorize, sc.tile[sc.vectorize])[-1]
        sc.order.remove(last)
        sc.order.append(last)
    sc.parallel = min(sc.parallel, _parallel_limit(sc))
    sc.unroll = {lv: f for lv, f in sc.unroll.items()
                 if lv in sc.order[sc.parallel:] and lv != (sc.order[-1] if sc.vectorize
                                                            else None)}
    if st.reduction is not None and st.reduction.dtype != st.tensor.dtype:
        sc.cache_write = True
    sc.pack = [n for n in sc.pack if sc.tile[st.packable[n][1]]]
