"""graph/explain: a readable listing of a partition -- the kernels of a
training step (or of a list of tensors), the ops each one holds (its stages
and the producers inlined into them), estimated flops (te/flops) and bytes
moved, and why each producer -> consumer edge was or was not fused.

Hands on: text (`explain`), for people.
"""
from ..te.tensor import Tensor
from .memory import nbytes
from .ops_class import op_class, own_flops
from .partition import fuse, kernels_of


def explain(obj, fusion=True):
    """The partition of a Trainer's step, or of the tensors `obj` (a Tensor
    or a list), as text.

    >>> print(nf.explain(trainer))                       # doctest: +SKIP
    26 computes -> 13 kernels per step (fusion on)
    kernel 0: dense (reduction-heavy) ...
    """
    if isinstance(obj, Tensor) or isinstance(obj, (list, tuple)):
        outs = [obj] if isinstance(obj, Tensor) else list(obj)
        part = fuse(outs, fusion=fusion)
        kernels = kernels_of(part, fusion)
        on = fusion
    elif hasattr(obj, "partition") and hasattr(obj, "kernels"):
        part, kernels, on = obj.partition, obj.kernels, getattr(obj, "fusion", True)
    else:
        raise TypeError(f"explain: expected a Trainer, a Tensor or a list of Tensors, "
                        f"got {obj!r}")
    return render(part, kernels, on)


def render(part, kernels, on):
    """The text of `explain` for a Partition and its kernels."""
    lines = [f"{part.unfused_kernels} computes -> {len(kernels)} kernels per step "
             f"(fusion {'on' if on else 'off'})"]
    total_flops = total_bytes = 0
    for n, k in enumerate(kernels):
        flops = sum(own_flops(t) for t in k.stages)
        moved = sum(nbytes(t) for t in k.inputs) + sum(nbytes(t) for t in k.outputs)
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
    return "\n".join(lines)

