"""codegen/c/printer: loop IR -> C source.

Each kernel becomes a static function over `restrict` pointers; the
exported `int64_t nf_main(void* const* args, int64_t* err)` takes the
program's input then output pointers, runs the kernels in order with the
temporaries between them (each allocated just before its producer and freed
after its last reader) and returns err[0] (see the prelude). It calls
kernel n through entry n of a table of kernel addresses: the exported
`nf_kernel_table` of the library's static kernels, or -- for the entry
printed alone (`generate_entry`) -- the caller's own, passed after the
output pointers, so the runtime can read a kernel's address out of one
library and run it from a table no other caller shares.

Parallel loops get `#pragma omp parallel for`; vectorised loops of plain
float arithmetic are printed with vector types (codegen/c/simd.py), other
vectorised loops get `#pragma GCC ivdep` (gcc then vectorises them) or, for
a reduction into a scalar, `#pragma omp simd reduction` (max and min through
the prelude's declared reductions); unrolled loops `NF_UNROLL(n)` (the
prelude's `#pragma GCC unroll`, which a quick build drops). A checked read
is a statement expression that tests its indices and reads only if they
pass.

Every identifier is generated (b0, v3, nf_kernel2); user names appear only
in comments, stripped to [A-Za-z0-9_].

Hands on: the C text.
"""
import math
import re

from ...schedule.loop_ir import (Allocate, Blend, CDiv, CopyTransposed, For, IfThenElse, Let, Load,
                                 Seq, Store)
from ...te import dtype as dt
from ...te.expr import Binary, Cast, Const, IterVar, Select, Unary
from ...te.random import Random
from .prelude import PRELUDE
from .simd import print_simd, simd_plan, vector_width

ENTRY = "nf_main"
TABLE = "nf_kernel_table"
_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">=", "eq": "==", "ne": "!=", "and": "&", "or": "|"}
_SUFFIX = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64"}
# intrinsic -> its C math library function (float32: with the suffix f); round is
# rint (the default rounding mode rounds halves to even, as torch.round; C's round
# rounds them away from zero)
_LIBM = {"exp": "exp", "log": "log", "tanh": "tanh", "sqrt": "sqrt", "erf": "erf",
         "floor": "floor", "ceil": "ceil", "round": "rint", "log1p": "log1p",
         "expm1": "expm1", "sin": "sin", "cos": "cos"}


def generate_c(program, aliased=()):
    """The C source of a Program (kernels, then the entry `nf_main`).

    Kernel pointers are `restrict` except in the kernels whose indices are in
    `aliased`: those get an input and an output over the same memory (an
    in-place update), which `restrict` would make undefined behaviour.

    >>> src = generate_c(lower_program(kernels, configs, [A, B], [C]))
    >>> "int64_t nf_main(" in src
    True
    """
    parts = [vector_width(), PRELUDE]
    for n, func in enumerate(program.kernels):
        parts.append(_Function().kernel(func, n, restrict=n not in aliased))
    parts.append(_Function().entry(program, static_kernels=True))
    return "\n".join(parts)


def generate_entry(program):
    """The C source of `nf_main` alone: it calls kernel n through entry n of
    a kernel table the caller passes after the buffers (`args[len(inputs) +
    len(outputs)]`), into which it writes each kernel's address (e.g. entry
    0 of the table of a library built from `generate_c` of that kernel
    alone, which has the same parameters). The table is the caller's, not
    the library's: two steps whose entry C is the same share one loaded
    library (toolchain/library.py loads a path once) yet run their own
    kernels -- two networks that differ only in an activation, say.

    >>> "table[2]" in generate_entry(program)                   # doctest: +SKIP
    True
    """
    return "\n".join([vector_width(), PRELUDE, _Function().entry(program, static_kernels=False)])


def kernel_c(func, restrict=True):
    """The C function of one lowered kernel, without its name comment: two
    kernels with equal text compile to equal code (runtime/native.py
    compiles such kernels once).

    >>> kernel_c(lower_kernel(k, default_config(k), [])).startswith("static void")  # doctest: +SKIP
    True
    """
    return _Function().kernel(func, 0, restrict, comment=False)


def comment_safe(text):
    """`text` reduced to [A-Za-z0-9_] (for names in comments)."""
    return re.sub(r"[^A-Za-z0-9_]", "", str(text))[:64]


def _ctype(dtype):
    return dt.C_TYPES[dtype]


class _Function:
    """Prints one C function; names its buffers and variables by number."""

    def __init__(self):
        self.names, self.lines = {}, []   # names by id: the IR printed keeps every object alive

    def name(self, obj, prefix):
        n = self.names.get(id(obj))
        if n is None:
            n = self.names[id(obj)] = f"{prefix}{len(self.names)}"
        return n

    def emit(self, depth, text):
        self.lines.append("    " * depth + text)

    # -- functions ------------------------------------------------------------
    def kernel(self, func, index, restrict=True, comment=True):
        qual = "restrict " if restrict else ""
        params = [f"const {_ctype(b.dtype)}* {qual}{self.name(b, 'b')}" for b in func.inputs]
        params += [f"{_ctype(b.dtype)}* {qual}{self.name(b, 'b')}" for b in func.outputs]
        params.append("int64_t* restrict err")
        if comment:
            self.emit(0, f"/* kernel {index}: {comment_safe(func.hint.replace(' ', '_'))} */")
        self.emit(0, f"static void nf_kernel{index}({', '.join(params)}) {{")
        self.stmt(func.body, 1)
        self.emit(0, "}")
        return "\n".join(self.lines) + "\n"

    def entry(self, program, static_kernels):
        """`nf_main`, calling the kernels through a table: with
        `static_kernels`, the library's own (exported, holding its static
        kernels); else the one passed after the buffers. Each temporary is
        allocated just before the kernel that writes it and freed after the
        last kernel that reads it."""
        count = len(program.kernels)
        self.emit(0, "typedef void (*nf_kernel_fn)(void);")
        if static_kernels:
            first = ", ".join(f"(nf_kernel_fn)nf_kernel{n}" for n in range(count)) or "0"
            self.emit(0, f"nf_kernel_fn {TABLE}[{max(1, count)}] = {{{first}}};")
        table = TABLE if static_kernels else "table"
        self.emit(0, f"int64_t {ENTRY}(void* const* args, int64_t* err) {{")
        if not static_kernels:
            at = len(program.inputs) + len(program.outputs)
            self.emit(1, f"nf_kernel_fn const* table = (nf_kernel_fn const*)args[{at}];")
        for n, b in enumerate(program.inputs):
            t = _ctype(b.dtype)
            self.emit(1, f"const {t}* {self.name(b, 'b')} = (const {t}*)args[{n}];")
        for n, b in enumerate(program.outputs, len(program.inputs)):
            t = _ctype(b.dtype)
            self.emit(1, f"{t}* {self.name(b, 'b')} = ({t}*)args[{n}];")
        for b in program.temps:
            self.emit(1, f"{_ctype(b.dtype)}* {self.name(b, 'b')} = NULL;")
        temps = {id(b) for b in program.temps}
        last = {id(b): n for n, args in enumerate(program.calls) for b in args}
        for n, args in enumerate(program.calls):
            reads = len(program.kernels[n].inputs)
            for b in args[reads:]:
                name, t = self.names[id(b)], _ctype(b.dtype)
                if id(b) in temps:
                    self.emit(1, f"{name} = ({t}*)malloc(sizeof({t}) * {b.size});")
                    self.emit(1, f"if ({name} == NULL) {{ nf_oom(err); goto done; }}")
            func = program.kernels[n]
            params = [f"const {_ctype(b.dtype)}*" for b in func.inputs]
            params += [f"{_ctype(b.dtype)}*" for b in func.outputs] + ["int64_t*"]
            passed = [self.names[id(b)] + (f" + {off}" if off else "")
                      for b, off in zip(args, program.offsets[n])]
            self.emit(1, f"((void (*)({', '.join(params)})){table}[{n}])"
                         f"({', '.join(passed)}, err);")
            self.emit(1, "if (err[0] != 0) goto done;")
            for b in args[:reads]:
                if id(b) in temps and last[id(b)] == n:
                    self.emit(1, f"free({self.names[id(b)]});")
                    self.emit(1, f"{self.names[id(b)]} = NULL;")
        self.emit(0, "done:")
        for b in program.temps:
            self.emit(1, f"free({self.names[id(b)]});")
        self.emit(1, "return err[0];")
        self.emit(0, "}")
        return "\n".join(self.lines) + "\n"

    # -- statements -------------------------------------------------------------
    def stmt(self, s, d):
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x, d)
        elif isinstance(s, For):
            self._for(s, d)
        elif isinstance(s, Let):
            self.emit(d, f"const int64_t {self.name(s.var, 'v')} = {self.expr(s.value)};")
            self.stmt(s.body, d)
        elif isinstance(s, Allocate):
            self._allocate(s, d)
        elif isinstance(s, Store):
            self.emit(d, f"{self._element(s.buffer, s.index)} = {self.expr(s.value)};")
        elif isinstance(s, CopyTransposed):
            if s.size != 8 or s.dst.dtype != "float32" or s.src.dtype != "float32":
                raise TypeError(f"no C helper copies a {s.size}x{s.size} {s.src.dtype} "
                                "block transposed")
            self.emit(d, f"nf_transpose8_f32(&{self._element(s.dst, s.dst_index)}, "
                         f"{s.dst_stride}, &{self._element(s.src, s.src_index)}, "
                         f"{s.src_stride});")
        elif isinstance(s, IfThenElse):
            self.emit(d, f"if ({self.expr(s.cond)}) {{")
            self.stmt(s.then, d + 1)
            if s.else_ is not None:
                self.emit(d, "} else {")
                self.stmt(s.else_, d + 1)
            self.emit(d, "}")
        else:
            raise TypeError(f"cannot print statement {type(s).__name__}")

    def _for(self, s, d):
        plan = simd_plan(s) if s.kind == "vectorized" else None
        if plan is not None:
            print_simd(self, s, plan, d)
            return
        v = self.name(s.var, "v")
        if s.kind == "parallel":
            self.emit(d, "#pragma omp parallel for schedule(static)")
        elif s.kind == "vectorized" and s.reduction is not None:
            op, buf = s.reduction
            combine = "+" if op == "sum" else f"nf_{op}_{_SUFFIX[buf.dtype]}"
            self.emit(d, f"#pragma omp simd reduction({combine}:{self.name(buf, 'b')})")
        elif s.kind == "vectorized":  # (omp simd would keep accumulator tiles in memory)
            self.emit(d, "#pragma GCC ivdep")
        elif s.kind == "unrolled":
            self.emit(d, f"NF_UNROLL({s.unroll})")
        self.emit(d, f"for (int64_t {v} = {self.expr(s.begin)}; {v} < {self.expr(s.end)}; "
                     f"++{v}) {{")
        self.stmt(s.body, d + 1)
        self.emit(d, "}")

    def _allocate(self, s, d):
        b = s.buffer
        t, n = _ctype(b.dtype), self.name(b, "b")
        if b.scope == "stack":
            self.emit(d, f"{t} {n};" if b.size == 1 else f"{t} {n}[{b.size}];")
            self.stmt(s.body, d)
            return
        self.emit(d, f"{t}* restrict {n} = ({t}*)malloc(sizeof({t}) * {b.size});")
        self.emit(d, f"if ({n} == NULL) {{")
        self.emit(d + 1, "nf_oom(err);")
        self.emit(d, "} else {")
        self.stmt(s.body, d + 1)
        self.emit(d + 1, f"free({n});")
        self.emit(d, "}")

    def _element(self, buffer, index):
        n = self.name(buffer, "b")
        if buffer.scope == "stack" and buffer.size == 1:
            return n
        return f"{n}[{self.expr(index)}]"

    # -- expressions ---------------------------------------------------------------
    def expr(self, e):
        if isinstance(e, Const):
            return _const(e)
        if isinstance(e, IterVar):
            return self.name(e, "v")
        if isinstance(e, Load):
            return self._load(e)
        if isinstance(e, CDiv):
            return f"({self.expr(e.a)} {'/' if e.op == 'div' else '%'} {self._operand(e.b, e.a)})"
        if isinstance(e, Binary):
            return self._binary(e)
        if isinstance(e, Unary):
            return self._unary(e)
        if isinstance(e, Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        if isinstance(e, Blend):
            return (f"nf_blend_{_SUFFIX[e.dtype]}({self.expr(e.cond)}, {self.expr(e.t)}, "
                    f"{self.expr(e.f)})")
        if isinstance(e, Random):
            return f"nf_uniform_{_SUFFIX[e.dtype]}({', '.join(self.expr(c) for c in e.args)})"
        if isinstance(e, Cast):
            if e.dtype == dt.BOOL:
                return f"((uint8_t)({self.expr(e.a)} != 0))"
            return f"(({_ctype(e.dtype)})({self.expr(e.a)}))"
        raise TypeError(f"cannot print expression {type(e).__name__}")

    def _operand(self, e, other):
        """Like expr; an int64 constant next to another constant keeps its width."""
        if isinstance(e, Const) and e.dtype == "int64" and isinstance(other, Const):
            return f"INT64_C({e.value})"
        return self.expr(e)

    def _load(self, e):
        element = self._element(e.buffer, e.index)
        if not e.checks:
            return element
        binds = " ".join(f"const int64_t {self.name(c.var, 'v')} = {self.expr(c.value)};"
                         for c in e.checks)
        t = _ctype(e.dtype)
        value = element
        for c in reversed(e.checks):
            v = self.name(c.var, "v")
            value = (f"({v} < 0 || {v} >= {c.extent}) ? ({t})nf_oob(err, {c.site}, {v}) : "
                     f"{value}")
        return f"({{ {binds} {value}; }})"

    def _binary(self, e):
        a, b = self._operand(e.a, e.b), self._operand(e.b, e.a)
        op, t = e.op, e.a.dtype
        if op in _INFIX:
            return f"({a} {_INFIX[op]} {b})"
        if op in ("max", "min"):
            return f"nf_{op}_{_SUFFIX[t]}({a}, {b})"
        if op == "pow":
            return f"pow{'f' if t == 'float32' else ''}({a}, {b})"
        if op == "floordiv":
            if dt.is_int(t):
                return f"nf_floordiv_{_SUFFIX[t]}({a}, {b})"
            return f"floor{'f' if t == 'float32' else ''}({a} / {b})"
        if op == "mod":
            return f"nf_mod_{_SUFFIX[t]}({a}, {b})"
        raise TypeError(f"cannot print binary op {op}")

    def _unary(self, e):
        a, t, op = self.expr(e.a), e.dtype, e.op
        f = "f" if t == "float32" else ""
        one = "1.0f" if t == "float32" else "1.0"
        if op == "neg":
            return f"(-{a})"
        if op == "not":
            return f"(!{a})"
        if op == "abs":
            return f"fabs{f}({a})" if dt.is_float(t) else f"nf_abs_{_SUFFIX[t]}({a})"
        if op == "sigmoid":
            return f"({one} / ({one} + exp{f}(-{a})))"
        if op == "rsqrt":
            return f"({one} / sqrt{f}({a}))"
        if op == "sign":
            return f"nf_sign_{_SUFFIX[t]}({a})"
        if op in _LIBM:
            return f"{_LIBM[op]}{f}({a})"
        raise TypeError(f"cannot print unary op {op}")


def _const(c):
    v, t = c.value, c.dtype
    if t == dt.BOOL:
        return "((uint8_t)1)" if v else "((uint8_t)0)"
    if t == "int64":  # a small literal is an int, widened where it meets an int64
        if abs(v) < 1 << 31:
            return str(v) if v >= 0 else f"({v})"
        return "INT64_MIN" if v == -(1 << 63) else f"INT64_C({v})"
    if t == "int32":
        return "INT32_MIN" if v == -(1 << 31) else f"((int32_t){v})"
    cast = "" if t == "float32" else "(double)"
    if math.isnan(v):
        return f"({cast}NAN)"
    if math.isinf(v):
        return f"({cast}INFINITY)" if v > 0 else f"(-{cast}INFINITY)"
    exact = v == int(v) and abs(v) < 2 ** 53
    text = (f"{int(v)}.0" if exact else float.hex(v)) + ("f" if t == "float32" else "")
    return f"({text})" if v < 0 else text
