"""codegen/c/simd: vectorised loops as explicit SIMD code.

A `vectorized` loop whose body is stores of float arithmetic (+ - * /,
negation, constants) over loads that either step by one element with the
loop variable (contiguous) or do not move with it (broadcast) is printed
with GCC vector types (the prelude's nf_vf32 / nf_vf64, as wide as the
target's SIMD registers: `vector_width`, from toolchain/target.py): a main
loop over whole vectors, then -- on targets of 32 bytes or more, where
constant bounds leave half a vector or more -- one step of a vector half
as wide (nf_hf32 / nf_hf64), then the scalar loop for the remainder (none
where the loop's constant bounds leave nothing). Explicit
vector types keep their width where the compiler's own vectoriser would
not (GCC tunes AVX-512 cores for 256-bit loops; the 64-byte types still
compile to zmm registers, tests/codegen/test_wide_vectors.py). Each element sees the same operations in the same
order as in the scalar loop, so results are bit-identical; what changes is
that the compiler no longer has to discover the vectors -- a register tile
of accumulators (a stack array read and written through vector pointers)
then stays in registers across the reduction loop around it, whatever the
operands' strides. Any other loop body (calls, selects, casts, gathers,
inner loops) keeps the scalar form with `#pragma GCC ivdep`.

Hands on: `simd_plan` (None: print scalar), `print_simd` and
`vector_width` for the printer.
"""
from ...schedule.loop_ir import CDiv, Let, Load, Seq, Store
from ...te.expr import Binary, Cast, Const, IterVar, Unary
from ...toolchain.target import target

VECTOR_TYPES = {"float32": "nf_vf32", "float64": "nf_vf64"}
HALF_TYPES = {"float32": "nf_hf32", "float64": "nf_hf64"}   # half as wide: a row's tail
HALF_MIN_BYTES = 32       # a half vector of a narrower target holds too few lanes to pay
LANES = {"float32": "NF_LANES_F32", "float64": "NF_LANES_F64"}
_ARITH = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_UNROLL = 8
MIN_EXTENT = 16     # a shorter constant loop holds no whole vector on some targets: scalar


def vector_width():
    """The line that sets the prelude's vector width (NF_VBYTES) to the
    target's (toolchain/target.py), the width the schedules were made for.

    >>> vector_width()                    # doctest: +SKIP
    '#define NF_VBYTES 64\\n'
    """
    return f"#define NF_VBYTES {target().vector_bytes}\n"


def simd_plan(loop):
    """{id(Load or Store): stride in the loop variable (0 or 1)} if `loop`
    can be printed with vector types, else None.

    >>> simd_plan(For(j, 0, 16, "vectorized", Store(c, j, Load(a, j) * 2.0)))   # doctest: +SKIP
    {...}
    """
    if loop.reduction is not None or (isinstance(loop.begin, Const) and isinstance(
            loop.end, Const) and loop.end.value - loop.begin.value < MIN_EXTENT):
        return None
    plan = {"dtype": None}
    coefs = {id(loop.var): 1}
    body = loop.body
    stores = []
    while isinstance(body, Let):
        c = _coef(body.value, coefs, plan)
        if c is None:
            return None
        coefs[id(body.var)] = c
        body = body.body
    for stmt in body.stmts if isinstance(body, Seq) else (body,):
        if not isinstance(stmt, Store):
            return None
        stores.append(stmt)
    for st in stores:
        dtype = st.buffer.dtype
        if dtype not in VECTOR_TYPES or plan["dtype"] not in (None, dtype):
            return None
        plan["dtype"] = dtype
        if (_coef(st.index, coefs, plan) != 1 or _scalar(st.buffer)
                or not _vector_value(st.value, coefs, plan, dtype)):
            return None
        plan[id(st)] = 1
    return plan if stores else None


def _scalar(buffer):
    """A one-element stack buffer (printed as a plain variable)."""
    return buffer.scope == "stack" and buffer.size == 1


def _coef(e, coefs, plan):
    """The coefficient of the loop variable in the int64 expression `e`
    (None if it is not affine in it)."""
    if isinstance(e, Const):
        return 0
    if isinstance(e, IterVar):
        return coefs.get(id(e), 0)
    if isinstance(e, Cast):
        return _coef(e.a, coefs, plan)
    if isinstance(e, Unary) and e.op == "neg":
        c = _coef(e.a, coefs, plan)
        return None if c is None else -c
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
        a, b = _coef(e.a, coefs, plan), _coef(e.b, coefs, plan)
        if a is None or b is None:
            return None
        if e.op == "add":
            return a + b
        if e.op == "sub":
            return a - b
        if isinstance(e.b, Const):
            return a * e.b.value
        if isinstance(e.a, Const):
            return b * e.a.value
        return 0 if a == b == 0 else None
    parts = ((e.a, e.b) if isinstance(e, (Binary, CDiv)) else
             (e.index,) if isinstance(e, Load) and not e.checks else None)
    if parts is None or any(_coef(p, coefs, plan) != 0 for p in parts):
        return None
    return 0


def _vector_value(e, coefs, plan, dtype):
    """True if `e` (a float value) can be computed lane-wise; records the
    stride of each load in `plan`."""
    if e.dtype != dtype:
        return False
    if isinstance(e, Const):
        return True
    if isinstance(e, Load):
        if e.checks:
            return False
        c = _coef(e.index, coefs, plan)
        if c not in (0, 1) or c == 1 and _scalar(e.buffer):
            return False
        plan[id(e)] = c
        return True
    if isinstance(e, Binary) and e.op in _ARITH:
        return _vector_value(e.a, coefs, plan, dtype) and _vector_value(e.b, coefs, plan,
                                                                        dtype)
    if isinstance(e, Unary) and e.op == "neg":
        return _vector_value(e.a, coefs, plan, dtype)
    return False


def print_simd(fn, loop, plan, d):
    """Emit `loop` through the printer `fn`: whole vectors, then one vector
    of half the width where constant bounds leave at least that many points
    (on targets of 32 bytes or more: with 16 lanes, a row of 28 ran 12
    scalar multiply-adds per channel after its one vector; under a bound
    known only at run time, the half vector's test and code made register
    tiles' stores slower), then the rest.

    >>> print_simd(printer, loop, simd_plan(loop), 2)          # doctest: +SKIP
    """
    v = fn.name(loop.var, "v")
    dtype = plan["dtype"]
    lanes, end = LANES[dtype], fn.expr(loop.end)
    fn.emit(d, "{")
    fn.emit(d + 1, f"int64_t {v} = {fn.expr(loop.begin)};")
    fn.emit(d + 1, f"NF_UNROLL({_UNROLL})")
    fn.emit(d + 1, f"for (; {v} + {lanes} <= {end}; {v} += {lanes}) {{")
    _vector_step(fn, loop, plan, d + 2, VECTOR_TYPES[dtype], f"nf_splat_f{dtype[-2:]}")
    fn.emit(d + 1, "}")
    tgt = target()
    count = tgt.lanes(dtype)
    remainder = _remainder(loop, count)
    if tgt.vector_bytes >= HALF_MIN_BYTES and remainder is not None and 2 * remainder >= count:
        fn.emit(d + 1, "{")
        _vector_step(fn, loop, plan, d + 2, HALF_TYPES[dtype], f"nf_hsplat_f{dtype[-2:]}")
        fn.emit(d + 2, f"{v} += {lanes} / 2;")
        fn.emit(d + 1, "}")
        remainder -= count // 2
    if remainder != 0:
        fn.emit(d + 1, "#pragma GCC ivdep")
        fn.emit(d + 1, f"for (; {v} < {end}; ++{v}) {{")
        fn.stmt(loop.body, d + 2)
        fn.emit(d + 1, "}")
    fn.emit(d, "}")


def _vector_step(fn, loop, plan, d, vt, splat):
    """The body of `loop` for one vector of type `vt` at its variable."""
    body = loop.body
    while isinstance(body, Let):
        fn.emit(d, f"const int64_t {fn.name(body.var, 'v')} = {fn.expr(body.value)};")
        body = body.body
    for st in body.stmts if isinstance(body, Seq) else (body,):
        value = _vexpr(fn, st.value, plan, vt)
        if not value[1]:
            value = (f"{splat}({value[0]})", True)
        fn.emit(d, f"*({vt}*)&{fn.name(st.buffer, 'b')}[{fn.expr(st.index)}] = {value[0]};")


def _remainder(loop, lanes):
    """The points of `loop` after its whole vectors of `lanes`, or None
    where its bounds are not constant."""
    if not (isinstance(loop.begin, Const) and isinstance(loop.end, Const)):
        return None
    return (loop.end.value - loop.begin.value) % lanes


def _vexpr(fn, e, plan, vt):
    """(C text, is a vector) of the lane-wise value `e`."""
    if isinstance(e, Load) and plan[id(e)] == 1:
        return f"(*(const {vt}*)&{fn.name(e.buffer, 'b')}[{fn.expr(e.index)}])", True
    if isinstance(e, Binary):
        (a, va), (b, vb) = _vexpr(fn, e.a, plan, vt), _vexpr(fn, e.b, plan, vt)
        return f"({a} {_ARITH[e.op]} {b})", va or vb
    if isinstance(e, Unary):
        a, va = _vexpr(fn, e.a, plan, vt)
        return f"(-{a})", va
    return fn.expr(e), False
