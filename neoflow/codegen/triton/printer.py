"""codegen/triton/printer: loop IR -> Triton source (one Python module).

The same `Program` the C backend prints, read the way schedule/loop_ir.py
describes: each top-level `parallel` loop of a kernel becomes one
`@triton.jit` function launched over a 1-D grid of programs, each program
a block of XBLOCK consecutive iterations of that loop ("lanes", a
[XBLOCK, 1] tensor). Statements run for every lane at once:

* a serial loop stays a loop; its bounds, when they vary across lanes, run
  from the block's smallest begin to its largest end with the body masked
  to each lane's own range;
* a `vectorized` loop that combines into a one-element stack accumulator
  becomes a block reduction: a [XBLOCK, RnBLOCK] register tile of partial
  results over RnBLOCK consecutive iterations (one pass when RnBLOCK covers
  the loop: a persistent reduction; else a loop of passes: a looped one),
  combined into the accumulator with tl.sum / tl.max / tl.min;
* one-element stack buffers (accumulators) are register values;
* an if is predication: its branches run under the mask & cond / mask &
  ~cond, and a select's sides are evaluated under their own masks, so a
  read guarded by a condition (padding) is masked by it;
* every tl.load and tl.store carries the mask of the lanes (and loop
  iterations) it runs for; a checked read (a gather) masks the lanes whose
  index is out of range and stores the read's site and index into `err`.

Top-level statements outside a parallel loop run as one program of one lane.
Heap buffers at a kernel's top level (kernel-local intermediates) and the
Program's temporaries are device tensors the runtime allocates.

Every value is computed in the tensor's own dtype (float32/float64, no
16-bit arithmetic), which is what both the GPU and the interpreter compute
correctly; functions Triton lacks (tanh, pow) are written with tl.exp/log.

Hands on: `TritonProgram` (source text + `Launch` list) for runtime/cuda.py.
"""
import math

from ...errors import NeoFlowError
from ...schedule.loop_ir import (Allocate, Blend, CDiv, CopyTransposed, For, IfThenElse, Let,
                                 Load, Seq, Store, expr_children, nodes)
from ...te import dtype as dt
from ...te.expr import Binary, Cast, Const, IterVar, Select, Unary

TL_DTYPES = {"float32": "tl.float32", "float64": "tl.float64", "int32": "tl.int32",
             "int64": "tl.int64", "bool": "tl.int1"}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">=", "eq": "==", "ne": "!=", "and": "&", "or": "|"}
_UNARY = {"exp": "tl.exp({})", "log": "tl.log({})", "sqrt": "_nf_sqrt({})",
          "sigmoid": "tl.sigmoid({})", "erf": "tl.erf({})", "floor": "tl.floor({})",
          "tanh": "_nf_tanh({})", "rsqrt": "(1.0 / _nf_sqrt({}))", "neg": "(-{})",
          "not": "({} == 0)", "sin": "tl.sin({})", "cos": "tl.cos({})", "ceil": "tl.ceil({})",
          "log1p": "_nf_log1p({})", "expm1": "_nf_expm1({})", "round": "_nf_round({})",
          "sign": "_nf_sign({})"}
_REDUCE = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min"}
_COMBINE = {"sum": "({} + {})", "max": "_nf_max({}, {})", "min": "_nf_min({}, {})"}
WIDE = (1 << 31) - 1        # sizes past this index in int64
MAX_PERSISTENT = 4096     # reduce points one persistent block may hold
BIG = {False: (1 << 31) - 1, True: 1 << 62}   # +/- infinity in bound reductions (by width)

PRELUDE = '''\
import triton
import triton.language as tl

NF_INF = tl.constexpr(float("inf"))
NF_NAN = tl.constexpr(float("nan"))


@triton.jit
def _nf_tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def _nf_sqrt(x):
    if x.dtype == tl.float32:
        return tl.sqrt_rn(x)
    else:
        return tl.sqrt(x)


@triton.jit
def _nf_log1p(x):
    # log(1 + x) without losing x's low bits (Goldberg): exact where 1 + x rounds to 1
    u = 1.0 + x
    return tl.where(u == 1.0, x, tl.log(u) * (x / (u - 1.0)))


@triton.jit
def _nf_expm1(x):
    # exp(x) - 1 without cancellation (Kahan): (u - 1) * x / log(u)
    u = tl.exp(x)
    v = u - 1.0
    e = tl.where(v == -1.0, -1.0, v * (x / tl.log(u)))
    return tl.where(u == 1.0, x, tl.where(u == NF_INF, u, e))


@triton.jit
def _nf_round(x):
    # to the nearest integer, halves to even (torch.round); |x| past the last
    # fraction bit is already an integer
    if x.dtype == tl.float32:
        big = 8388608.0
    else:
        big = 4503599627370496.0
    r = tl.floor(x + 0.5)
    odd = tl.floor(r * 0.5) * 2.0 != r
    r = tl.where(((r - x) == 0.5) & odd, r - 1.0, r)
    return tl.where(tl.abs(x) < big, r, x)


@triton.jit
def _nf_sign(x):
    # 1, -1 or 0 (NaN and -0.0 included), in x's dtype
    return tl.where(x > 0, 1, tl.where(x < 0, -1, 0)).to(x.dtype)


@triton.jit
def _nf_bf16(x):
    # float32 -> the nearest bfloat16 (ties to even), kept in float32: integer
    # rounding of the bits, exact on the GPU and in the interpreter (whose own
    # float32 -> bfloat16 cast truncates)
    u = x.to(tl.uint32, bitcast=True)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return tl.where(x != x, x, u.to(tl.float32, bitcast=True))


@triton.jit
def _nf_max(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def _nf_min(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def _nf_floordiv(a, b):
    q = a // b
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)


@triton.jit
def _nf_pow(a, b):
    m = tl.exp(b * tl.log(tl.abs(a)))
    odd = tl.floor(b * 0.5) * 2.0 != b
    whole = tl.floor(b) == b
    neg = tl.where(whole, tl.where(odd, -m, m), NF_NAN)
    zero = tl.where(b > 0, 0.0, tl.where(b == 0, 1.0, NF_INF))
    return tl.where(a > 0, m, tl.where(a == 0, zero, neg))
'''


class Launch:
    """One @triton.jit function of the source and how to launch it: `buffers`
    (loop-IR Buffers, in parameter order, then `err`), `numel` lanes over a
    grid of cdiv(numel, XBLOCK) programs, constexpr block sizes `blocks`
    ({"XBLOCK": 128, "R0BLOCK": 32}), `num_warps`, `num_stages`; `kernel` is
    the Program kernel it comes from."""

    def __init__(self, name, kernel, buffers, numel, blocks, num_warps, num_stages):
        self.name, self.kernel, self.buffers, self.numel = name, kernel, buffers, numel
        self.blocks, self.num_warps, self.num_stages = blocks, num_warps, num_stages

    @property
    def grid(self):
        return (-(-self.numel // self.blocks["XBLOCK"]),)

    def __repr__(self):
        return f"<Launch {self.name} numel={self.numel} {self.blocks} warps={self.num_warps}>"


class TritonProgram:
    """The generated module's `source` and its `launches` in run order."""

    def __init__(self, source, launches):
        self.source, self.launches = source, launches


def next_pow2(n):
    return 1 << max(0, int(n) - 1).bit_length()


def generate_triton(program, gpu_params, bf16=False):
    """Triton source of a Program; `gpu_params[n]` is kernel n's GPU schedule
    (schedule/config.py `GpuParams`: xblock, rblock, num_warps, num_stages).
    `bf16`: contractions read their float32 operands rounded to bfloat16
    (round to nearest even) and accumulate in float32 (torch.autocast's
    policy; see `is_contraction`); everything else stays float32.

    >>> tp = generate_triton(lower_program(kernels, configs, [A], [B]), [c.gpu for c in configs])
    >>> "@triton.jit" in tp.source                                  # doctest: +SKIP
    True
    """
    parts, launches = [PRELUDE], []
    for n, (func, params) in enumerate(zip(program.kernels, gpu_params)):
        for piece in _top_level(func.body):
            name = f"nf_k{n}_{len(launches)}"
            text, launch = _LaunchPrinter(name, n, params, bf16).launch(piece)
            parts.append(text)
            launches.append(launch)
    return TritonProgram("\n\n".join(parts) + "\n", launches)


def _top_level(body):
    """The kernel body cut into launch pieces: each parallel loop alone, runs
    of other statements together; top-level heap allocations are dropped
    (the runtime allocates them)."""
    while isinstance(body, Allocate) and body.buffer.scope == "heap":
        body = body.body
    stmts = body.stmts if isinstance(body, Seq) else (body,)
    pieces, run = [], []
    for s in stmts:
        if isinstance(s, For) and s.kind == "parallel":
            if run:
                pieces.append(Seq(run))
                run = []
            pieces.append(s)
        else:
            run.append(s)
    if run:
        pieces.append(Seq(run))
    return pieces


def heap_locals(body):
    """The heap buffers allocated at a kernel body's top level (in order)."""
    out = []
    while isinstance(body, Allocate) and body.buffer.scope == "heap":
        out.append(body.buffer)
        body = body.body
    return out


class _Scope:
    """What the statements being printed run under: the mask (a name), a
    zero tensor of the current shape (pointer offsets are broadcast to it)."""
    __slots__ = ("mask", "zero", "block", "shape")

    def __init__(self, mask, zero, block=False, shape="[XBLOCK, 1]"):
        self.mask, self.zero, self.block = mask, zero, block   # block: inside a block reduction
        self.shape = shape

    def under(self, mask):
        return _Scope(mask, self.zero, self.block, self.shape)


class _LaunchPrinter:
    def __init__(self, name, kernel, params, bf16=False):
        self.name, self.kernel, self.params, self.bf16 = name, kernel, params, bf16
        self.operands = set()       # ids of contraction operand loads read as bf16
        self.lines, self.names, self.count = [], {}, 0
        self.varying = set()        # ids of variables whose value differs across lanes
        self.regs = {}              # id(stack buffer) -> register variable name
        self.memo = [{}]            # per block: (id(expr), mask) -> temp name
        self.stored = set()         # ids of buffers this launch stores to
        self.buffers = []           # arg/heap buffers in parameter order
        self.blocks = {}
        self.wide = False

    # -- names -------------------------------------------------------------
    def fresh(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    def var(self, v):
        if id(v) not in self.names:
            raise NeoFlowError(f"triton codegen: variable {v.name} used unbound")
        return self.names[id(v)]

    def buf(self, b):
        if id(b) not in self.names:
            self.names[id(b)] = f"b{len(self.buffers)}"
            self.buffers.append(b)
        return self.names[id(b)]

    def emit(self, d, text):
        self.lines.append("    " * d + text)

    # -- the launch --------------------------------------------------------------
    def launch(self, piece):
        for n in nodes(piece):
            if isinstance(n, Store):
                self.stored.add(id(n.buffer))
            if isinstance(n, (Load, Store)) and n.buffer.scope != "stack":
                self.buf(n.buffer)
                self.wide |= n.buffer.size > WIDE
            if isinstance(n, CopyTransposed):
                raise NeoFlowError("triton codegen: a packed (transposed) copy has no GPU "
                                   "form; GPU configs never pack")
            if isinstance(n, Allocate) and n.buffer.scope == "heap":
                raise NeoFlowError("triton codegen: a heap buffer allocated inside a loop "
                                   "has no GPU form (GPU configs never compute_at or pack)")
        d = 1
        if isinstance(piece, For):
            begin, end = piece.begin, piece.end
            if not (isinstance(begin, Const) and isinstance(end, Const)):
                raise NeoFlowError("triton codegen: a parallel loop with non-constant bounds")
            numel = end.value - begin.value
        else:
            numel = 1
        self.wide |= numel > WIDE
        xblock = min(next_pow2(numel), self.params.xblock) if numel > 1 else 1
        self.blocks["XBLOCK"] = xblock
        self.emit(d, "pid = tl.program_id(0)")
        cast = ".to(tl.int64)" if self.wide else ""
        self.emit(d, f"xl = (pid{cast} * XBLOCK + tl.arange(0, XBLOCK)[:, None])")
        self.emit(d, f"xm = xl < {numel}")
        self.emit(d, "xz = xl * 0")
        scope = _Scope("xm", "xz")
        if isinstance(piece, For):
            self.names[id(piece.var)] = "x0"
            self.varying.add(id(piece.var))
            self.emit(d, f"x0 = xl + {begin.value}" if begin.value else "x0 = xl")
            self.stmt(piece.body, d, scope)
        else:
            self.stmt(piece, d, scope)
        params = [self.names[id(b)] for b in self.buffers] + ["err"]
        params += [f"{k}: tl.constexpr" for k in self.blocks]
        head = ["@triton.jit", f"def {self.name}({', '.join(params)}):"]
        text = "\n".join(head + self.lines)
        launch = Launch(self.name, self.kernel, list(self.buffers), numel, dict(self.blocks),
                        self.params.num_warps, self.params.num_stages)
        return text, launch

    # -- statements -----------------------------------------------------------
    def stmt(self, s, d, sc):
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x, d, sc)
        elif isinstance(s, For):
            self._for(s, d, sc)
        elif isinstance(s, Let):
            value = self.expr(s.value, d, sc)
            name = self.names[id(s.var)] = self.fresh("v")
            if self._is_varying(s.value):
                self.varying.add(id(s.var))
            self.emit(d, f"{name} = {value}")
            self.stmt(s.body, d, sc)
        elif isinstance(s, Allocate):
            b = s.buffer
            if b.size != 1:
                raise NeoFlowError(f"triton codegen: a stack buffer of {b.size} elements has "
                                   "no register form (GPU configs keep one-element "
                                   "accumulators)")
            reg = self.regs[id(b)] = self.fresh("acc")
            self.emit(d, f"{reg} = {sc.zero}.to({TL_DTYPES[b.dtype]})")
            self.stmt(s.body, d, sc)
        elif isinstance(s, Store):
            self._store(s, d, sc)
        elif isinstance(s, IfThenElse):
            cond = self.expr(s.cond, d, sc)
            then = self._mask(d, f"{sc.mask} & ({cond})")
            self.stmt(s.then, d, sc.under(then))
            if s.else_ is not None:
                other = self._mask(d, f"{sc.mask} & (({cond}) == 0)")
                self.stmt(s.else_, d, sc.under(other))
        else:
            raise NeoFlowError(f"triton codegen: cannot print statement {type(s).__name__}")

    def _mask(self, d, text):
        name = self.fresh("m")
        self.emit(d, f"{name} = {text}")
        return name

    def _store(self, s, d, sc):
        b = s.buffer
        if b.scope == "stack":
            value = self.expr(s.value, d, sc)
            reg = self.regs[id(b)]
            self.emit(d, f"{reg} = tl.where({sc.mask}, ({value}), {reg})"
                         f".to({TL_DTYPES[b.dtype]})")
            return
        index = self.expr(s.index, d, sc)
        value = self.typed(s.value, b.dtype, d, sc)
        self.emit(d, f"tl.store({self.buf(b)} + ({index} + {sc.zero}), {value}, "
                     f"mask={sc.mask})")

    def typed(self, e, dtype, d, sc):
        """`e` as a tensor of `dtype` (a constant becomes a full tile)."""
        if isinstance(e, Const):
            value = e.value if dtype != dt.BOOL else bool(e.value)
            if dt.is_int(dtype) or dtype == dt.BOOL:
                value = int(value)
            return f"tl.full({sc.shape}, {_const(Const(value, dtype))}, {TL_DTYPES[dtype]})"
        return f"({self.expr(e, d, sc)}).to({TL_DTYPES[dtype]})"

    def _for(self, s, d, sc):
        if s.kind == "vectorized" and s.reduction is not None and not sc.block:
            return self._block_reduction(s, d, sc)
        begin, end = self.expr(s.begin, d, sc), self.expr(s.end, d, sc)
        varying = self._is_varying(s.begin) or self._is_varying(s.end)
        v = self.fresh("i")
        if varying:
            lo = f"tl.min(tl.where({sc.mask}, {begin}, {BIG[self.wide]}))"
            hi = f"tl.max(tl.where({sc.mask}, {end}, {-BIG[self.wide]}))"
        else:
            lo, hi = begin, end
        self.emit(d, f"for {v} in range({lo}, {hi}):")
        self.memo.append({})
        name = v
        if self.wide:
            name = self.fresh("i")
            self.emit(d + 1, f"{name} = {v}.to(tl.int64)")
        self.names[id(s.var)] = name
        inner = sc
        if varying:
            self.varying.add(id(s.var))
            inner = sc.under(self._mask(d + 1, f"{sc.mask} & ({name} >= {begin}) & "
                                               f"({name} < {end})"))
        self.emit(d + 1, "pass")
        self.stmt(s.body, d + 1, inner)
        self.memo.pop()

    def _block_reduction(self, s, d, sc):
        """A vectorized loop combining into a one-element accumulator: a register
        tile of RnBLOCK partial results per lane, then one block reduction."""
        op, acc = s.reduction
        k = sum(1 for key in self.blocks if key.startswith("R"))
        block = f"R{k}BLOCK"
        extent = self._extent(s)
        if extent is None:
            self.blocks[block] = self.params.rblock
        elif self.params.reduction == "persistent" and extent <= MAX_PERSISTENT:
            self.blocks[block] = next_pow2(extent)
        else:
            self.blocks[block] = min(next_pow2(extent), self.params.rblock)
        persistent = extent is not None and self.blocks[block] >= extent
        begin, end = self.expr(s.begin, d, sc), self.expr(s.end, d, sc)
        varying = self._is_varying(s.begin) or self._is_varying(s.end)
        t = TL_DTYPES[acc.dtype]
        outer = self.regs[id(acc)]
        tile = self.fresh("racc")
        ident = {"sum": "0", "max": "-NF_INF", "min": "NF_INF"}[op]
        if op != "sum" and dt.is_int(acc.dtype):
            ident = str(_int_identity(op, acc.dtype))
        self.emit(d, f"{tile} = tl.full([XBLOCK, {block}], {ident}, {t})")
        if varying:
            lo = f"tl.min(tl.where({sc.mask}, {begin}, {BIG[self.wide]}))"
            hi = f"tl.max(tl.where({sc.mask}, {end}, {-BIG[self.wide]}))"
        else:
            lo, hi = begin, end
        base = self.fresh("r")
        if persistent and not varying:
            self.emit(d, f"{base} = {lo}")
            dd = d
        else:
            self.emit(d, f"for {base} in range({lo}, {hi}, {block}):")
            dd = d + 1
        self.memo.append({})
        rv = self.fresh("rv")
        cast = ".to(tl.int64)" if self.wide else ""
        self.emit(dd, f"{rv} = ({base} + tl.arange(0, {block})[None, :]){cast}")
        zero = self.fresh("rz")
        self.emit(dd, f"{zero} = {sc.zero} + {rv} * 0")
        self.names[id(s.var)] = rv
        self.varying.add(id(s.var))
        lower = f" & ({rv} >= {begin})" if varying else ""
        mask = self._mask(dd, f"{sc.mask} & ({rv} < {end}){lower}")
        self.regs[id(acc)] = tile
        if self.bf16 and op == "sum":
            self.operands |= contraction_operands(s.body, acc)
        self.stmt(s.body, dd, _Scope(mask, zero, True, f"[XBLOCK, {block}]"))
        self.regs[id(acc)] = outer
        self.memo.pop()
        part = f"{_REDUCE[op]}({tile}, 1)[:, None]"
        self.emit(d, f"{outer} = tl.where({sc.mask}, {_COMBINE[op].format(outer, part)}, "
                     f"{outer}).to({t})")

    def _extent(self, s):
        if isinstance(s.begin, Const) and isinstance(s.end, Const):
            return max(1, s.end.value - s.begin.value)
        return None

    def _is_varying(self, e):
        if isinstance(e, Load):
            return True
        return any(id(v) in self.varying for v in _free(e))

    # -- expressions ------------------------------------------------------------
    def expr(self, e, d, sc):
        if isinstance(e, Const):
            if dt.is_int(e.dtype) and not -(1 << 31) <= e.value < 1 << 31:
                return f"tl.full({sc.shape}, {int(e.value)}, tl.int64)"
            return _const(e)
        if isinstance(e, IterVar):
            return self.var(e)
        key = (id(e), sc.mask)
        for layer in reversed(self.memo):
            if key in layer:
                return layer[key]
        text = self._expr(e, d, sc)
        if isinstance(e, Load) and (e.buffer.scope == "stack" or id(e.buffer) in self.stored):
            return text                     # its value changes as the launch stores
        name = self.fresh("t")
        self.emit(d, f"{name} = {text}")
        self.memo[-1][key] = name
        return name

    def _expr(self, e, d, sc):
        if isinstance(e, Load):
            return self._load(e, d, sc)
        if isinstance(e, CDiv):
            a, b = self.expr(e.a, d, sc), self.expr(e.b, d, sc)
            return f"({a} {'//' if e.op == 'div' else '%'} {b})"
        if isinstance(e, Binary):
            return self._binary(e, d, sc)
        if isinstance(e, Unary):
            a = self.expr(e.a, d, sc)
            if e.op == "abs":
                return f"tl.abs({a})"
            if e.op not in _UNARY:
                raise NeoFlowError(f"triton codegen: no form for unary op {e.op}")
            return _UNARY[e.op].format(a)
        if isinstance(e, (Select, Blend)):
            cond = self.expr(e.cond, d, sc)
            then = self._mask(d, f"{sc.mask} & ({cond})")
            other = self._mask(d, f"{sc.mask} & (({cond}) == 0)")
            t = self.expr(e.t, d, sc.under(then))
            f = self.expr(e.f, d, sc.under(other))
            return f"tl.where({cond}, {t}, {f})"
        if isinstance(e, Cast):
            if isinstance(e.a, Const):
                return self.typed(e.a, e.dtype, d, sc)
            a = self.expr(e.a, d, sc)
            if e.dtype == dt.BOOL:
                return f"({a} != 0)"
            return f"({a}).to({TL_DTYPES[e.dtype]})"
        raise NeoFlowError(f"triton codegen: cannot print expression {type(e).__name__}")

    def _load(self, e, d, sc):
        if e.buffer.scope == "stack":
            return self.regs[id(e.buffer)]
        mask = sc.mask
        for c in e.checks:
            value = self.expr(c.value, d, sc)
            name = self.names[id(c.var)] = self.fresh("g")
            self.varying.add(id(c.var))
            self.emit(d, f"{name} = {value} + {sc.zero}")
            ok = self.fresh("ok")
            self.emit(d, f"{ok} = ({name} >= 0) & ({name} < {c.extent})")
            bad = self._mask(d, f"{mask} & ({ok} == 0)")
            self.emit(d, f"tl.store(err + {sc.zero}, ({sc.zero} + {c.site + 1}).to(tl.int64), "
                         f"mask={bad})")
            self.emit(d, f"tl.store(err + 1 + {sc.zero}, ({name}).to(tl.int64), mask={bad})")
            mask = self._mask(d, f"{mask} & {ok}")
        index = self.expr(e.index, d, sc)
        load = f"tl.load({self.buf(e.buffer)} + ({index} + {sc.zero}), mask={mask}, other=0)"
        return f"_nf_bf16({load})" if id(e) in self.operands else load

    def _binary(self, e, d, sc):
        a, b = self.expr(e.a, d, sc), self.expr(e.b, d, sc)
        op, t = e.op, e.a.dtype
        if op == "div" and dt.is_float(t):
            return f"tl.div_rn({a}, {b})" if t == "float32" else f"({a} / {b})"
        if op in _INFIX:
            return f"({a} {_INFIX[op]} {b})"
        if op == "max":
            return f"_nf_max({a}, {b})"
        if op == "min":
            return f"_nf_min({a}, {b})"
        if op == "pow":
            if dt.is_int(t):
                return f"_nf_pow(({a}).to(tl.float64), ({b}).to(tl.float64)).to({TL_DTYPES[t]})"
            return f"_nf_pow({a}, {b})"
        if op == "floordiv":
            return f"_nf_floordiv({a}, {b})" if dt.is_int(t) else f"tl.floor({a} / {b})"
        if op == "mod":
            if dt.is_int(t):
                return f"({a} - _nf_floordiv({a}, {b}) * {b})"
            return f"({a} - tl.floor({a} / {b}) * {b})"
        raise NeoFlowError(f"triton codegen: no form for binary op {op}")


def contraction_operands(body, acc):
    """The float32 Loads a block reduction multiplies into `acc` when its update
    is `acc + a * b` (a sum of products: matmul, conv and their gradients);
    under a select (padding) the guarded read counts too. Other sums
    (softmax's, a norm's, a loss's) have none: both factors must be reads."""
    out = set()
    for n in nodes(body):
        if isinstance(n, Store) and n.buffer is acc and isinstance(n.value, Binary) and \
                n.value.op == "add" and isinstance(n.value.b, Binary) and n.value.b.op == "mul":
            picked = [_operand_load(side) for side in (n.value.b.a, n.value.b.b)]
            if all(m is not None and m.dtype == "float32" for m in picked):
                out |= {id(m) for m in picked}
    return out


def _operand_load(side):
    """The Load `side` is (through selects with a constant other side: padding),
    or None."""
    if isinstance(side, Load) and side.buffer.scope != "stack":
        return side
    if isinstance(side, (Select, Blend)):
        if isinstance(side.f, Const):
            return _operand_load(side.t)
        if isinstance(side.t, Const):
            return _operand_load(side.f)
    return None


def _free(e):
    """The IterVars an IR expression reads (Load indices included)."""
    out, stack = [], [e]
    while stack:
        n = stack.pop()
        if isinstance(n, IterVar):
            out.append(n)
        else:
            stack.extend(expr_children(n))
    return out


def _int_identity(op, dtype):
    bits = 31 if dtype == "int32" else 63
    return -(1 << bits) if op == "max" else (1 << bits) - 1


def _const(c):
    v, t = c.value, c.dtype
    if t == dt.BOOL:
        return "True" if v else "False"
    if dt.is_int(t):
        return f"({int(v)})"
    v = float(v)
    if math.isnan(v):
        return "NF_NAN"
    if math.isinf(v):
        return "NF_INF" if v > 0 else "(-NF_INF)"
    return f"({v!r})"
