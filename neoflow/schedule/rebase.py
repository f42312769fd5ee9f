"""schedule/rebase: a lowered kernel's constant offsets moved into its arguments.

An unrolled recurrence reads step t's slice of a tensor that holds every
step (`wx[b, t, j]`): its kernels are equal but for one constant in each
flat index (`b3[v51 * 32768 + 4096 + v52]` at t = 1, `+ 8192` at t = 2), so
each would be compiled on its own. `argument_offsets` finds, per argument
buffer, the constant every access of it adds (the smallest constant term of
its indices, when positive and inside the buffer); `rebase` subtracts those
offsets from every index. The caller then passes `pointer + offset` for
that argument: the same elements are read and written, and the steps'
kernels print the same C, so they are compiled once (runtime/native.py).

A buffer with a bounds-checked read keeps offset 0 (its checks compare
indices against the whole tensor). Only the constant terms of an index's
top-level sum are seen; an offset folded into a product or a `Let` just
leaves the buffer as it is -- never wrong, only not shared.

Hands on: offsets (elements, one per argument: inputs then outputs) and
the rebased `KernelFunc`.
"""
from ..te.expr import Binary, Const
from .loop_ir import CopyTransposed, KernelFunc, Load, Store, map_body, map_stmt, nodes


def argument_offsets(func):
    """Per argument buffer of `func` (inputs, then outputs): the elements
    every access of it is offset by -- the smallest constant term of its
    indices if positive and within the buffer, else 0.

    >>> argument_offsets(func)          # reads b[v * 32 + 8 + w]   # doctest: +SKIP
    (8, 0)
    """
    args = func.inputs + func.outputs
    least = {id(b): None for b in args}
    unsafe = set()
    for buffer, index, checked in _accesses(func.body):
        if id(buffer) not in least:
            continue
        if checked:
            unsafe.add(id(buffer))
        c = _constant(index)
        low = least[id(buffer)]
        least[id(buffer)] = c if low is None else min(low, c)
    return tuple(least[id(b)] if id(b) not in unsafe and least[id(b)] is not None
                 and 0 < least[id(b)] < b.size else 0 for b in args)


def rebase(func, offsets):
    """`func` with offset `offsets[n]` taken out of every index of argument n
    (inputs, then outputs): run it on `pointer_n + offsets[n]`.

    >>> rebase(func, argument_offsets(func))                 # doctest: +SKIP
    """
    args = func.inputs + func.outputs
    shift = {id(b): off for b, off in zip(args, offsets) if off}
    if not shift:
        return func

    def load(e):
        if isinstance(e, Load) and id(e.buffer) in shift:
            return Load(e.buffer, _shifted(e.index, shift[id(e.buffer)]), e.checks)
        return e

    def store(s):
        if isinstance(s, Store) and id(s.buffer) in shift:
            return Store(s.buffer, _shifted(s.index, shift[id(s.buffer)]), s.value)
        if isinstance(s, CopyTransposed):
            dst, src = s.dst_index, s.src_index
            if id(s.dst) in shift:
                dst = _shifted(dst, shift[id(s.dst)])
            if id(s.src) in shift:
                src = _shifted(src, shift[id(s.src)])
            return CopyTransposed(s.size, s.dst, dst, s.dst_stride, s.src, src, s.src_stride)
        return map_body(s, store)

    body = store(map_stmt(func.body, load))
    return KernelFunc(func.inputs, func.outputs, body, func.hint)


def _accesses(body):
    """(buffer, flat index, checked) of every read and write under `body`."""
    for n in nodes(body):
        if isinstance(n, Load):
            yield n.buffer, n.index, bool(n.checks)
        elif isinstance(n, Store):
            yield n.buffer, n.index, False
        elif isinstance(n, CopyTransposed):
            yield n.dst, n.dst_index, False
            yield n.src, n.src_index, False


def _constant(e):
    """The sum of the constants in `e`'s top-level sum (`a + 3 - 1` -> 2)."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Binary) and e.op == "add":
        return _constant(e.a) + _constant(e.b)
    if isinstance(e, Binary) and e.op == "sub" and isinstance(e.b, Const):
        return _constant(e.a) - int(e.b.value)
    return 0


def _has_constant(e):
    if isinstance(e, Const):
        return True
    if isinstance(e, Binary) and e.op == "add":
        return _has_constant(e.a) or _has_constant(e.b)
    return isinstance(e, Binary) and e.op == "sub" and isinstance(e.b, Const)


def _shifted(e, off):
    """`e - off`, the first constant of its top-level sum changed in place
    (so equal structure stays equal structure); a zero term is dropped."""
    if isinstance(e, Const):
        return Const(int(e.value) - off, e.dtype)
    if isinstance(e, Binary) and e.op == "add":
        for keep, term, left in ((e.b, e.a, True), (e.a, e.b, False)):
            if _has_constant(term):
                moved = _shifted(term, off)
                if isinstance(moved, Const) and moved.value == 0:
                    return keep
                return Binary("add", moved, keep, e.dtype) if left else \
                    Binary("add", keep, moved, e.dtype)
    if isinstance(e, Binary) and e.op == "sub" and isinstance(e.b, Const):
        return Binary("sub", e.a, Const(int(e.b.value) + off, e.b.dtype), e.dtype)
    return Binary("sub", e, Const(off, e.dtype), e.dtype)
