"""graph/dot: a partition as a Graphviz DOT graph, for people.

One cluster per kernel (its stages as boxes: name, shape, op class, what
was inlined into it; kernel-local stages dashed), leaf inputs as ellipses,
and an edge per tensor read between them -- inside a kernel drawn grey,
between kernels (a pass through memory) black and labelled with the bytes.
Nothing here needs the graphviz package or the `dot` program: this is the
text; graph/explain hands it to graphviz.Digraph when that is installed.

Hands on: DOT source lines (`dot_lines`) and the whole graph (`to_dot`).
"""
from ..te.visit import tensor_inputs
from .memory import nbytes
from .ops_class import op_class


def _quote(*lines):
    """A DOT string literal of `lines` (escaped), one line each."""
    return '"' + "\\n".join(str(s).replace("\\", "\\\\").replace('"', '\\"')
                             for s in lines) + '"'


def dot_lines(part, kernels):
    """The body lines of the DOT graph of `kernels` (of the Partition `part`).

    >>> lines = dot_lines(part, kernels_of(part))                  # doctest: +SKIP
    >>> lines[0]                                                   # doctest: +SKIP
    'rankdir=TB;'
    """
    lines = ["rankdir=TB;", "node [fontname=Helvetica, fontsize=10];"]
    node, home = {}, {}
    for n, k in enumerate(kernels):
        for t in k.stages:
            node[id(t)], home[id(t)] = f"s{len(node)}", n
    leaves = {}
    for k in kernels:
        for t in k.inputs:
            if id(t) not in node and id(t) not in leaves:
                leaves[id(t)] = t
    for i, t in leaves.items():
        node[i] = f"l{len(node)}"
        lines.append(f"{node[i]} [shape=ellipse, label={_quote(f'{t.name} {t.shape}')}];")
    for n, k in enumerate(kernels):
        lines.append(f"subgraph cluster_{n} {{")
        lines.append(f"  label={_quote(f'kernel {n} ({len(k.stages)} stages)')}; style=rounded;")
        outs = {id(t) for t in k.outputs}
        for t in k.stages:
            folded = [p.name for p in part.inlined.get(id(t), [])]
            label = [f"{t.name} {t.shape}", op_class(t)]
            if folded:
                label.append("inlined: " + ", ".join(folded))
            style = "solid" if id(t) in outs else "dashed"
            lines.append(f"  {node[id(t)]} [shape=box, style={style}, label={_quote(*label)}];")
        lines.append("}")
    for k in kernels:
        for t in k.stages:
            for p in tensor_inputs(t):
                if id(p) not in node:
                    continue
                if id(p) in home and home[id(p)] == home[id(t)]:
                    lines.append(f"{node[id(p)]} -> {node[id(t)]} [color=grey];")
                else:
                    lines.append(f"{node[id(p)]} -> {node[id(t)]} "
                                 f"[label={_quote(f'{nbytes(p)} B')}];")
    return lines


def to_dot(part, kernels, name="partition"):
    """The DOT source (text) of `kernels` of the Partition `part`.

    >>> print(to_dot(part, kernels_of(part)))                      # doctest: +SKIP
    digraph partition {
      rankdir=TB;
      ...
    """
    body = "\n".join("  " + line for line in dot_lines(part, kernels))
    return f"digraph {_quote(name)} {{\n{body}\n}}\n"
