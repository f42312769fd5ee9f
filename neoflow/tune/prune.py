"""tune/prune: drop schedules the hardware model says cannot be fast,
before any is compiled or measured (DeepCuts' idea, for CPUs).

Rules, per stage (tune/estimate.py supplies the figures):
* parallel -- a stage with enough work that runs a parallel loop gives
  every core a chunk of it, the chunks spread evenly (>= 75%); one thread
  stays allowed (on a shared machine, or next to the runtime's background
  tuner, it can be the fastest);
* vector-width -- the vectorised loop's extent is a multiple of the SIMD
  lanes, or the whole (short) axis; a stage without a reduction that has
  an axis as long as a vector is vectorised at all;
* registers -- the accumulator tile inside the innermost reduce loop fits
  the vector registers;
* cache -- one step of the innermost reduce loop touches at most L1, the
  accumulator tile at most half of L1.

Hands on: a reason string for a rejected Config (None: kept), and
`prune_report` figures (how much of a random sample survives).
"""
import random

from ..schedule.default import parallel_min_work
from ..schedule.space import ConfigSpace
from .estimate import Estimates

MIN_PARALLEL_EFFICIENCY = 0.75
REGISTER_SLACK = 2     # vector registers kept for operands (a vector and a broadcast)


class Pruner:
    """Applies the rules above to Configs of one kernel on one Hardware.

    >>> pruner = Pruner(kernel, detect())
    >>> pruner.reject(default_config(kernel)) is None
    True
    """

    def __init__(self, kernel, hw, estimates=None):
        self.kernel, self.hw = kernel, hw
        self.estimates = estimates or Estimates(kernel, hw)

    def reject(self, config):
        """The first rule `config` breaks, as "stage N: rule: why", or None."""
        for n, sc in enumerate(config.stages):
            why = self._stage(self.estimates.stages[n], sc, self.estimates(n, sc))
            if why is not None:
                return f"stage {n}: {why}"
        return None

    def _stage(self, st, sc, est):
        hw = self.hw
        if sc.parallel and est.flops >= parallel_min_work() and hw.cores > 1:
            if est.parallel_chunks < hw.cores:
                return f"parallel: {est.parallel_chunks} chunk(s) for {hw.cores} cores"
            if est.parallel_efficiency < MIN_PARALLEL_EFFICIENCY:
                return (f"parallel: {est.parallel_chunks} chunks spread over {hw.cores} cores "
                        f"at {est.parallel_efficiency:.0%}")
        lanes = hw.lanes(st.tensor.dtype)
        if sc.vectorize is None:
            if lanes > 1 and st.reduction is None and any(
                    st.extent(a) >= lanes for a in st.axis_names if a.startswith("s")):
                return "vector-width: no vectorised loop"
        else:
            whole = st.extent(sc.vectorize)
            v = est.vector_extent
            if v % lanes and v != whole:
                return f"vector-width: vector loop of {v} for {lanes} lanes"
        if st.reduction is not None:
            if sc.cache_write and -(-est.register_tile // lanes) > (
                    hw.vector_registers - REGISTER_SLACK):
                return f"registers: a tile of {est.register_tile} accumulators"
            if est.step_bytes > hw.l1:
                return f"cache: a reduce step touches {est.step_bytes} B > L1"
            if est.accumulator_bytes > hw.l1 // 2:
                return f"cache: accumulator of {est.accumulator_bytes} B > L1/2"
        return None


def prune_report(kernel, hw, samples=500, seed=0):
    """How much of a random sample of `kernel`'s space the rules drop.

    Returns {"sampled", "kept", "pruned_fraction", "by_rule": {rule: count}}.

    >>> prune_report(kernel, detect(), samples=100)["pruned_fraction"]   # doctest: +SKIP
    0.87
    """
    space, pruner = ConfigSpace(kernel), Pruner(kernel, hw)
    rng = random.Random(seed)
    kept, by_rule = 0, {}
    for _ in range(samples):
        why = pruner.reject(space.sample(rng))
        if why is None:
            kept += 1
        else:
            rule = why.split(": ")[1]
            by_rule[rule] = by_rule.get(rule, 0) + 1
    return {"sampled": samples, "kept": kept, "pruned_fraction": 1 - kept / samples,
            "by_rule": by_rule}

