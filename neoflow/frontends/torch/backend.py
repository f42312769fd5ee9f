"""frontends/torch/backend: `torch.compile(model, backend="neoflow")`.

Dynamo's graph goes through aot_autograd (functionalised ATen graphs for
the forward, the backward and inference). In each ATen graph every node
whose op has an entry in the lowering table, and whose lowering succeeds on
the node's concrete shapes, is supported; torch's CapabilityBasedPartitioner
groups the supported nodes into partitions; each partition is lowered to
te (lowering.TABLE) and built with `nf.build` (fusion, schedules, tuning
database), and its call in the graph becomes a call of the built function.
Everything else runs in PyTorch, unchanged. Found by torch through the
`torch_dynamo_backends` entry point (pyproject.toml): never registered here.

Hands on: `neoflow_backend` (the backend callable) and the records
`report.report` reads.
"""
import operator
import threading
from collections import Counter

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from ...api import build
from ...errors import NeoFlowError
from ...te import compute, placeholder
from ...te.tensor import Tensor
from .convert import te_dtype, to_array, to_torch
from .direct import Direct, flat_span
from .lowering import DECOMPOSITIONS, TABLE, VIEWS, Context, Unsupported, folded_operands
from .report import CompiledModel, GraphRecord, node_flops, op_name

_TUNING = ("off", "background", "ahead")
_FALLBACK = ("eager", "error")


class Options:
    """The backend's options= (see docs/torch.md)."""

    def __init__(self, options):
        options = dict(options or {})
        unknown = sorted(set(options) - {"tuning", "fallback", "database", "trials"})
        if unknown:
            raise NeoFlowError(f"backend 'neoflow': unknown option(s) {unknown}; known: "
                               "tuning, fallback, database, trials")
        self.tuning = options.get("tuning", "off")
        self.fallback = options.get("fallback", "eager")
        self.database = options.get("database")
        self.trials = options.get("trials", 32)
        if self.tuning not in _TUNING:
            raise NeoFlowError(f"backend 'neoflow': tuning={self.tuning!r}; expected one of "
                               f"{', '.join(_TUNING)}")
        if self.fallback not in _FALLBACK:
            raise NeoFlowError(f"backend 'neoflow': fallback={self.fallback!r}; expected one "
                               f"of {', '.join(_FALLBACK)}")


def neoflow_backend(gm, example_inputs, options=None):
    """The `torch.compile` backend: training and inference through aot_autograd,
    supported ATen ops compiled by NeoFlow, the rest run by PyTorch.

    >>> model = torch.compile(model, backend="neoflow", options={"tuning": "off"})
    """
    opts = Options(options)
    record = CompiledModel(gm, example_inputs)

    def compiler(kind):
        def compile_graph(fx, inputs):
            return make_boxed_func(lower_graph(fx, kind, opts, record))
        return compile_graph

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                        inference_compiler=compiler("inference"),
                        partition_fn=min_cut_rematerialization_partition,
                        decompositions=DECOMPOSITIONS)(gm, example_inputs)


# --- which nodes lower ---------------------------------------------------------------------
def _fake(value):
    """A node argument's fake value (fx nodes replaced by their meta['val'])."""
    return torch.fx.node.map_arg(value, lambda n: n.meta.get("val"))


def _static_tensor(v):
    return isinstance(v, torch.Tensor) and all(isinstance(s, int) for s in v.shape) and \
        v.device.type == "cpu" and v.numel() > 0


def _empty(v):
    """Whether `v` is an empty CPU tensor of static shape (batch norm's unused saves)."""
    return isinstance(v, torch.Tensor) and all(isinstance(s, int) for s in v.shape) and \
        v.device.type == "cpu" and v.numel() == 0


def _stand_in(v, name):
    """A te placeholder standing for fake tensor `v` (Unsupported if it cannot)."""
    if not _static_tensor(v):
        raise Unsupported(f"{name}: symbolic, empty or non-CPU tensor")
    return placeholder(tuple(v.shape), te_dtype(v.dtype, name), name=name)


def lower_node(node, env):
    """The te result of call_function `node`, its tensor arguments read from
    `env` {fx node: te value}; checked against the node's fake result."""
    if node.target is operator.getitem:
        src, index = node.args
        value = env[src][index]
        if value is None:
            raise Unsupported("getitem of an output the lowering does not make")
        return value
    entry = TABLE.get(node.target)
    if entry is None:
        raise Unsupported(f"no lowering for {op_name(node.target)}")
    out = node.meta.get("val")
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if not all(o is None or _static_tensor(o) or _empty(o) for o in outs) or \
            all(o is None or _empty(o) for o in outs):
        raise Unsupported("symbolic, empty or non-CPU result")
    args = torch.fx.node.map_arg(node.args, lambda n: env[n])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
    fold = frozenset(id(env[n]) for n in folded_operands(node)
                     if isinstance(env.get(n), Tensor) and env[n].is_compute)
    result = entry(Context(out, _fake(node.args), node.name, fold), *args, **kwargs)
    results = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    if len(results) != len(outs):
        raise Unsupported(f"lowering made {len(results)} results for {len(outs)}")
    for r, o in zip(results, outs):
        if o is None or (_empty(o) and r is None):       # an empty result is not made
            continue
        if not isinstance(r, Tensor) or tuple(r.shape) != tuple(o.shape) or \
                r.dtype != te_dtype(o.dtype, node.name):
            raise Unsupported(f"lowering made {r!r}, expected {tuple(o.shape)} {o.dtype}")
    return result


def _check_node(node):
    """None if `node` lowers on its own (its inputs as placeholders), else why not."""
    if node.op != "call_function":
        return "not an op"
    env = {}
    try:
        for n in node.all_input_nodes:
            if n.target is operator.getitem or isinstance(n.meta.get("val"), (tuple, list)):
                vals = n.meta.get("val")
                env[n] = tuple(None if v is None or _empty(v) else _stand_in(v, f"{n.name}_{k}")
                               for k, v in enumerate(vals)) \
                    if isinstance(vals, (tuple, list)) else _stand_in(vals, n.name)
            else:
                env[n] = _stand_in(n.meta.get("val"), n.name)
        lower_node(node, env)
    except NeoFlowError as e:
        return str(e)
    except (TypeError, ValueError, IndexError, KeyError, AttributeError, ZeroDivisionError) as e:
        return f"{type(e).__name__}: {e}"
    return None


class _Support(OperatorSupportBase):
    def __init__(self, reasons):
        self.reasons = reasons

    def is_node_supported(self, submodules, node):
        return node.op == "call_function" and self.reasons.get(node) is None


# --- views leaving NeoFlow are taken in PyTorch -----------------------------------------------
TORCH_VIEW = "a view of a NeoFlow result or an input (or an empty tensor), made in PyTorch " \
    "at no cost"
_SPLITS = frozenset({torch.ops.aten.split.Tensor, torch.ops.aten.split_with_sizes.default})


def _is_view(node):
    """Whether fx node `node` is a view op (or an item of a split)."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return _is_view(node.args[0]) and node.args[0].target in _SPLITS
    return node.target in VIEWS


def take_views_in_torch(fx, reasons):
    """Give every view whose value leaves NeoFlow (a graph output, or the
    argument of an op that runs in PyTorch) a copy run by PyTorch on the
    view's root: the root is materialised once by NeoFlow (or is an input)
    and the view costs nothing, where lowered it would be a copy of its
    own (the transposed weights aot_autograd saves for the backward, the
    aliases of saved activations). The copies are marked TORCH_VIEW in
    `reasons`; views left without users are removed. An empty result
    (a save eval-mode batch norm returns unused) becomes a torch.empty."""
    copies = {}

    def copy_of(view):
        if view not in copies:
            src = view.args[0]
            args = ((copy_of(src) if _is_view(src) else src),) + tuple(view.args[1:])
            with fx.graph.inserting_after(view):
                made = fx.graph.call_function(view.target, args, dict(view.kwargs))
            made.meta = dict(view.meta)
            reasons[made] = TORCH_VIEW
            copies[view] = made
        return copies[view]

    for item in [n for n in fx.graph.nodes if n.target is operator.getitem]:
        val = item.meta.get("val")
        if _empty(val):                 # an unused save (eval batch norm's mean, rstd)
            with fx.graph.inserting_after(item):
                made = fx.graph.call_function(torch.ops.aten.empty.memory_format,
                                              (list(val.shape),),
                                              {"dtype": val.dtype, "device": val.device})
            made.meta = dict(item.meta)
            reasons[made] = TORCH_VIEW
            item.replace_all_uses_with(made)
            fx.graph.erase_node(item)
            reasons.pop(item, None)
    views = [n for n in fx.graph.nodes if _is_view(n)]
    for view in views:
        outside = [u for u in view.users
                   if u.op == "output" or reasons.get(u) is not None]
        if outside and reasons.get(view) is None:
            made = copy_of(view)
            for user in outside:
                user.replace_input_with(view, made)
    for view in reversed(views):
        if not view.users:
            fx.graph.erase_node(view)
            reasons.pop(view, None)


def _runner_result(node):
    """Whether fx node `node` is a built partition's result (its call, or an
    item of it): a fresh tensor in exactly its fake layout, offset 0."""
    if node.op == "call_function" and node.target is operator.getitem:
        node = node.args[0]
    return node.op == "call_function" and isinstance(node.target, Runner)


def views_as_strided(fx):
    """Each view PyTorch takes of a built partition's result (a chain of
    view ops, a split's items) becomes one `as_strided` of that result with
    the view's fake size, strides and offset: one cheap call where the
    chain was several ATen view ops. Exact: the runner hands its results
    out in their fake layout. Returns {view op: count} of the ops replaced
    and the number of as_strided calls made (for the report)."""
    def root(node):
        while _is_view(node):
            node = node.args[0]
        return node

    made_count, replaced = 0, Counter()
    for node in list(fx.graph.nodes):
        if not _is_view(node) or node.target in _SPLITS or not node.users:
            continue
        base, val = root(node), node.meta.get("val")
        if not _runner_result(base) or not _static_tensor(val):
            continue
        with fx.graph.inserting_after(node):
            made = fx.graph.call_function(
                torch.ops.aten.as_strided.default,
                (base, list(val.shape), list(val.stride()), int(val.storage_offset())))
        made.meta = dict(node.meta)
        node.replace_all_uses_with(made)
        made_count += 1
    for node in reversed(list(fx.graph.nodes)):
        if _is_view(node) and not node.users:
            if node.target is not operator.getitem:
                replaced[op_name(node.target)] += 1
            fx.graph.erase_node(node)
    return replaced, made_count


# --- one ATen graph ------------------------------------------------------------------------
def lower_graph(fx, kind, opts, record):
    """Compile the supported parts of ATen graph `fx` with NeoFlow; returns the
    graph module to run (the rest of it runs in PyTorch)."""
    graph = GraphRecord(f"{record.index}.{kind}", kind)
    reasons = {}
    for node in fx.graph.nodes:
        if node.op == "call_function":
            reasons[node] = _check_node(node)
            if reasons[node] is not None and node.target is operator.getitem:
                src = node.args[0]
                reasons[node] = reasons.get(src) or reasons[node]
    take_views_in_torch(fx, reasons)
    failing = {n: r for n, r in reasons.items() if r is not None and r is not TORCH_VIEW}
    if opts.fallback == "error" and failing:
        lines = [f"  {op_name(n.target)} ({n.name}): {r}" for n, r in failing.items()]
        raise NeoFlowError(f"backend 'neoflow' (fallback='error'): {len(failing)} ATen op(s) "
                           "in the " + kind + " graph do not lower:\n" + "\n".join(lines))
    flops = {n: node_flops(n) for n in reasons}
    partitioner = CapabilityBasedPartitioner(fx, _Support(reasons),
                                             allows_single_node_partition=True)
    partitions = [p for p in partitioner.propose_partitions()
                  if not all(n.target in VIEWS or n.target is operator.getitem
                             for n in p.nodes)]
    fused = partitioner.fuse_partitions(partitions) if partitions else fx
    native = set()
    for node in list(fused.graph.nodes):
        if node.op == "call_module" and node.target.startswith("fused_"):
            index = int(node.target[len("fused_"):])
            try:
                runner = _build_partition(fused.get_submodule(node.target), node, opts)
            except NeoFlowError as e:
                if opts.fallback == "error":
                    raise
                graph.failed.append(str(e))
                continue
            node.op, node.target = "call_function", runner
            native.update(partitions[index].nodes)
            graph.kernels += kernel_count(runner.function)
            graph.runners.append(runner)
    replaced, strided = views_as_strided(fused)
    fused.graph.lint()
    fused.recompile()
    graph["native_calls"] = len(graph.runners)
    if kind == "backward":
        graph["saved"] = sum(1 for n in fx.graph.nodes if n.op == "placeholder"
                             and not n.name.startswith("tangents"))
    for node, reason in reasons.items():
        if node.target is operator.getitem:
            continue
        if reason is TORCH_VIEW:
            graph.add_view(op_name(node.target))
            continue
        if node in native:
            graph.add_native(op_name(node.target), flops[node])
        else:
            graph.add_fallback(op_name(node.target), flops[node],
                               reason or "left in PyTorch (a partition of views only, or "
                               "one that did not build)")
    for op, n in replaced.items():           # the views now taken as one as_strided each
        left = graph["views"][op] - n
        if left > 0:
            graph["views"][op] = left
        else:
            del graph["views"][op]
    if strided:
        graph["views"]["aten.as_strided.default"] += strided
    record.graphs.append(graph)
    if opts.tuning != "off" and graph.runners:
        graph.tuner = _tune(graph.runners, opts)
    return fused


class Runner:
    """A built partition, called in place of its fx submodule: torch tensors
    in (zero-copy when contiguous), torch tensors out, restrided where the
    graph's fake result is a dense permutation of another layout (an
    expanded, overlapping layout stays contiguous: same values).

    A plain built function (no nf.scan, no random tensors) is called
    through its entry point directly: the inputs' and fresh torch outputs'
    addresses in, no NumPy views, one native call (see direct.py);
    anything else, and any error the kernels report, goes through the
    function's own checked call."""

    def __init__(self, function, single, strides, lowered, layouts=None):
        self.single, self.strides = single, strides
        self.lowered = lowered          # (te outputs, te inputs), for tuning
        self.layouts = layouts or [None] * len(lowered[1])   # strided inputs (shape, strides)
        self.function = function
        self.__name__ = "neoflow_partition"

    @property
    def function(self):
        return self._function

    @function.setter
    def function(self, function):       # a tuned function is swapped in here
        self._function = function
        self._direct = Direct.of(function, self.layouts)

    def __call__(self, *tensors):
        direct = self._direct
        results = direct(tensors) if direct is not None and direct.matches(tensors) else None
        if results is None:
            results = self._function(*[to_array(t) if layout is None else
                                       to_array(flat_span(t, layout)).reshape(stand_in.shape)
                                       for t, layout, stand_in in
                                       zip(tensors, self.layouts, self.lowered[1])])
            if not isinstance(results, tuple):
                results = (results,)
            results = [to_torch(r) for r in results]
        outs = []
        for t, stride in zip(results, self.strides):
            if stride is not None:
                t = torch.empty_strided(t.shape, stride, dtype=t.dtype).copy_(t)
            outs.append(t)
        return outs[0] if self.single else tuple(outs)


def kernel_count(function):
    """Kernels a built function runs per call (a function with nf.scan loops
    counts those of its pieces)."""
    count = getattr(function, "kernel_count", None)
    return len(function.kernels) if count is None else count


def _strided(v):
    """(shape, strides) of fake tensor `v` where it is a non-contiguous view
    NeoFlow can read in place (non-negative strides; a split's piece, a
    transposed save), else None: read as a contiguous array."""
    if not _static_tensor(v) or v.is_contiguous() or any(st < 0 for st in v.stride()):
        return None
    return tuple(v.shape), tuple(int(st) for st in v.stride())


def _storage_order(shape, strides):
    """The dims of a strided view, outermost first in memory, where the view
    is a permutation of a dense array (a transposed save: no gaps, no
    overlap); None where it is not (a split's piece). Size-1 dims are left
    out (their strides mean nothing).

    >>> _storage_order((4, 3), (1, 4))
    [1, 0]
    """
    dims = sorted((d for d, n in enumerate(shape) if n > 1), key=lambda d: -strides[d])
    step = 1
    for d in reversed(dims):
        if strides[d] != step:
            return None
        step *= shape[d]
    return dims


def _strided_stand_in(v, name, layout):
    """A placeholder over the elements a strided view spans, and the view of
    it the lowering reads (inlined into its readers: no copy). A permuted
    dense array stands in with its dims in memory order, so its readers
    index it along its axes, as the schedules expect of a transposed
    operand (packing, vector axes); anything else as a flat array."""
    shape, strides = layout
    dims = _storage_order(shape, strides)
    if dims:
        base = placeholder(tuple(shape[d] for d in dims), te_dtype(v.dtype, name), name=name)
        view = compute(shape, lambda *i: base[tuple(i[d] for d in dims)], name=f"{name}_view")
        return base, view
    extent = 1 + sum((n - 1) * st for n, st in zip(shape, strides))
    flat = placeholder((extent,), te_dtype(v.dtype, name), name=name)
    view = compute(shape, lambda *i: flat[sum((a * st for a, st in zip(i, strides)
                                                if st), start=0) if any(strides) else 0],
                   name=f"{name}_view")
    return flat, view


def _build_partition(sub, call, opts):
    """Lower fused submodule `sub` (called by fx node `call`) and build it.
    An input that arrives as a non-contiguous view (a piece of a split the
    forward saved) is read in place through its strides."""
    env, inputs, layouts = {}, [], []
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for ph, arg in zip(placeholders, call.args):
        val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg
        layout = _strided(val)
        if layout is None:
            t = _stand_in(val, ph.name)
            env[ph] = t
        else:
            t, env[ph] = _strided_stand_in(val, ph.name, layout)
        inputs.append(t)
        layouts.append(layout)
    lowered = 0
    for node in sub.graph.nodes:
        if node.op == "call_function":
            env[node] = lower_node(node, env)
            lowered += 1
        elif node.op == "output":
            result = node.args[0]
    single = not isinstance(result, (tuple, list))
    out_nodes = [result] if single else list(result)
    outputs = [env[n] for n in out_nodes]
    strides = []
    for n in out_nodes:
        val = n.meta.get("val")
        dense = torch._prims_common.is_non_overlapping_and_dense_or_false(val)
        strides.append(None if val.is_contiguous() or not dense else tuple(val.stride()))
    try:
        function = build(outputs, inputs, database=opts.database)
    except NeoFlowError as e:
        raise NeoFlowError(f"building {lowered} lowered op(s) failed: {e}") from e
    return Runner(function, single, strides, (outputs, inputs), layouts)


def _tune(runners, opts):
    """Tune each partition's kernels: before returning ("ahead") or in a
    daemon thread that swaps the tuned functions in ("background")."""
    from ...tune import tune

    def work():
        for runner in runners:
            outputs, inputs = runner.lowered
            try:
                tune(outputs, inputs, trials=opts.trials, database=opts.database,
                     progress=False)
                runner.function = build(outputs, inputs, database=opts.database)
            except NeoFlowError:
                continue        # keep the untuned function; tuning is an optimisation

    if opts.tuning == "ahead":
        work()
        return None
    thread = threading.Thread(target=work, name="neoflow-torch-tuner", daemon=True)
    thread.start()
    return thread
