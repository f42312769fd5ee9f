"""tune/features: a fixed-length vector of loop features per schedule, the
cost model's input.

Per stage: the analytic estimate (log cycles, compute, traffic into each
cache level), the loop structure (loop count, innermost trip count, tails),
parallelism (chunks, balance), vectorisation (which kind of axis, extent,
lane use), the register tile and the accumulator, unrolling, packed and
padded inputs, computed at the previous stage or not, and the working set
at the parallel depth, the first reduce loop and the innermost reduce
loop. A kernel's vector is its stages' vectors one after
another, so every Config of one kernel maps to the same length.

Hands on: float64 numpy rows for tune/cost_model.py.
"""
import math

import numpy as np

from .estimate import Estimates

STAGE_FEATURES = 30


def _log(x):
    return math.log2(1.0 + max(0.0, float(x)))


class Featurizer:
    """Feature rows for Configs of one kernel on one Hardware.

    >>> fz = Featurizer(kernel, detect())
    >>> fz(default_config(kernel)).shape
    (30,)
    """

    def __init__(self, kernel, hw, estimates=None):
        self.estimates = estimates or Estimates(kernel, hw)

    def __call__(self, config):
        return np.concatenate([self._stage(self.estimates.stages[n], sc, self.estimates(n, sc))
                               for n, sc in enumerate(config.stages)])

    def matrix(self, configs):
        """One row per Config."""
        return np.stack([self(c) for c in configs]) if configs else np.zeros((0, 0))

    def _stage(self, st, sc, est):
        order = sc.order
        first_r = next((n for n, lv in enumerate(order) if lv.startswith("r")), len(order))
        last_r = max((n + 1 for n, lv in enumerate(order) if lv.startswith("r")), default=0)
        tails = sum(1 for a, fs in sc.tile.items() for j in range(len(fs))
                    if st.extent(a) % math.prod(fs[j:]))
        vec = sc.vectorize
        spatial_last = f"s{len(st.spatial) - 1}" if st.spatial else None
        inner = est.loops[-1][1] if est.loops else 1
        row = [
            _log(est.cycles), _log(est.compute_cycles),
            _log(est.traffic[0]), _log(est.traffic[1]), _log(est.traffic[2]),
            len(order), _log(inner), tails,
            _log(est.parallel_chunks), est.parallel_efficiency, sc.parallel,
            vec is None, vec is not None and vec == spatial_last,
            vec is not None and vec.startswith("s") and vec != spatial_last,
            vec is not None and vec.startswith("r"),
            _log(est.vector_extent), est.vector_efficiency,
            _log(est.register_tile), est.register_fit, _log(est.accumulator_bytes),
            sc.cache_write, _log(math.prod(sc.unroll.values())),
            _log(est.footprint[min(sc.parallel, len(order))]),
            _log(est.footprint[first_r]), _log(est.footprint[last_r]), _log(est.step_bytes),
            first_r - sc.parallel, len(sc.pack), len(sc.pad), sc.compute_at,
        ]
        return np.asarray(row, dtype=np.float64)
