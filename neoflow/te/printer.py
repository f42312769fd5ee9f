"""Readable text for expressions and tensors (for errors, repr and explain).

Hands on: strings only.
"""
from .expr import Binary, Cast, Const, IterVar, Read, Reduce, Select, Unary
from .random import Random

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
          "pow": "**", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==",
          "ne": "!=", "and": "&", "or": "|"}


def expr_str(e, depth=0):
    """One-line text of an expression, e.g. `sum(A[i, k] * B[k, j], k)`."""
    if depth > 12:
        return "..."
    s = lambda x: expr_str(x, depth + 1)  # noqa: E731
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, IterVar):
        return e.name
    if isinstance(e, Read):
        return f"{e.tensor.name}[{', '.join(s(i) for i in e.indices)}]"
    if isinstance(e, Binary):
        if e.op in _INFIX:
            return f"({s(e.a)} {_INFIX[e.op]} {s(e.b)})"
        return f"{e.op}({s(e.a)}, {s(e.b)})"
    if isinstance(e, Unary):
        return {"neg": f"-{s(e.a)}", "not": f"~{s(e.a)}"}.get(e.op, f"{e.op}({s(e.a)})")
    if isinstance(e, Select):
        return f"where({s(e.cond)}, {s(e.t)}, {s(e.f)})"
    if isinstance(e, Cast):
        return f"cast({s(e.a)}, {e.dtype})"
    if isinstance(e, Reduce):
        axes = ", ".join(a.name for a in e.axes)
        cond = "" if e.cond is None else f", where={s(e.cond)}"
        return f"{e.op}({s(e.body)}, {axes}{cond})"
    if isinstance(e, Random):
        return f"random_uniform({s(e.index)}, stream={s(e.stream)})"
    return object.__repr__(e)
