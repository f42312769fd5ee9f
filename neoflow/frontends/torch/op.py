"""frontends/torch/op: `nf.torch.op` -- a function that builds a tensor
expression becomes a registered torch.library custom operator.

The op's schema comes from the function's signature (tensors, and int /
float / bool values passed through). Its fake function builds the
expression (not the kernel) to learn the output shapes; its real function
builds the kernel once per (shapes, dtypes, non-tensor values) under a lock
and calls it on zero-copy views of the inputs. Its backward is a second
registered op whose expression is `nf.grad` of the first (the incoming
gradients as heads), and that op has a backward of its own, so double
backward works wherever nf.grad can differentiate again.

Hands on: `op` (the decorator), `Level` (one level's expression) and
`TorchOp` (one level registered with torch).
"""
import inspect
import threading

import torch

from ...api import build
from ...autodiff import grad
from ...errors import InputError, NeoFlowError
from ...te import compute, const, placeholder
from ...te.tensor import Tensor
from .convert import check_tensor, te_dtype, to_array, to_torch, torch_dtype
from .direct import Direct

_SCALARS = {int: "int", float: "float", bool: "bool"}
_LEVELS = 3          # the op, its backward, the backward's backward (double backward)
_EMPTY = inspect.Parameter.empty


def op(name, *, outputs=1, target="cpu"):
    """Register the decorated tensor-expression function as a torch custom op.

    `name` is "namespace::opname". Parameters without annotation (or
    annotated torch.Tensor) are tensors: the function receives placeholders
    shaped and typed like the call's tensors; int / float / bool annotated
    ones are passed through as Python values (part of the kernel cache key).
    The function returns one Tensor, or a tuple of `outputs` Tensors.
    Returns the `torch.library.CustomOpDef` (callable like the function).

    >>> @nf.torch.op("mylib::scale_add")
    ... def scale_add(x, y, alpha: float = 2.0):
    ...     return nf.compute(x.shape, lambda i: x[i] * alpha + y[i])
    >>> scale_add(torch.ones(3), torch.ones(3))
    tensor([3., 3., 3.])
    """
    if target != "cpu":
        raise NeoFlowError(f"nf.torch.op('{name}'): target {target!r}: only 'cpu' is supported")
    if not isinstance(name, str) or "::" not in name:
        raise NeoFlowError(f"nf.torch.op: name {name!r} must be 'namespace::opname'")
    if not isinstance(outputs, int) or outputs < 1:
        raise NeoFlowError(f"nf.torch.op('{name}'): outputs must be a positive int, "
                           f"got {outputs!r}")

    def decorate(fn):
        levels = [Level(name, _parameters(name, fn), outputs, _user_outputs(fn, outputs))]
        while len(levels) < _LEVELS:
            levels.append(levels[-1].gradient(name))
        below = None
        for level in reversed(levels):     # the deepest first: each level's autograd calls
            below = TorchOp(level, target, below)      # the level below it
        return below.custom_op

    return decorate


def _parameters(name, fn):
    """[(parameter name, "Tensor" | "int" | "float" | "bool", default)] of `fn`."""
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise NeoFlowError(f"nf.torch.op('{name}'): parameter '{p.name}': only plain "
                               "positional parameters are supported (no *args, **kwargs or "
                               "keyword-only ones)")
        ann = p.annotation
        if ann is _EMPTY or ann is torch.Tensor:
            kind = "Tensor"
        elif ann in _SCALARS:
            kind = _SCALARS[ann]
        else:
            raise NeoFlowError(f"nf.torch.op('{name}'): parameter '{p.name}' is annotated "
                               f"{ann!r}; expected none (a tensor), torch.Tensor, int, float "
                               "or bool")
        if kind == "Tensor" and p.default is not _EMPTY:
            raise NeoFlowError(f"nf.torch.op('{name}'): tensor parameter '{p.name}' may not "
                               "have a default")
        out.append((p.name, kind, p.default))
    return out


def _user_outputs(fn, n_out):
    """The user's function as level 0's expression builder, its result checked."""
    def outputs(values):
        result = fn(*values)
        outs = [result] if isinstance(result, Tensor) else \
            list(result) if isinstance(result, (tuple, list)) else None
        if outs is None or len(outs) != n_out or not all(isinstance(t, Tensor) for t in outs):
            raise NeoFlowError(f"the function must return {n_out} nf Tensor(s) "
                               f"(outputs={n_out}), got {result!r}")
        return outs
    return outputs


class Level:
    """One level of an op: its registered name, params [(name, kind,
    default)], output count and `outputs(values) -> [Tensor]` (values:
    placeholders and Python scalars in params order). Level k+1 is the
    gradient of level k's outputs with respect to its tensor inputs, with one
    extra tensor argument per level-k output (its incoming gradient)."""

    def __init__(self, name, params, n_out, outputs, depth=0):
        self.name, self.params, self.n_out, self.outputs = name, params, n_out, outputs
        self.depth = depth

    def gradient(self, base):
        """The next level (named base_backward, base_backward2, ...)."""
        name = f"{base}_backward" + (str(self.depth + 1) if self.depth else "")
        n_args, kinds, above = len(self.params), [k for _, k, _ in self.params], self.outputs
        params = [(p, kind, _EMPTY) for p, kind, _ in self.params] + \
            [(f"grad{self.depth}_{j}", "Tensor", _EMPTY) for j in range(self.n_out)]

        def outputs(values):
            args, heads = values[:n_args], values[n_args:]
            outs = above(args)
            wrt = [v for v, kind in zip(args, kinds) if kind == "Tensor"]
            total = None
            for out, head in zip(outs, heads):
                if out.dtype not in ("float32", "float64"):
                    continue                   # an integer output has no gradient
                if tuple(head.shape) != tuple(out.shape) or head.dtype != out.dtype:
                    raise InputError(f"gradient '{head.name}': expected shape {out.shape} "
                                     f"and dtype {out.dtype}, got {head.shape} {head.dtype}")
                gs = list(grad(out, wrt, head=head))
                total = gs if total is None else [a + b for a, b in zip(total, gs)]
            return total if total is not None else [_zeros_like(w) for w in wrt]

        return Level(name, params, kinds.count("Tensor"), outputs, self.depth + 1)


def _zeros_like(w):
    """A zero Tensor shaped and typed like `w` (no output is differentiable)."""
    return compute(w.shape, lambda *i: const(0, w.dtype), name=f"zero_{w.name}")


class _Entry:
    """One (shapes, dtypes, values) of one level: the expression's
    placeholders and outputs and, once a real call needed it, the kernel
    (`function`) and its direct entry point (`direct`, None where the
    function's own call is needed)."""

    def __init__(self, placeholders, outs):
        self.placeholders, self.outs, self.function, self.direct = placeholders, outs, None, None


def _plain_eager():
    """Whether a call may skip torch's dispatcher: eager mode, no torch
    function or dispatch mode (fake tensors, opcheck), no functorch
    transform, no tracing -- everything else takes the registered op."""
    return not (torch.compiler.is_compiling() or torch._C._is_torch_function_mode_enabled()
                or torch._C._len_torch_dispatch_stack()
                or torch._C._functorch.peek_interpreter_stack() is not None
                or torch._C._get_tracing_state())


_PLAIN = (torch.Tensor, torch.nn.Parameter)


class _EagerOp(torch._library.custom_ops.CustomOpDef):
    """The CustomOpDef `nf.torch.op` returns: in plain eager mode with plain
    CPU tensors its call runs the kernel (and, where a tensor needs a
    gradient, the autograd.Function `_Autograd`) without torch's dispatcher
    and torch.library's generated wrappers; anything else -- compile,
    fake tensors, other devices, keyword arguments -- takes the registered
    op. `torch.ops.<namespace>.<name>` is always the registered op."""

    def __call__(self, *args, **kwargs):
        op = self._neoflow
        full = op.complete(args) if not kwargs and _plain_eager() else None
        if full is None:
            return super().__call__(*args, **kwargs)
        grad = False
        for i in op.tensor_at:
            t = full[i]
            if type(t) not in _PLAIN or not t.is_cpu:
                return super().__call__(*args, **kwargs)
            grad = grad or t.requires_grad
        if grad and op.below is not None and torch.is_grad_enabled():
            outs = _Autograd.apply(op, *full)
            return outs if op.tuple else outs[0]
        outs = op.run(full)
        return tuple(outs) if op.tuple else outs[0]


class _Autograd(torch.autograd.Function):
    """One op's forward and backward as a plain autograd.Function (the eager
    fast path of `_EagerOp`; the same functions as its registered autograd)."""

    @staticmethod
    def forward(ctx, op, *args):
        outs = op.run(args)
        ctx.op = op
        op.setup_context(ctx, args, outs)
        integer = [o for o in outs if not o.dtype.is_floating_point]
        if integer:
            ctx.mark_non_differentiable(*integer)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + ctx.op.backward(ctx, *grads)


class TorchOp:
    """A `Level` registered as a torch custom op (`custom_op`), with a fake
    function and, when `below` (the next level's TorchOp) is given, autograd."""

    def __init__(self, level, target, below):
        self.name, self.params, self.n_out = level.name, level.params, level.n_out
        self.level, self.target, self.below = level, target, below
        self.tuple = level.depth > 0 or level.n_out > 1
        self.tensor_at = [i for i, (_, kind, _) in enumerate(self.params) if kind == "Tensor"]
        self.scalar_at = [i for i, (_, kind, _) in enumerate(self.params) if kind != "Tensor"]
        self._defaults = [d for _, _, d in self.params]
        self._cache, self._lock = {}, threading.Lock()
        self.custom_op = torch.library.custom_op(
            self.name, self._real, mutates_args=(), device_types="cpu", schema=self._schema())
        self.custom_op.register_fake(self._fake)
        if below is not None:
            self.custom_op.register_autograd(self.backward, setup_context=self.setup_context)
        self.custom_op.__class__ = _EagerOp
        self.custom_op._neoflow = self

    def _schema(self):
        args = [f"{kind} {p}" + ("" if default is _EMPTY else f"={default!r}")
                for p, kind, default in self.params]
        outs = "(" + ", ".join(["Tensor"] * self.n_out) + ")" if self.tuple else "Tensor"
        return f"({', '.join(args)}) -> {outs}"

    def complete(self, args):
        """`args` with the trailing parameters' defaults filled in, or None
        where they do not make a full call (the registered op says why)."""
        n = len(args)
        if n == len(self.params):
            return args
        if n > len(self.params) or any(d is _EMPTY for d in self._defaults[n:]):
            return None
        return tuple(args) + tuple(self._defaults[n:])

    # --- building -------------------------------------------------------------------------
    def _entry(self, args, concrete=True):
        """The cache entry for a call's arguments (its expression built once,
        locked; the arguments checked once, when the entry is made: the key
        holds every tensor's shape and dtype, and the op runs on the CPU).
        A concrete shape is its own key (a torch.Size hashes and compares as
        the tuple of its ints); a fake one is read as ints."""
        key = tuple(((a.shape if concrete else tuple(int(n) for n in a.shape)), a.dtype)
                    if kind == "Tensor" else (kind, a)
                    for a, (_, kind, _) in zip(args, self.params))
        entry = self._cache.get(key)
        if entry is None:
            with self._lock:
                entry = self._cache.get(key)
                if entry is None:
                    self._check(args)
                    entry = self._cache[key] = self._express(args)
        return entry

    def _express(self, args):
        """Placeholders for the call's tensors and the level's output tensors."""
        placeholders, values = [], []
        for a, (pname, kind, _) in zip(args, self.params):
            if kind == "Tensor":
                shape = tuple(int(s) for s in a.shape)
                ph = placeholder(shape, te_dtype(a.dtype, f"{self.name}: argument '{pname}'"),
                                 name=pname)
                placeholders.append(ph)
                values.append(ph)
            else:
                values.append(a)
        try:
            outs = self.level.outputs(values)
        except NeoFlowError as e:
            shapes = ", ".join(f"{p.name}: {list(p.shape)} {p.dtype}" for p in placeholders)
            raise type(e)(f"{self.name} (arguments {shapes}): {e}") from e
        return _Entry(placeholders, outs)

    def _function(self, entry):
        """The entry's compiled kernel, built on first use (locked)."""
        if entry.function is None:
            with self._lock:
                if entry.function is None:
                    try:
                        function = build(entry.outs, entry.placeholders, target=self.target)
                    except NeoFlowError as e:
                        raise type(e)(f"{self.name}: {e}") from e
                    entry.direct = Direct.of(function)
                    entry.function = function
        return entry.function

    # --- the op's functions ---------------------------------------------------------------
    def _check(self, args):
        for a, (pname, kind, _) in zip(args, self.params):
            if kind == "Tensor":
                check_tensor(a, f"{self.name}: argument '{pname}'")

    def run(self, args):
        """The op's results (a list of fresh torch tensors) for a call's
        arguments: the kernel's entry point called directly where it can be,
        else -- and to raise an error the kernels report -- the function's
        own checked call."""
        entry = self._entry(args)
        function = entry.function or self._function(entry)
        tensors = [args[i] for i in self.tensor_at]
        if entry.direct is not None:
            outs = entry.direct(tensors)
            if outs is not None:
                return outs
        try:
            results = function(*[to_array(t) for t in tensors])
        except NeoFlowError as e:
            raise type(e)(f"{self.name}: {e}") from e
        return [to_torch(r) for r in ((results,) if not isinstance(results, tuple)
                                      else results)]

    def _real(self, *args):
        outs = self.run(args)
        return tuple(outs) if self.tuple else outs[0]

    def _fake(self, *args):
        self._check(args)
        entry = self._entry(args, concrete=False)
        outs = [torch.empty(t.shape, dtype=torch_dtype(t.dtype)) for t in entry.outs]
        return tuple(outs) if self.tuple else outs[0]

    # --- autograd -------------------------------------------------------------------------
    def setup_context(self, ctx, inputs, output):
        ctx.scalars = [inputs[i] for i in self.scalar_at]
        ctx.save_for_backward(*[inputs[i] for i in self.tensor_at])
        outs = (output,) if isinstance(output, torch.Tensor) else output
        ctx.out_meta = [(o.shape, o.dtype) for o in outs]

    def backward(self, ctx, *grads):
        args = [None] * len(self.params)
        for i, t in zip(self.tensor_at, ctx.saved_tensors):
            args[i] = t
        for i, v in zip(self.scalar_at, ctx.scalars):
            args[i] = v
        heads = [g if g is not None else torch.zeros(shape, dtype=dtype)
                 for g, (shape, dtype) in zip(grads, ctx.out_meta)]
        results = iter(self.below.custom_op(*args, *heads))
        out = [None] * len(self.params)
        for i in self.tensor_at:
            g = next(results)
            out[i] = g if g is not None and args[i].dtype.is_floating_point else None
        return tuple(out)
