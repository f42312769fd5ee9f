"""The native execution backend: the training step as generated C over the
planned buffers, one native call per step, with kernels that can be
replaced between steps.

Every kernel output is passed in as an argument (none is a temporary of the
generated entry), so the buffer plan decides every address: arena memory is
reused across kernels and in-place updates receive their target's buffer as
output. The kernels, each under the best schedule the tuning database
knows for it (else the default), are shared out among a few C files of
about equal size (twice as many as cores: one compiler subprocess each, all
at once from a thread pool, started in the background as soon as the C is
printed -- the first step, profile or swap waits for them, so the trainer's
own work until then overlaps them); the step entry (`generate_entry`) calls kernel
n through entry n of the step's own kernel table (passed in after the
buffers, so steps whose entry C is the same, one library in the process,
still run their own kernels), into which the address of kernel n's code --
read from the table of the library that holds it -- is written. Each
kernel's constant offsets into its arguments are passed with the pointers
(`rebased`), so an unrolled recurrence's steps, which differ only in the
row of a tensor they read, print the same C; kernels whose C is the same
are compiled once and share that address (`shared_kernels`).

Quick start (`quick=True`, the Trainer's `quick_start=True`): a translation unit
whose optimised library is not in the disk cache yet is first built quick
(toolchain's quick=True: -O1, no unrolling, about a third of the compile
time; slower code, the same schedule), so the first step runs sooner --
except for hot kernels (at least HOT_ITERATIONS innermost iterations), which
are shared out into translation units of their own and built optimised at
once, since a quick build of them costs the first steps more than it saves
(MI-LSTM's dense layers ran 4-8x slower quick). The second step runs
kernel by kernel, timed; then each kernel on a quick build is compiled
optimised on its own, the slowest first, one at a time in a background
thread, and takes its table entry between two steps when it is done
(`NativeStep.upgrading` until the last), so most of the step's time is on
optimised code within a compile or two. The quick build contracts the same
multiply-adds but calls glibc's scalar exp, log and tanh where the optimised
one vectorises them (libmvec), so the steps run on quick kernels can differ
from the optimised ones' in the last bits of float32; which steps those are
depends on how fast the compiler is. The step entry itself is always the
quick build (it only calls the kernels through the table).

Hot swap: `NativeStep.prepare(n, config)` (any thread) compiles kernel n
under another schedule into a library of its own (the source the tuner
measured, rebased by kernel n's offsets) with the same parameters;
`NativeStep.swap(candidate)` (the training thread, between two steps)
writes its address into the table. Loaded libraries are never unloaded
(build.library keeps them), so every address the table ever held stays
valid. `NativeStep.profile()` runs one step kernel by kernel and times each.

Hands on: a step program and forward functions for the executor.
"""
import ctypes
import os
import queue
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .function import BuiltFunction
from ..toolchain import CompiledLibrary, cached_c, compile_c
from ..toolchain.compiler import compile_flags, find_compiler
from ..codegen.c import ENTRY, TABLE, generate_c, generate_entry
from ..codegen.c.printer import kernel_c
from ..graph.plan import grouped_kernels
from ..schedule import default_config, lower_program
from ..schedule.loop_ir import Program, iterations
from ..schedule.lower import lower_kernel
from ..schedule.rebase import argument_offsets, rebase
from ..tune.database import best_configs

# Innermost iterations from which a kernel is hot: built optimised at once
# under quick start (MI-LSTM's dense layers run 2-17e8; LeNet's and SC-RNN's
# largest kernels 1e7 to 5e7, whose optimised builds are what a quick start saves)
HOT_ITERATIONS = 1 << 26


def compile_kernels(kernels, inputs, outputs, computed, configs):
    """A BuiltFunction running `kernels` (scheduled by `configs`) with every
    tensor in `computed` passed in."""
    program = lower_program(kernels, configs, inputs, computed)
    source = generate_c(program)
    return BuiltFunction(outputs, False, inputs, computed, kernels, configs, program, source,
                         compile_c(source), None)


def compile_sources(sources, jobs=None, build=compile_c):
    """Compile C `sources` at once (`jobs` compilers, default one per core);
    what `build` gives for each (the loaded library), in order. Equal
    sources are compiled once.

    >>> a, b = compile_sources(["int f(void) { return 1; }", "int g(void) { return 2; }"])
    """
    unique = list(dict.fromkeys(sources))
    workers = max(1, min(len(unique), jobs or os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        built = dict(zip(unique, pool.map(build, unique)))
    return [built[s] for s in sources]


def start_compile(sources, jobs=None, build=compile_c):
    """`compile_sources(sources, jobs, build)` started in a thread of its own;
    the compiler and its flags are settled first, here, so a missing compiler
    is reported at once. Hand the result to `await_libraries`.

    >>> libraries = await_libraries(start_compile(["int f(void) { return 1; }"]))
    """
    compile_flags(find_compiler(), openmp=True, sanitize=False)
    pool = ThreadPoolExecutor(1, thread_name_prefix="neoflow-compile")
    pending = pool.submit(compile_sources, sources, jobs, build)
    pool.shutdown(wait=False)
    return pending


def quick_build(source, alone=(), compile=compile_c):
    """`(library, quick)`: the optimised library of `source` where the disk
    cache has it (quick False); else, where it has the optimised library of
    every kernel of `source` on its own (`alone`: a callable giving their
    sources, as an upgrade compiles them), the list of those (False); else a
    quick build of `source` (True), by `compile`.

    >>> library, quick = quick_build("int f(void) { return 1; }")
    """
    library = cached_c(source)
    if library is not None:
        return library, False
    if alone:
        each = [cached_c(s) for s in alone()]
        if all(each):
            return each, False
    return compile(source, quick=True), True


def _libgomp():
    """GCC's OpenMP runtime, which the kernels link, or None (another compiler's)."""
    try:
        return ctypes.CDLL("libgomp.so.1")
    except OSError:
        return None


_GOMP = _libgomp()


def set_threads(count):
    """Run this thread's later parallel kernels on `count` OpenMP threads;
    returns the count before (None where GCC's OpenMP runtime is not loaded)."""
    if _GOMP is None:
        return None
    before = _GOMP.omp_get_max_threads()
    _GOMP.omp_set_num_threads(count)
    return before


class Upgrade:
    """Compiles `work` ([(key, C source)], in order) optimised, one at a
    time in a daemon thread, so training goes on meanwhile and an exiting
    process does not wait for it; `done()` hands on `(key, library or the
    exception raised)` for each finished since the last call. `cancel()`
    starts no further compile.

    >>> upgrade = Upgrade([("k", source)]); upgrade.done()      # doctest: +SKIP
    []
    """

    def __init__(self, work):
        self.left = len(work)
        self._finished, self._stop = queue.SimpleQueue(), threading.Event()
        threading.Thread(target=self._run, args=(work,), name="neoflow-upgrade",
                         daemon=True).start()

    def _run(self, work):
        for key, source in work:
            if self._stop.is_set():
                return
            try:
                self._finished.put((key, compile_c(source)))
            except Exception as e:   # (the quick build of the same source worked)
                self._finished.put((key, e))

    def done(self):
        out = []
        while not self._finished.empty():
            out.append(self._finished.get())
        self.left -= len(out)
        return out

    def cancel(self):
        self._stop.set()


def await_libraries(pending):
    """The loaded libraries of a `start_compile`, in order (waits for the
    compilers; raises what they raised)."""
    return pending.result()


def kernels_source(funcs, aliased):
    """The C of lowered kernels `funcs` together (table entry j is funcs[j]);
    `aliased[j]`: kernel j's inputs and outputs may overlap (no `restrict`).

    >>> src = kernels_source([lower_kernel(k, default_config(k), [])], [False])  # doctest: +SKIP
    """
    program = Program(funcs, [f.inputs + f.outputs for f in funcs],
                      [b for f in funcs for b in f.inputs], [b for f in funcs for b in f.outputs],
                      [], [])
    return generate_c(program, {j for j, a in enumerate(aliased) if a})


def share_out(sizes, count):
    """Indices 0..len(sizes)-1 in `count` groups of about equal summed size
    (largest first into the lightest group), each in order; no empty group.

    >>> share_out([5, 1, 1, 3], 2)
    [[0], [1, 2, 3]]
    """
    groups, loads = [[] for _ in range(count)], [0] * count
    for n in sorted(range(len(sizes)), key=lambda n: -sizes[n]):
        g = loads.index(min(loads))
        groups[g].append(n)
        loads[g] += sizes[n]
    return [sorted(g) for g in groups if g]


def translation_units(sizes, sides, count):
    """The kernels (by index, sizes in `sizes`) in translation units, those of
    each side (`sides[n]`, e.g. whether kernel n is an optimizer's update)
    shared out on their own, so a change to one side leaves the other's
    sources -- and their compiled, cached libraries -- as they were (SGD ->
    Adam recompiles no forward or backward kernel).

    >>> translation_units([5, 1, 1, 3], [0, 0, 0, 1], 2)
    [[0], [1, 2], [3]]
    """
    out = []
    for side in dict.fromkeys(sides):
        members = [n for n in range(len(sizes)) if sides[n] == side]
        out += [[members[j] for j in g] for g in share_out([sizes[n] for n in members], count)]
    return out


def shared_kernels(texts, sides):
    """Per kernel, the index of the kernel whose compiled code it runs: the
    first whose C (`texts[n]`, `kernel_c` of its lowered code) is the same,
    on the same side (`sides[n]`: say, whether it is an update). Equal text
    is equal code, so a checked read (its site numbered program-wide) keeps
    its kernel apart. An unrolled recurrence repeats its step's kernels once
    their offsets into the tensors that hold every step are arguments
    (`rebased`): LLTM's 29 kernels compile as 12.

    >>> shared_kernels(["a", "b", "a", "a"], [False, False, False, True])
    [0, 1, 0, 3]
    """
    first = {}
    return [first.setdefault((text, side), n) for n, (text, side) in enumerate(zip(texts, sides))]


def rebased(program):
    """`program` with each kernel's constant offsets into its arguments
    passed in with the pointers (`Program.offsets`), so kernels that differ
    only in them (step t of a recurrence reading row t) print the same C."""
    for n, func in enumerate(program.kernels):
        program.offsets[n] = list(argument_offsets(func))
        program.kernels[n] = rebase(func, program.offsets[n])
    return program


@dataclass
class Candidate:
    """Kernel `index` compiled under `config` (entry `slot` of `library`'s
    kernel table), ready to be swapped in.

    >>> candidate = step.prepare(3, config); step.swap(candidate)   # doctest: +SKIP
    """
    index: int
    config: object
    library: CompiledLibrary
    slot: int = 0


class NativeBackend:
    """Runs kernels as generated C, each under its schedule in `tuned`
    ({kernel key: Config}), else the best the tuning database knows
    (`database`: as for `best_configs`; False for none), else the default.

    >>> step = NativeBackend().program(kernels, views)       # doctest: +SKIP
    >>> step()                                               # doctest: +SKIP
    """

    name = "native"

    def __init__(self, target="cpu", database=None, jobs=None, tuned=None, quick=False):
        self.target, self.database, self.jobs = target, database, jobs
        self.tuned = dict(tuned or {})
        self.quick = quick

    def found(self, kernels):
        """Per kernel: its Config from `tuned` or the database, else None."""
        stored = best_configs(kernels, self.target, self.database)
        return [self.tuned.get(k.key) or c for k, c in zip(kernels, stored)]

    def program(self, kernels, views, apart=()):
        """A NativeStep running `kernels` in order over `views` ({id(tensor): ndarray});
        the kernels numbered in `apart` (the optimizer's) get translation units
        of their own."""
        return NativeStep(kernels, views, self.found(kernels), self.jobs, apart, self.quick)

    def function(self, outputs, inputs):
        """A callable(*arrays) -> tuple of fresh arrays computing `outputs`: their
        computes (already fused by the caller: the Trainer's graph, a scan's
        segments and steps) grouped into multi-stage kernels as nf.build
        groups them (graph.plan.grouped_kernels)."""
        computed, kernels = grouped_kernels(outputs)
        configs = [c or default_config(k) for c, k in zip(self.found(kernels), kernels)]
        return compile_kernels(kernels, list(inputs), list(outputs), computed, configs)


class NativeStep:
    """The compiled step: calling it runs every kernel once (one native call).

    `found[n]` is kernel n's Config from the database, or None (default
    schedule); `configs` holds the schedule each kernel runs now and
    `from_database` which came from the database. `quick`: start on quick
    builds where the optimised ones are not cached (the module's "Quick
    start"); `upgrading` is true until the optimised ones run.

    >>> step = NativeStep(kernels, views, [None] * len(kernels))  # doctest: +SKIP
    >>> step(); step.configs[0]                                   # doctest: +SKIP
    """

    def __init__(self, kernels, views, found, jobs=None, apart=(), quick=False):
        self.kernels = list(kernels)
        self.configs = [c or default_config(k) for c, k in zip(found, kernels)]
        self.from_database = [c is not None for c in found]
        produced = {id(t) for k in kernels for t in k.outputs}
        leaves, seen = [], set()
        for k in kernels:
            for t in k.inputs:
                if id(t) not in produced and id(t) not in seen:
                    seen.add(id(t))
                    leaves.append(t)
        outputs = [t for k in kernels for t in k.outputs]
        self._aliased = [any(np.may_share_memory(views[id(a)], views[id(b)])
                             for a in k.inputs for b in k.outputs) for k in kernels]
        program = rebased(lower_program(kernels, self.configs, leaves, outputs))
        self._sites_lock = threading.Lock()   # candidates number their checked reads in turn
        self._program = program
        updates = set(apart)
        texts = [kernel_c(f, not a) for f, a in zip(program.kernels, self._aliased)]
        same = shared_kernels(texts, [n in updates for n in range(len(kernels))])
        unique = [n for n, m in enumerate(same) if m == n]    # each compiled once
        hot = {n for n in unique if quick and iterations(program.kernels[n].body) >= HOT_ITERATIONS}
        groups = translation_units([len(texts[n]) for n in unique],
                                   [(n in updates, n in hot) for n in unique],
                                   2 * (jobs or os.cpu_count() or 1))
        groups = [[unique[j] for j in g] for g in groups]
        sources = [kernels_source([program.kernels[n] for n in g], [self._aliased[n] for n in g])
                   for g in groups]
        entry_source = generate_entry(program)
        at_once = {s for s, g in zip(sources, groups) if g[0] in hot}
        members = dict(zip(sources, groups))

        compile = compile_c   # (bound here: the compiles this constructor starts, done later)

        def first_build(source):   # (the entry too: quick where the kernels may be)
            if not quick or source in at_once:
                return compile(source), False
            group = members.get(source, ())
            return quick_build(source, group and (lambda: [self._alone(n) for n in group]),
                               compile)
        self._pending = start_compile(sources + [entry_source], jobs, first_build)
        self._build = (groups, same, leaves, outputs, entry_source)
        # (the quick builds by id, held so no later library takes an id of theirs)
        self._upgrade, self._quick, self._upgraded = None, {}, False
        self._threads = None     # OpenMP's thread count while an upgrade holds it at one
        self._table = (ctypes.c_void_p * max(1, len(kernels)))()   # this step's own
        self._pointers = (ctypes.c_void_p * (len(leaves) + len(outputs) + 1))(
            *[views[id(t)].ctypes.data for t in leaves + outputs], ctypes.addressof(self._table))
        self._args = [[ctypes.c_void_p(views[id(t)].ctypes.data + off * views[id(t)].itemsize)
                       for t, off in zip(k.inputs + k.outputs, program.offsets[n])]
                      for n, k in enumerate(kernels)]
        self._err = (ctypes.c_int64 * 2)()
        self._leaf_views = {t.name: views[id(t)] for t in leaves}
        self._calls = [None] * len(kernels)
        self._running = [None] * len(kernels)   # the Candidate each table entry points into

    def _finish(self):
        """Wait for the compilers started in __init__ and fill the kernel table
        (on the first step, profile or swap: the caller's work until then --
        the trainer's parameter initialisation, the first batch -- ran
        while they compiled)."""
        built = await_libraries(self._pending)
        groups, same, leaves, outputs, entry_source = self._build
        libraries = [library for library, _ in built]
        entry_library = libraries.pop()
        self._errors = BuiltFunction(outputs, False, leaves, outputs, self.kernels, self.configs,
                                     self._program, entry_source, entry_library, None)
        self._entry = entry_library.get(ENTRY, [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int64)
        self._pending = self._build = None
        for group, library in zip(groups, libraries):
            for slot, n in enumerate(group):   # (a list: each kernel's own, from an upgrade)
                self._install(Candidate(n, self.configs[n], library[slot], 0)
                              if isinstance(library, list) else
                              Candidate(n, self.configs[n], library, slot))
        for n, m in enumerate(same):
            if m != n:
                self._install(Candidate(n, self.configs[n], self._running[m].library,
                                        self._running[m].slot))
        self._quick = {id(library): library for library, quick in built[:-1] if quick}

    @property
    def upgrading(self):
        """Whether kernels still run quick builds with optimised ones to come."""
        return bool(self._quick) and not self._upgraded

    def quick_kernels(self):
        """How many kernels run a quick build now."""
        return sum(id(c.library) in self._quick for c in self._running if c is not None)

    def _start_upgrade(self, seconds):
        """Compile each kernel that runs a quick build optimised, on its own
        (the code it shares with others once), the slowest first by
        `seconds` (per kernel, of a timed step)."""
        shared = {}   # (quick library, slot) -> [kernels running it, their seconds]
        for n, running in enumerate(self._running):
            if id(running.library) in self._quick:
                entry = shared.setdefault((id(running.library), running.slot), [n, 0.0])
                entry[1] += seconds[n]
        order = sorted(shared.items(), key=lambda item: -item[1][1])
        self._upgrade = Upgrade([(key, self._alone(n)) for key, (n, _) in order])
        self._threads = set_threads(1)   # (the compiler takes a core: no barrier waits on it)

    def _alone(self, n):
        """The C of kernel n on its own (what an upgrade compiles)."""
        return kernels_source([self._program.kernels[n]], [self._aliased[n]])

    def _take_upgrades(self):
        """Install the optimised builds compiled since the last step in the
        table entries that still run their quick build (a kernel the tuner
        swapped meanwhile keeps its schedule)."""
        for key, library in self._upgrade.done():
            if isinstance(library, Exception):
                warnings.warn("NeoFlow: an optimised build failed; its kernel keeps running "
                              f"its quick build: {library}", RuntimeWarning, stacklevel=3)
                continue
            for n, running in enumerate(self._running):
                if (id(running.library), running.slot) == key:
                    self._install(Candidate(n, running.config, library, 0))
        if not self._upgrade.left:
            self._upgrade, self._upgraded = None, True
            self._restore_threads()
            running = {id(c.library) for c in self._running}   # (a failed upgrade's stay)
            self._quick = {k: v for k, v in self._quick.items() if k in running}

    def _settle(self):
        """Finish the first build, or take the upgrades done (before a step)."""
        if self._pending is not None:
            self._finish()
        elif self._upgrade is not None:
            self._take_upgrades()

    def cancel_upgrade(self):
        """Start no further optimised compile (the kernels not upgraded yet
        keep their quick builds) and give the steps their OpenMP threads back."""
        if self._upgrade is not None:
            self._upgrade.cancel()
        self._restore_threads()

    def _restore_threads(self):
        """Give the steps back the OpenMP threads an upgrade took."""
        if self._threads is not None:
            set_threads(self._threads)
            self._threads = None

    def __call__(self):
        """Run one step (the one after a quick start's first: kernel by
        kernel, timed, to order the upgrade)."""
        if self._pending is None and self._upgrade is None and self.upgrading:
            self.profile()
            return
        self._settle()
        if self._entry(self._pointers, self._err):
            self._raise()

    def profile(self):
        """Run one step kernel by kernel; the seconds each kernel took, in order.

        >>> seconds = step.profile()             # doctest: +SKIP
        """
        self._settle()
        err, times = self._err, []
        for call, args in zip(self._calls, self._args):
            t0 = time.perf_counter()
            call(*args, err)
            times.append(time.perf_counter() - t0)
            if err[0]:
                self._raise()
        if self.upgrading and self._upgrade is None:
            self._start_upgrade(times)
        return times

    def prepare(self, index, config):
        """Kernel `index` compiled under `config` (a Candidate for `swap`);
        safe to call from any thread while steps run.

        >>> candidate = step.prepare(0, sample_config(step.kernels[0], 1))   # doctest: +SKIP
        """
        with self._sites_lock:
            func = lower_kernel(self.kernels[index], config, self._program.sites)
        func = rebase(func, self._program.offsets[index])
        return Candidate(index, config, compile_c(kernels_source([func], [self._aliased[index]])))

    def swap(self, candidate):
        """Run `candidate` from the next step on; returns the Candidate it
        replaces (swap that back to undo). Call it between steps, from the
        thread that runs them.

        >>> old = step.swap(step.prepare(0, config))   # doctest: +SKIP
        """
        if self._pending is not None:
            self._finish()
        old = self._running[candidate.index]
        self._install(candidate)
        self.from_database[candidate.index] = False
        return old

    def _install(self, candidate):
        n, slot = candidate.index, candidate.slot
        address = candidate.library.array(TABLE, ctypes.c_void_p, slot + 1)[slot]
        arity = len(self._args[n]) + 1
        self._calls[n] = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * arity)(address)
        self._running[n] = candidate       # keeps its library loaded while in the table
        self.configs[n] = candidate.config
        self._table[n] = address

    def _raise(self):
        code, index = self._err[0], self._err[1]
        self._err[0] = self._err[1] = 0
        self._errors._raise(code, index, self._leaf_views)  # as nf.build's functions raise
