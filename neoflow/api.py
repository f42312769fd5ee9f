"""api: `nf.build` -- tensor expressions to a native function, end to end.

outputs -> fused kernels (graph: inlining, then grouping into multi-stage
kernels; `fusion=False`: one kernel per compute) -> Configs (given, tuned -- the tuning database
-- or the schedule stage's default) -> loop
IR (schedule) -> C (codegen) -> loaded library (build) -> `BuiltFunction`,
which checks what it is called with (te/feed.py), allocates fresh outputs,
runs the entry point and turns a reported error into a NeoFlowError.

Hands on: `BuiltFunction`s.
"""
import ctypes

import numpy as np

from .build import compile_c
from .codegen.c import ENTRY, generate_c
from .errors import InputError, NeoFlowError, OutOfBoundsError
from .graph import fuse, kernels_of
from .schedule import Config, default_config, lower_program
from .te import dtype as dt
from .te.feed import as_input_array
from .te.tensor import Tensor
from .te.visit import topo_tensors
from .tune.database import best_configs


def build(outputs, inputs, target="cpu", database=None, *, configs=None, sanitize=False,
          fusion=True):
    """Compile `outputs` as a function of `inputs` (placeholders/parameters, in order).

    The computation is partitioned into fused kernels (graph.partition:
    injective producers inlined, epilogues, light reductions and siblings
    grouped; see docs/fusion.md and `nf.explain`); `fusion=False` makes one
    kernel per compute, for debugging or to schedule computes one by one.

    `configs` gives schedules: one Config (a single-kernel build), a list
    with one Config or None per kernel (in `f.kernels` order), or a dict
    {kernel key: Config}. A kernel without one takes the best schedule
    `nf.tune` recorded for it in `database` (None: the per-user tuning
    database, if there is one; False: none; a path or an nf.tune.Database),
    else `default_config`. An unreadable database warns once and never
    fails the build. `sanitize=True` builds with
    AddressSanitizer (load only in a process with `asan_runtime_path()` in
    LD_PRELOAD).

    >>> A = nf.placeholder((2, 3), name="A")
    >>> B = nf.compute((3, 2), lambda i, j: A[j, i] * 2, name="B")
    >>> f = nf.build(B, [A])
    >>> f(np.ones((2, 3), np.float32)).shape
    (3, 2)
    """
    if target != "cpu":
        raise NeoFlowError(f"target {target!r}: only 'cpu' is supported; the GPU backend is "
                           "not available yet")
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    inputs = _check_signature(outs, inputs)
    computed = _computed(outs)
    kernels, fused = _partition(computed, fusion)
    chosen = _configs_for(kernels, configs, best_configs(kernels, target, database))
    program = lower_program(kernels, chosen, inputs, fused)
    source = generate_c(program)
    library = compile_c(source, sanitize=sanitize)
    return BuiltFunction(outs, single, inputs, fused, kernels, chosen, program, source,
                         library, database, originals=computed)


def plan_kernels(outputs, inputs, fusion=True):
    """(kernels, single): the kernels `nf.build(outputs, inputs, fusion=fusion)`
    runs, in order, after the same checks; `single` if `outputs` is one Tensor.

    >>> kernels, single = plan_kernels(B, [A]); kernels, single
    ([<Kernel B>], True)
    """
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    _check_signature(outs, inputs)
    return _partition(_computed(outs), fusion)[0], single


def _partition(computed, fusion):
    """(kernels, the computed tensors as rebuilt by fusion, in the same order)."""
    part = fuse(computed, fusion=fusion)
    return kernels_of(part, fusion), list(part.outputs)


def _computed(outs):
    """The computed tensors among `outs`, each once, in order."""
    computed = []
    for t in outs:
        if t.is_compute and all(t is not c for c in computed):
            computed.append(t)
    return computed


def _check_signature(outs, inputs):
    for t in outs:
        if not isinstance(t, Tensor):
            raise NeoFlowError(f"nf.build: outputs must be Tensors, got {t!r}")
    if isinstance(inputs, Tensor) or not isinstance(inputs, (list, tuple)):
        raise NeoFlowError("nf.build: inputs must be a list of placeholder/parameter tensors "
                           f"in call order, got {inputs!r}")
    seen = set()
    for t in inputs:
        if not isinstance(t, Tensor):
            raise NeoFlowError(f"nf.build: inputs must be Tensors, got {t!r}")
        if t.is_compute:
            raise NeoFlowError(f"nf.build: input '{t.name}' is a computed tensor; inputs are "
                               "placeholders or parameters")
        if id(t) in seen:
            raise NeoFlowError(f"nf.build: input '{t.name}' is listed twice")
        seen.add(id(t))
    for t in topo_tensors(outs):
        if not t.is_compute and id(t) not in seen:
            raise InputError(f"nf.build: the outputs read '{t.name}' {t.shape} {t.dtype}, "
                             "which is not among the inputs; add it to the inputs list")
    return list(inputs)


def _configs_for(kernels, configs, tuned):
    """Per kernel: the config given, else the tuned one, else the default."""
    if configs is None:
        given = [None] * len(kernels)
    elif isinstance(configs, Config):
        if len(kernels) != 1:
            raise NeoFlowError(f"nf.build: one Config given but the outputs make "
                               f"{len(kernels)} kernels; pass a list or a dict keyed by "
                               "kernel key")
        given = [configs]
    elif isinstance(configs, dict):
        given = [configs.get(k.key) for k in kernels]
    else:
        given = list(configs)
        if len(given) != len(kernels):
            raise NeoFlowError(f"nf.build: {len(given)} configs given for {len(kernels)} "
                               "kernels")
    return [c if c is not None else t if t is not None else default_config(k)
            for c, t, k in zip(given, tuned, kernels)]


def address(array):
    """The address of a C-contiguous `array`'s data: through the buffer protocol
    (half a microsecond), else -- read-only or empty -- through `array.ctypes`
    (three).

    >>> a = np.zeros(3, np.float32); address(a) == a.ctypes.data
    True
    """
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError):
        return array.ctypes.data


class BuiltFunction:
    """A compiled computation: call it with arrays for the inputs, in order.

    `source` is the generated C; `kernels` and `configs` say how it was cut
    and scheduled; `database` is what `nf.build` was given. `computed` are
    the tensors the kernels write back; `originals` (default: `computed`)
    the tensors they stand for (before fusion rebuilt them), same order.

    >>> f = nf.build(B, [A]); print(f.source[:40])    # doctest: +SKIP
    """

    def __init__(self, outputs, single, inputs, computed, kernels, configs, program, source,
                 library, database, originals=None):
        self.outputs, self.inputs = outputs, inputs
        self.kernels, self.configs = kernels, configs
        self.source, self.library, self.database = source, library, database
        self._single, self._computed, self._sites = single, computed, program.sites
        self._originals = computed if originals is None else originals
        self._entry = library.get(ENTRY, [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int64)
        self._results = [(t.shape, dt.to_numpy(t.dtype)) for t in computed]
        self._pointer_array = ctypes.c_void_p * (len(inputs) + len(computed))
        self._handout = self._handout_plan()
        self._plain = self._handout == [(0, n, False) for n in range(len(computed))]

    def __repr__(self):
        names = ", ".join(t.name for t in self.inputs)
        return f"<BuiltFunction ({names}) -> {len(self.outputs)} output(s), " \
               f"{len(self.kernels)} kernel(s)>"

    def __call__(self, *args):
        if len(args) != len(self.inputs):
            names = ", ".join(f"'{t.name}'" for t in self.inputs)
            raise InputError(f"expected {len(self.inputs)} input(s) ({names}), got {len(args)}")
        arrays = [as_input_array(t, a) for t, a in zip(self.inputs, args)]
        results = [np.empty(shape, dtype) for shape, dtype in self._results]
        pointers = self._pointer_array(*map(address, arrays), *map(address, results))
        err = (ctypes.c_int64 * 2)()
        self._entry(pointers, err)
        if err[0] != 0:
            self._raise(err[0], err[1])
        if self._plain:                     # each output a fresh result, in order
            return results[0] if self._single else tuple(results)
        pools = (results, arrays)
        outs = [pools[pool][n].copy() if copy else pools[pool][n]
                for pool, n, copy in self._handout]
        return outs[0] if self._single else tuple(outs)

    def _handout_plan(self):
        """Per output: (0 for a result / 1 for an input, its index, whether to
        copy it) -- a tensor asked twice, or an input asked back, is a copy."""
        where = {id(t): (1, n) for n, t in enumerate(self.inputs)}
        where.update({id(t): (0, n) for n, t in enumerate(self._originals)})
        where.update({id(t): (0, n) for n, t in enumerate(self._computed)})
        handed, plan = set(), []
        for t in self.outputs:
            fresh = t.is_compute and id(t) not in handed
            handed.add(id(t))
            plan.append(where[id(t)] + (not fresh,))
        return plan

    def _raise(self, code, index):
        if code < 0:
            raise MemoryError("a NeoFlow kernel could not allocate its temporary buffers")
        site = self._sites[code - 1]
        raise OutOfBoundsError(
            f"compute '{site.stage}' reads tensor '{site.tensor}' at index {index} in "
            f"dimension {site.dim}, outside its size {site.size}")
