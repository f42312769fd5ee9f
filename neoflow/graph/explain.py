"""graph/explain: a readable listing of a partition -- the kernels of a
training step (or of a list of tensors), the ops each one holds (its stages
and the producers inlined into them), estimated flops (te/flops) and bytes
moved, why each producer -> consumer edge was or was not inlined, and why
each compute joined (or was kept apart from) a kernel -- and the same
partition as a Graphviz graph (graph/dot).

Hands on: text (`explain`) and graphviz.Digraph objects (`to_graphviz`), for people.
"""
from ..errors import InputError, MissingDependencyError
from ..te.tensor import Tensor
from .dot import dot_lines, to_dot
from .ops_class import op_class, own_flops
from .partition import fuse, kernels_of
from .traffic import kernel_bytes

FORMATS = ("text", "dot")


def explain(obj, fusion=True, format="text"):
    """The partition of a Trainer's step, or of the tensors `obj` (a Tensor
    or a list), as text; format="dot" gives Graphviz DOT source instead
    (a cluster per kernel; render it with `dot -Tsvg` or `to_graphviz`).

    >>> print(nf.explain(trainer))                       # doctest: +SKIP
    26 computes -> 5 kernels per step (fusion on)
    kernel 0: 2 stage(s), ...
    >>> nf.explain(loss, format="dot").startswith("digraph")   # doctest: +SKIP
    True
    """
    if format not in FORMATS:
        raise InputError(f"explain: format must be one of {FORMATS}, got {format!r}")
    part, kernels, on = partition_of(obj, fusion)
    return to_dot(part, kernels) if format == "dot" else render(part, kernels, on)


def to_graphviz(obj, fusion=True):
    """The partition of a Trainer's step or of tensors (as `explain`) as a
    `graphviz.Digraph` (needs the graphviz Python package; rendering it to
    an image also needs Graphviz's `dot` program).

    >>> g = to_graphviz(trainer)                          # doctest: +SKIP
    >>> g.render("step", format="svg")                    # doctest: +SKIP
    """
    try:
        import graphviz
    except ImportError as e:
        raise MissingDependencyError(
            "to_graphviz needs the 'graphviz' Python package (pip install graphviz); "
            "nf.explain(obj, format='dot') gives the DOT source without it") from e
    part, kernels, _ = partition_of(obj, fusion)
    return graphviz.Digraph("partition", body=[line + "\n" for line in dot_lines(part, kernels)])


def partition_of(obj, fusion=True):
    """(Partition, kernels, fusion on?) of a Trainer, a Tensor or a list of Tensors."""
    if isinstance(obj, Tensor) or isinstance(obj, (list, tuple)):
        outs = [obj] if isinstance(obj, Tensor) else list(obj)
        part = fuse(outs, fusion=fusion)
        return part, kernels_of(part, fusion), fusion
    if hasattr(obj, "partition") and hasattr(obj, "kernels"):
        return obj.partition, obj.kernels, getattr(obj, "fusion", True)
    raise InputError(f"explain: expected a Trainer, a Tensor or a list of Tensors, got {obj!r}")


def render(part, kernels, on):
    """The text of `explain` for a Partition and its kernels."""
    lines = [f"{part.unfused_kernels} computes -> {len(kernels)} kernels per step "
             f"(fusion {'on' if on else 'off'})"]
    total_flops = total_bytes = 0
    for n, k in enumerate(kernels):
        flops = sum(own_flops(t) for t in k.stages)
        moved = kernel_bytes(k)
        total_flops += flops
        total_bytes += moved
        lines.append(f"kernel {n}: {len(k.stages)} stage(s), {flops} flops, {moved} bytes "
                     f"(in {len(k.inputs)}, out {len(k.outputs)})")
        for t in k.stages:
            role = "out" if any(t is o for o in k.outputs) else "local"
            folded = [p.name for p in part.inlined.get(id(t), [])]
            extra = f"  inlined: {', '.join(folded)}" if folded else ""
            lines.append(f"  {t.name} {t.shape} {op_class(t)} [{role}]{extra}")
    lines.append(f"total: {total_flops} flops, {total_bytes} bytes moved between kernels "
                 "and memory (estimate)")
    lines.append("edges:")
    for d in part.decisions:
        verb = "fused " if d.fused else "kept  "
        lines.append(f"  {verb} {d.producer.name} -> {d.consumer.name}: {d.reason}")
    lines.append("groups:")
    for d in part.grouping:
        verb = "joined" if d.fused else "apart "
        lines.append(f"  {verb} {d.consumer.name} with {d.producer.name} ({d.kind}): "
                     f"{d.reason}")
    return "\n".join(lines)
