"""schedule/loop_ir: the loop IR that lowering produces and codegen consumes.

A kernel lowers to a `KernelFunc`: parameters (flat buffers of its inputs
and outputs) and a body of statements:

    For(var, begin, end, kind, body)   kind: serial | parallel | vectorized | unrolled
    Seq(stmts)                         statements in order
    Let(var, value, body)              an int64 variable bound over `body`
    Allocate(buffer, body)             a kernel-local buffer (stack or heap) over `body`
    Store(buffer, index, value)        buffer[index] = value (flat index)
    IfThenElse(cond, then, else_)
    CopyTransposed(size, dst, dst_index, dst_stride, src, src_index, src_stride)
                                       a size x size block copied transposed:
                                       dst[di + r * ds + c] = src[si + c * ss + r]

Expressions reuse the te nodes (Const, Unary, Binary, Select, Cast, and te
IterVars, which Lets and Fors bind) plus three IR nodes: `Var` (a loop or
let variable), `Load(buffer, index, checks)` (a flat read; `checks` bind
index values that must be verified at run time, and the read happens only
if they are in range), `CDiv` (C's truncating / and %, used where the
operands are proved non-negative) and `Blend` (a select evaluating both
sides). Loop bounds are expressions and may use
outer variables (tails of tiles, bounds tightened by reduction conditions).
A `Program` lists the kernels, the buffers passed in and out, the
intermediates between kernels, and the read sites that are checked.

Nothing here names a user's tensor or axis in generated code: printers
number buffers and variables themselves; `hint`s are for debugging dumps.

GPU backends lower from the same IR: the `parallel` loop (the fused outer
tile loops) becomes the program id grid, `vectorized` loops become blocks
(`tl.arange`) of the vectorised axis, stack buffers (accumulator tiles)
become register tiles, serial loops stay loops inside the program, and a
Load's checks become load masks plus an error flag.

Hands on: `Program` / `KernelFunc` trees for codegen.
"""
import math

from ..te.arith import linear_form
from ..te.expr import Binary, Cast, Const, Expr, IterVar, Select, Unary
from ..te.printer import _INFIX
from ..te.visit import children, with_children

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled")


class Buffer:
    """A flat array of `dtype` holding a tensor of `shape`.

    scope: "arg" (passed in), "heap" (allocated by the kernel or program),
    "stack" (a small local array; one element prints as a scalar).
    """
    __slots__ = ("dtype", "shape", "scope", "hint")

    def __init__(self, dtype, shape, scope, hint=""):
        self.dtype, self.shape, self.scope, self.hint = dtype, tuple(shape), scope, hint

    @property
    def size(self):
        return math.prod(self.shape)

    def __repr__(self):
        return f"<Buffer {self.hint} {self.dtype}{list(self.shape)} {self.scope}>"


# -- expressions --------------------------------------------------------------

class Var(IterVar):
    """A loop or let variable over [lo, hi); an IterVar, so te.arith reasons about it."""
    __slots__ = ()

    def __init__(self, hint, lo=0, hi=1 << 62):
        IterVar.__init__(self, hint, lo, hi, "loop")


class Check:
    """Binds `var` to `value` (an int64 index) and requires 0 <= value < extent;
    `site` numbers the read in `Program.sites` for the error report."""
    __slots__ = ("var", "value", "extent", "site")

    def __init__(self, var, value, extent, site):
        self.var, self.value, self.extent, self.site = var, value, extent, site


class Load(Expr):
    """`buffer[index]`; if `checks` fail the read is skipped, an error is
    recorded and the value is 0."""
    __slots__ = ("buffer", "index", "checks")

    def __init__(self, buffer, index, checks=()):
        self.buffer, self.index, self.checks = buffer, index, tuple(checks)
        self.dtype = buffer.dtype


class CDiv(Expr):
    """C's truncating `a / b` (op "div") or `a % b` (op "mod") on integers
    known to be non-negative (so it equals floor division)."""
    __slots__ = ("op", "a", "b")

    def __init__(self, op, a, b):
        self.op, self.a, self.b, self.dtype = op, a, b, a.dtype


class Blend(Expr):
    """`cond ? t : f` with both sides evaluated (branch-free, so the loop around
    it can vectorise); made only where both sides are safe to evaluate
    everywhere (schedule/speculate.py)."""
    __slots__ = ("cond", "t", "f")

    def __init__(self, cond, t, f):
        self.cond, self.t, self.f, self.dtype = cond, t, f, t.dtype


# -- statements ---------------------------------------------------------------

class Stmt:
    __slots__ = ()

    def __repr__(self):
        return dump(self)


class For(Stmt):
    """`for var in [begin, end)`; `unroll` is a factor for kind "unrolled";
    `reduction` = (op, stack buffer of one element) lets a vectorized loop
    combine into that scalar (op: sum, max or min)."""
    __slots__ = ("var", "begin", "end", "kind", "body", "unroll", "reduction")

    def __init__(self, var, begin, end, kind, body, unroll=None, reduction=None):
        assert kind in LOOP_KINDS, kind
        self.var, self.begin, self.end, self.kind, self.body = var, begin, end, kind, body
        self.unroll, self.reduction = unroll, reduction


class Seq(Stmt):
    __slots__ = ("stmts",)

    def __init__(self, stmts):
        flat = []
        for s in stmts:
            flat.extend(s.stmts if isinstance(s, Seq) else [s])
        self.stmts = tuple(flat)


class Let(Stmt):
    __slots__ = ("var", "value", "body")

    def __init__(self, var, value, body):
        self.var, self.value, self.body = var, value, body


class Allocate(Stmt):
    __slots__ = ("buffer", "body")

    def __init__(self, buffer, body):
        self.buffer, self.body = buffer, body


class Store(Stmt):
    __slots__ = ("buffer", "index", "value")

    def __init__(self, buffer, index, value):
        self.buffer, self.index, self.value = buffer, index, value


class CopyTransposed(Stmt):
    """A `size` x `size` block of `src` copied transposed into `dst`:
    dst[dst_index + r * dst_stride + c] = src[src_index + c * src_stride + r]
    (the panel packing of an operand read across its rows, e.g. a dense
    layer's W[j, k] into P[j // 16, k, j % 16]: whole vectors in and out)."""
    __slots__ = ("size", "dst", "dst_index", "dst_stride", "src", "src_index", "src_stride")

    def __init__(self, size, dst, dst_index, dst_stride, src, src_index, src_stride):
        self.size, self.dst, self.dst_index, self.dst_stride = size, dst, dst_index, dst_stride
        self.src, self.src_index, self.src_stride = src, src_index, src_stride


class IfThenElse(Stmt):
    __slots__ = ("cond", "then", "else_")

    def __init__(self, cond, then, else_=None):
        self.cond, self.then, self.else_ = cond, then, else_


# -- functions and programs -----------------------------------------------------

class KernelFunc:
    """One kernel: reads `inputs`, writes `outputs` (arg buffers), runs `body`."""

    def __init__(self, inputs, outputs, body, hint=""):
        self.inputs, self.outputs, self.body, self.hint = tuple(inputs), tuple(outputs), body, hint

    def __repr__(self):
        return f"kernel {self.hint}\n{dump(self.body, 1)}"


class Site:
    """A read checked at run time: which stage reads which tensor's dimension;
    `computes`: the user's computes fused into the stage that make the read
    (empty: the stage's own); `index_tensor`: the integer input whose value
    is the index (a gather of labels or ids), or None."""
    __slots__ = ("stage", "tensor", "dim", "size", "computes", "index_tensor")

    def __init__(self, stage, tensor, dim, size, computes=(), index_tensor=None):
        self.stage, self.tensor, self.dim, self.size = stage, tensor, dim, size
        self.computes, self.index_tensor = tuple(computes), index_tensor


class Program:
    """Kernels run in order; `calls[n]` lists the buffers kernel n gets
    (its inputs then its outputs); `temps` are intermediates between kernels;
    `offsets[n][j]`: kernel n gets its j-th buffer from that element on
    (schedule/rebase.py; 0 unless set)."""

    def __init__(self, kernels, calls, inputs, outputs, temps, sites):
        self.kernels, self.calls = list(kernels), list(calls)
        self.inputs, self.outputs, self.temps = list(inputs), list(outputs), list(temps)
        self.sites = list(sites)
        self.offsets = [[0] * len(c) for c in self.calls]


# -- walking and rewriting ---------------------------------------------------------

def expr_children(e):
    """The direct sub-expressions of an IR expression (te nodes, Load, CDiv, Blend)."""
    if isinstance(e, Load):
        return (e.index,) + tuple(c.value for c in e.checks)
    if isinstance(e, CDiv):
        return (e.a, e.b)
    if isinstance(e, Blend):
        return (e.cond, e.t, e.f)
    return children(e)


def nodes(stmt):
    """Every statement and expression under `stmt` (itself included), parents first.

    >>> any(isinstance(n, Load) and n.checks for n in nodes(body))   # doctest: +SKIP
    """
    stack = [stmt]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, Seq):
            stack.extend(n.stmts)
        elif isinstance(n, For):
            stack.extend((n.begin, n.end, n.body))
        elif isinstance(n, Let):
            stack.extend((n.value, n.body))
        elif isinstance(n, Allocate):
            stack.append(n.body)
        elif isinstance(n, Store):
            stack.extend((n.index, n.value))
        elif isinstance(n, IfThenElse):
            stack.extend(x for x in (n.cond, n.then, n.else_) if x is not None)
        elif isinstance(n, CopyTransposed):
            stack.extend((n.dst_index, n.src_index))
        else:
            stack.extend(expr_children(n))


def iterations(stmt):
    """How many times `stmt`'s innermost statements run, a loop whose bounds
    differ by a constant counting its trips (any other loop once: a lower
    bound of the work).

    >>> iterations(For(i, Const(0), Const(8), "serial", Store(b, i, Const(1.0))))
    8
    """
    if isinstance(stmt, For):
        end, begin = linear_form(stmt.end), linear_form(stmt.begin)
        same = end is not None and begin is not None and end.terms == begin.terms
        return max(end.const - begin.const, 0) * iterations(stmt.body) if same \
            else iterations(stmt.body)
    if isinstance(stmt, Seq):
        return sum(iterations(s) for s in stmt.stmts)
    if isinstance(stmt, (Let, Allocate)):
        return iterations(stmt.body)
    if isinstance(stmt, IfThenElse):
        return max(iterations(stmt.then), iterations(stmt.else_) if stmt.else_ else 0)
    return 1


def map_expr(e, fn):
    """Rebuild the IR expression `e` bottom-up; `fn(node with rebuilt children)`
    returns its replacement. Shared sub-trees are rebuilt once.

    >>> map_expr(Load(a, i + 1), lambda n: n)                          # doctest: +SKIP
    """
    memo = {}

    def walk(n):
        if id(n) not in memo:
            if isinstance(n, Load):
                out = Load(n.buffer, walk(n.index),
                           [Check(c.var, walk(c.value), c.extent, c.site) for c in n.checks])
            elif isinstance(n, CDiv):
                out = CDiv(n.op, walk(n.a), n.b)
            elif isinstance(n, Blend):
                out = Blend(walk(n.cond), walk(n.t), walk(n.f))
            elif children(n):
                out = with_children(n, [walk(c) for c in children(n)])
            else:
                out = n
            memo[id(n)] = fn(out)
        return memo[id(n)]
    return walk(e)


def map_body(stmt, fn):
    """`stmt` with `fn` applied to each statement directly inside it (a Seq's
    statements, a loop's, let's or allocation's body, an if's branches);
    stores and copies come back as they are.

    >>> map_body(Seq([a, b]), f)      # Seq([f(a), f(b)])   # doctest: +SKIP
    """
    if isinstance(stmt, Seq):
        return Seq([fn(s) for s in stmt.stmts])
    if isinstance(stmt, For):
        return For(stmt.var, stmt.begin, stmt.end, stmt.kind, fn(stmt.body), stmt.unroll,
                   stmt.reduction)
    if isinstance(stmt, Let):
        return Let(stmt.var, stmt.value, fn(stmt.body))
    if isinstance(stmt, Allocate):
        return Allocate(stmt.buffer, fn(stmt.body))
    if isinstance(stmt, IfThenElse):
        return IfThenElse(stmt.cond, fn(stmt.then), None if stmt.else_ is None else fn(stmt.else_))
    return stmt


def map_stmt(stmt, fn):
    """`stmt` rebuilt with every expression in it (bounds, values, indices,
    conditions) rebuilt by `map_expr(e, fn)`; buffers and loop variables stay.

    >>> map_stmt(body, lambda n: j + 1 if n is i else n)     # i -> j + 1   # doctest: +SKIP
    """
    def expr(e):
        return map_expr(e, fn)

    def walk(s):
        if isinstance(s, Seq):
            return Seq([walk(x) for x in s.stmts])
        if isinstance(s, For):
            return For(s.var, expr(s.begin), expr(s.end), s.kind, walk(s.body), s.unroll,
                       s.reduction)
        if isinstance(s, Let):
            return Let(s.var, expr(s.value), walk(s.body))
        if isinstance(s, Allocate):
            return Allocate(s.buffer, walk(s.body))
        if isinstance(s, Store):
            return Store(s.buffer, expr(s.index), expr(s.value))
        if isinstance(s, CopyTransposed):
            return CopyTransposed(s.size, s.dst, expr(s.dst_index), s.dst_stride, s.src,
                                  expr(s.src_index), s.src_stride)
        return IfThenElse(expr(s.cond), walk(s.then), None if s.else_ is None else walk(s.else_))
    return walk(stmt)


# -- a readable dump (debugging and tests) -------------------------------------------

def dump(node, depth=0):
    """Pseudo-code text of a statement tree (variables by their hints).

    >>> print(dump(For(v, 0, 4, "serial", Store(b, v, 0))))   # doctest: +SKIP
    for v in [0, 4) serial:
      b[v] = 0
    """
    pad = "  " * depth
    if isinstance(node, For):
        extra = f" x{node.unroll}" if node.unroll else ""
        return (f"{pad}for {node.var.name} in [{_e(node.begin)}, {_e(node.end)}) "
                f"{node.kind}{extra}:\n{dump(node.body, depth + 1)}")
    if isinstance(node, Seq):
        return "\n".join(dump(s, depth) for s in node.stmts)
    if isinstance(node, Let):
        return f"{pad}let {node.var.name} = {_e(node.value)}\n{dump(node.body, depth)}"
    if isinstance(node, Allocate):
        b = node.buffer
        return f"{pad}alloc {b.hint} {b.dtype}[{b.size}] {b.scope}\n{dump(node.body, depth)}"
    if isinstance(node, Store):
        return f"{pad}{node.buffer.hint}[{_e(node.index)}] = {_e(node.value)}"
    if isinstance(node, CopyTransposed):
        return (f"{pad}{node.dst.hint}[{_e(node.dst_index)} + r*{node.dst_stride} + c] = "
                f"{node.src.hint}[{_e(node.src_index)} + c*{node.src_stride} + r] "
                f"for r, c < {node.size}")
    if isinstance(node, IfThenElse):
        text = f"{pad}if {_e(node.cond)}:\n{dump(node.then, depth + 1)}"
        if node.else_ is not None:
            text += f"\n{pad}else:\n{dump(node.else_, depth + 1)}"
        return text
    raise TypeError(f"not a statement: {node!r}")


def _e(e):
    """One-line text of an IR expression (te nodes included)."""
    if isinstance(e, Load):
        checks = "".join(f"{c.var.name}={_e(c.value)}<{c.extent}? " for c in e.checks)
        return f"{checks}{e.buffer.hint}[{_e(e.index)}]"
    if isinstance(e, CDiv):
        return f"({_e(e.a)} c{'/' if e.op == 'div' else '%'} {_e(e.b)})"
    if isinstance(e, IterVar):
        return e.name
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, Binary):
        infix = _INFIX.get(e.op)
        return f"({_e(e.a)} {infix} {_e(e.b)})" if infix else f"{e.op}({_e(e.a)}, {_e(e.b)})"
    if isinstance(e, Unary):
        return f"{e.op}({_e(e.a)})"
    if isinstance(e, Select):
        return f"where({_e(e.cond)}, {_e(e.t)}, {_e(e.f)})"
    if isinstance(e, Blend):
        return f"blend({_e(e.cond)}, {_e(e.t)}, {_e(e.f)})"
    if isinstance(e, Cast):
        return f"cast({_e(e.a)}, {e.dtype})"
    return object.__repr__(e)
