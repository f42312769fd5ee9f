"""runtime/function: a compiled computation as a Python callable -- checks
its arrays (te/feed.py), allocates fresh outputs, runs the generated entry
point and turns a reported error into a NeoFlowError naming the user's
compute.

Hands on: `BuiltFunction` (what `nf.build` returns; the runtime's forward
functions).
"""
import ctypes

import numpy as np

from ..codegen.c import ENTRY
from ..errors import InputError, OutOfBoundsError
from ..te import dtype as dt
from ..te.feed import as_input_array
from ..te.random import fresh_seed, state_feed


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
    `randoms` are the state leaves of the random tensors the outputs read
    (te/random.py): the program takes them after `inputs`, and each call
    writes them -- from `seed=` (counter 0), else from the function's own
    seed and its call number, so every call without `seed=` draws afresh.

    >>> f = nf.build(B, [A]); print(f.source[:40])    # doctest: +SKIP
    """

    def __init__(self, outputs, single, inputs, computed, kernels, configs, program, source,
                 library, database, originals=None, randoms=()):
        self.outputs, self.inputs = outputs, inputs
        self._randoms, self._calls = list(randoms), 0
        self._seed = fresh_seed() if self._randoms else 0
        self.kernels, self.configs = kernels, configs
        self.source, self.library, self.database = source, library, database
        self._single, self._computed, self._sites = single, computed, program.sites
        self._originals = computed if originals is None else originals
        self._entry = library.get(ENTRY, [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int64)
        self._results = [(t.shape, dt.to_numpy(t.dtype)) for t in computed]
        self._pointer_array = ctypes.c_void_p * (len(inputs) + len(self._randoms) +
                                                 len(computed))
        self._handout = self._handout_plan()
        self._plain = self._handout == [(0, n, False) for n in range(len(computed))]

    def __repr__(self):
        names = ", ".join(t.name for t in self.inputs)
        return f"<BuiltFunction ({names}) -> {len(self.outputs)} output(s), " \
               f"{len(self.kernels)} kernel(s)>"

    def __call__(self, *args, seed=None):
        if len(args) != len(self.inputs):
            names = ", ".join(f"'{t.name}'" for t in self.inputs)
            raise InputError(f"expected {len(self.inputs)} input(s) ({names}), got {len(args)}")
        arrays = [as_input_array(t, a) for t, a in zip(self.inputs, args)]
        if self._randoms:
            arrays += self._random_arrays(seed)
        results = [np.empty(shape, dtype) for shape, dtype in self._results]
        pointers = self._pointer_array(*map(address, arrays), *map(address, results))
        err = (ctypes.c_int64 * 2)()
        self._entry(pointers, err)
        if err[0] != 0:
            self._raise(err[0], err[1], {t.name: a for t, a in zip(self.inputs, arrays)})
        if self._plain:                     # each output a fresh result, in order
            return results[0] if self._single else tuple(results)
        pools = (results, arrays)
        outs = [pools[pool][n].copy() if copy else pools[pool][n]
                for pool, n, copy in self._handout]
        return outs[0] if self._single else tuple(outs)

    def _random_arrays(self, seed):
        """The state of each random tensor for this call (te/random.py)."""
        if seed is None:
            self._calls += 1
            seed, counter = self._seed, self._calls
        else:
            counter = 0
        feed = state_feed(self._randoms, seed, counter)
        return [feed[id(t)] for t in self._randoms]

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

    def _raise(self, code, index, arrays=None):
        """Raise the error the kernels reported; `arrays` ({input name: array})
        let a gathered index name where in its tensor it came from."""
        if code < 0:
            raise MemoryError("a NeoFlow kernel could not allocate its temporary buffers")
        site = self._sites[code - 1]
        who = f"compute '{site.stage}'"
        if site.computes:        # the read came from a compute fused into this stage
            names = " or ".join(f"'{n}'" for n in site.computes)
            who = f"compute {names} (fused into '{site.stage}')"
        raise OutOfBoundsError(
            f"{who} reads tensor '{site.tensor}' at index {index} in "
            f"dimension {site.dim}, outside its size {site.size}"
            + _gathered_from(site, index, arrays or {}))


INDEX_ROLES = {"cross_entropy": "label", "nll_loss": "label", "embedding": "index"}


def _gathered_from(site, index, arrays):
    """': label 3 at batch position 5 is outside [0, 3)' -- where in the integer
    input the bad index came from (its first occurrence), or ''."""
    values = arrays.get(site.index_tensor)
    if values is None:
        return ""
    found = np.argwhere(np.asarray(values) == index)
    if not len(found):
        return ""
    at = tuple(int(v) for v in found[0])
    where = f"batch position {at[0]}" if len(at) == 1 else f"position {at}"
    role = next((r for name in (site.stage,) + site.computes
                 for op, r in INDEX_ROLES.items() if name.startswith(op)), "index value")
    return (f": {role} {index} at {where} of '{site.index_tensor}' is outside "
            f"[0, {site.size})")
