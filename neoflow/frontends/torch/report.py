"""frontends/torch/report: what the backend did, per compiled ATen graph --
the ops NeoFlow ran, those that fell back to PyTorch (and why), and the
share of FLOPs run natively -- and `report(model)`, which finds the records
of a compiled model.

FLOPs of a node: torch's own formula where torch.utils.flop_counter has one
(matrix products, convolutions and their backward), 0 for views, else the
element count of its largest tensor (one operation per element).

Hands on: `report`, and `CompiledModel` / `GraphRecord` for the backend.
"""
import weakref
from collections import Counter

import torch

_COMPILED = []          # every CompiledModel, in order of compilation


def op_name(target):
    """A readable name of an fx node's target ("aten.mm.default").

    >>> op_name(torch.ops.aten.mm.default)
    'aten.mm.default'
    """
    return str(target) if isinstance(target, torch._ops.OpOverload) else \
        getattr(target, "__name__", str(target))


def node_flops(node):
    """The arithmetic operations ATen node `node` performs (see the header)."""
    from torch.utils.flop_counter import flop_registry
    from .lowering import VIEWS
    if node.op != "call_function" or node.target in VIEWS:
        return 0
    fake = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    out = node.meta.get("val")
    packet = getattr(node.target, "overloadpacket", None)
    if packet in flop_registry:
        try:
            return int(flop_registry[packet](*fake[0], **fake[1], out_val=out))
        except Exception:  # noqa: BLE001 -- a formula that cannot read these args: count elements
            pass
    sizes = [0]
    torch.utils._pytree.tree_map(
        lambda v: sizes.append(v.numel()) if isinstance(v, torch.Tensor) else None,
        (fake, out))
    return int(max(sizes))


def _dead():
    return None


class CompiledModel:
    """One Dynamo graph given to the backend: its ATen graphs' records and
    (weakly) the tensors it was compiled with -- its inputs and the
    parameters and buffers Dynamo kept on the graph module -- to find it
    from a model."""

    def __init__(self, gm, example_inputs):
        self.index = len(_COMPILED)
        self.graphs = []
        held = list(gm.parameters()) + list(gm.buffers()) if gm is not None else []
        self._inputs = {id(t): weakref.ref(t) for t in list(example_inputs) + held
                        if isinstance(t, torch.Tensor)}
        _COMPILED.append(self)

    def uses(self, tensors):
        return any(self._inputs.get(id(t), _dead)() is t for t in tensors)


class GraphRecord(dict):
    """The record of one ATen graph (a dict: "kind", "native", "fallback",
    "views" (views PyTorch takes of NeoFlow's results, zero-copy), "reasons",
    "flops_native", "flops_total", "native_share", "kernels", "failed",
    "native_calls" (built partitions called per call of the graph) and, for
    a backward graph, "saved" (the tensors the forward saved for it))."""

    def __init__(self, name, kind):
        super().__init__(name=name, kind=kind, native=Counter(), fallback=Counter(),
                         views=Counter(), reasons={}, flops_native=0, flops_total=0,
                         kernels=0, failed=[], native_calls=0, saved=None)
        self.runners, self.tuner = [], None

    def add_native(self, op, flops):
        self["native"][op] += 1
        self["flops_native"] += flops
        self["flops_total"] += flops

    def add_view(self, op):
        """A view of a NeoFlow result or an input that PyTorch takes (no copy)."""
        self["views"][op] += 1

    def add_fallback(self, op, flops, reason):
        self["fallback"][op] += 1
        self["flops_total"] += flops
        self["reasons"].setdefault(op, reason)

    @property
    def kernels(self):
        return self["kernels"]

    @kernels.setter
    def kernels(self, n):
        self["kernels"] = n

    @property
    def failed(self):
        return self["failed"]

    def share(self):
        total = self["flops_total"]
        return self["flops_native"] / total if total else 1.0


class Report(dict):
    """{graph name: GraphRecord}; `str()` is a table, one row per graph.

    >>> print(nf.torch.report(model))        # doctest: +SKIP
    """

    def __str__(self):
        rows = [f"{'graph':<14} {'native ops':>10} {'fallback':>9} {'kernels':>8} "
                f"{'FLOPs native':>13}"]
        for name, g in self.items():
            rows.append(f"{name:<14} {sum(g['native'].values()):>10} "
                        f"{sum(g['fallback'].values()):>9} {g['kernels']:>8} "
                        f"{100 * g['native_share']:>12.1f}%")
            for op, count in sorted(g["fallback"].items()):
                rows.append(f"    fell back: {op} x{count} ({g['reasons'][op]})")
            for why in g["failed"]:
                rows.append(f"    a partition ran in PyTorch: {why}")
        if len(rows) == 1:
            rows.append("(nothing compiled by backend='neoflow' yet)")
        return "\n".join(rows)


def compiled_for(model=None):
    """The CompiledModel records (one per Dynamo graph) of `model` (None: all).

    >>> [g.kind for c in compiled_for(model) for g in c.graphs]   # doctest: +SKIP
    ['forward', 'backward']
    """
    if model is None:
        return list(_COMPILED)
    module = getattr(model, "_orig_mod", model)
    tensors = list(module.parameters()) + list(module.buffers())
    return [c for c in _COMPILED if c.uses(tensors)] if tensors else list(_COMPILED)


def report(model=None):
    """Per ATen graph compiled by backend="neoflow" for `model` (an nn.Module,
    compiled or not; None: every graph so far): the ops NeoFlow ran, those
    that fell back, the share of FLOPs run natively. Graphs appear once
    compiled (a backward graph after the first backward).

    >>> rep = nf.torch.report(model)
    >>> rep["0.forward"]["native_share"]          # doctest: +SKIP
    1.0
    """
    out = Report()
    for c in compiled_for(model):
        for g in c.graphs:
            entry = dict(g)
            entry["native"], entry["fallback"] = dict(g["native"]), dict(g["fallback"])
            entry["views"] = dict(g["views"])
            entry["native_share"] = g.share()
            out[g["name"]] = entry
    return out
