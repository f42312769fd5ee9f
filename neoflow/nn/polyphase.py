"""The input gradient of a strided convolution, split by phase (polyphase).

Derived by the index solver, dx[h] of a stride-s convolution sums over the
output rows o with 0 <= h + pad - s*o < K: a reduction whose range moves
with h, and taps w[h + pad - s*o] that step by s -- no operand reads
contiguously along h, so no schedule can vectorise or block it the way it
does a convolution. Splitting the padded input position P = h + pad by its
phase r = P % s (P = s*a + r) makes every phase a dense convolution of the
output gradient with the sub-kernel w[r + s*t]:

    D[r, a] = sum_t g[a - t] * w[r + s*t]          (0 <= r + s*t < K)

with a fixed range of about K/s taps, read g[a - t] at unit stride in a
and guarded at the edges like a padded convolution -- or, where the
output is small against the kernel (a 9x9 kernel over a 6x6 output) and
the guards would multiply more zeros than EDGE_WASTE allows, with the edges
bounding the tap loops instead (`where=`). `input_grad` builds
this one compute, with the phases of every strided dimension as outer
axes (the tap range's `where=` names them, which bounds its loops), and
dx[h] = D[(h + pad) % s, (h + pad) // s - a0] as a gather after it. The
convolution's compute carries it as its adjoint rule for the input
(autodiff/reverse.py), so a training step's strided convolutions -- and
conv_transpose2d, which is this gradient -- get it.

Each phase starts at its own first position where that start is affine in
the phase (always for stride 2): with padding 1, phase 0 holds positions
1..n and phase 1 0..n-1, so both are n long, not the n + 1 of their union
(`_phase_shift`). The phase compute carries its own input gradient as an
adjoint rule too (`_phases_input_grad`, for conv_transpose2d's input): the
strided convolution read back through the phases with the positions
guarded in the value, which the schedules block like a forward convolution.

It lives in the operator, as its gradient rule, rather than in the
schedule: the split changes the iteration space (phase axes, a new tap
variable t in place of the output row), which a schedule -- tiling and
ordering one fixed iteration space -- cannot express, and once written so
the phases are ordinary convolutions that the default heuristic, the search
and autodiff (conv_transpose2d's own gradients) handle with nothing new.

Hands on: the rule `attach` puts on a convolution's compute.
"""
from .. import te
from .common import affine, conjunction

EDGE_WASTE = 1.25   # taps multiplied by zero (edge guards in the value) per useful one above
                    # which the edges bound the tap loops instead: measured (one thread,
                    # loaded machine) on the CapsNet primary layer's dx (9x9/2, 20x20 -> 6x6,
                    # 2.8x waste): 448 ms bounded, 832 ms guarded, 624 ms the solver's form;
                    # DCGAN's 4x4/2 16->32 (1.2x): 61 ms guarded, 79 bounded, 108 the solver's
INPUT_EDGE_WASTE = 1.5  # the same bound for the phases' own input gradient (_phases_input_grad):
                        # guarded against the solver's bounded taps, DCGAN's generator (batch
                        # 16, quiet machine): 256->128ch from 4x4 (1.31x waste) 2.0 against
                        # 5.9 ms, 128->64ch from 8x8 (1.14x) 1.46 against 1.58; above 1.5
                        # not measured, so the solver's form stays
# UNSTRIDED: a stride-1 convolution's input gradient from `input_grad` (no
# phases: a correlation with the flipped taps, guarded at the edges up to
# EDGE_WASTE) rather than the index solver's, whose tap range moves with the
# output point and leaves the channel tile only the batch for rows: quiet
# machine, in process, 3x3 pad 1, YOLO-v1's 1024ch 7x7 batch 2 43.4 -> 26.3 ms,
# ResNet's 64ch 56x56 batch 8 14.6 -> 9.9 ms
DEPTHWISE_MIN_WIDTH = 64   # measured, one thread, loaded machine, ms, solver's form -> split,
                           # depthwise 3x3/2 dx: 24ch 112x112 217 -> 43; 96ch 56x56 78 -> 130;
                           # 144ch 28x28 47 -> 80 (the solver's form of a narrow image gets the
                           # channel-blocked tile, the phases, 4 taps each, do not)


def eligible(stride, dilation, ks, depthwise=False, width=None):
    """Whether the rule applies: each strided dimension is undilated and has
    at least `stride` taps (so no phase is empty; a 1x1 stride-2 shortcut
    keeps the solver's cheap gradient); a depthwise convolution (one channel
    in, one out per group) only over rows at least DEPTHWISE_MIN_WIDTH wide
    (`width`: the input's last dimension). With no strided dimension, a
    convolution with taps that is not depthwise: its gradient is the same
    compute with no phases, the edges guarded in the value (UNSTRIDED)."""
    strided = [d for d, s in enumerate(stride) if s > 1]
    if not strided:
        return not depthwise and any(k > 1 for k in ks)
    if depthwise and width < DEPTHWISE_MIN_WIDTH:
        return False
    return all(dilation[d] == 1 and ks[d] >= stride[d] for d in strided)


def attach(y, total, x, w, geometry, phase_weight=False):
    """Give the convolution `y` = conv(x, w), whose body holds the reduction
    `total`, its polyphase input gradient as the adjoint rule for `x`
    through `total` (autodiff/reverse.py, `_rules`); `phase_weight`: read
    the weight by phase (see `input_grad`)."""
    y.op.adjoint_rules = ((x, lambda g: input_grad(g, x, w, geometry, phase_weight), total),)


def input_grad(g, x, w, geometry, phase_weight=False):
    """dx of the convolution of `x` with `w` whose output gradient is `g`;
    `geometry` is (cdim, stride, lo, dilation, groups, out) as `_conv` has it.
    `phase_weight`: read the weight through `_phase_weight`, for a gradient
    that is itself differentiated by the weight (conv_transpose2d's forward).

    >>> dx = input_grad(g, x, w, (1, (2, 2), (4, 4), (1, 1), 1, (5, 5)))   # doctest: +SKIP
    """
    cdim, stride, lo, dilation, groups, out = geometry
    nd = len(stride)
    sizes, ks = x.shape[-nd:], w.shape[2:]
    cin, cout, cin_g = x.shape[cdim], w.shape[0], w.shape[1]
    cout_g = cout // groups
    phased = [d for d in range(nd) if stride[d] > 1]
    a0 = [lo[d] // stride[d] for d in range(nd)]
    shift = [_phase_shift(stride[d], lo[d], sizes[d]) for d in range(nd)]
    extent = [shift[d][2] for d in range(nd)]
    taps = [-(-ks[d] // stride[d]) for d in range(nd)]
    exact = _waste(stride, lo, dilation, ks, out, a0, shift, taps) > EDGE_WASTE
    wp = _phase_weight(w, stride, phased, taps) if phase_weight else None
    rj = te.reduce_axis(cout_g, name="rj") if cout_g > 1 else None
    rt = [te.reduce_axis(t, name=f"t{d}") if t > 1 else None for d, t in enumerate(taps)]

    def body(*idx):
        batch, ic = idx[:cdim], idx[cdim]
        phase = dict(zip(phased, idx[cdim + 1:cdim + 1 + len(phased)]))
        pos = idx[cdim + 1 + len(phased):]
        grp = None if groups == 1 else (ic if cin_g == 1 else ic // cin_g)
        oc = affine((grp, cout_g), (rj, 1))
        local = 0 if cin_g == 1 else (ic if groups == 1 else ic % cin_g)
        orow, guard, ranges = [], [], []
        for d in range(nd):
            s, t = stride[d], rt[d]
            if s > 1:   # P = s*(a + a0 + b + c*r) + r, k = r + s*t, o = a + a0 + b + c*r - t
                b, c, _ = shift[d]
                o = affine((pos[d], 1), (t, -1), (phase[d], c), const=a0[d] + b)
                if t is not None and ks[d] % s:
                    ranges.append(affine((phase[d], 1), (t, s)) <= ks[d] - 1)
                lows = [b + c * r for r in range(s)]
                first = a0[d] + min(lows) - (taps[d] - 1)
                last = a0[d] + max(lows) + extent[d] - 1
            else:       # P = h + lo, k = t, o = h + lo - dilation * t
                o = affine((pos[d], 1), (t, -dilation[d]), const=lo[d])
                first, last = lo[d] - dilation[d] * (ks[d] - 1), sizes[d] - 1 + lo[d]
            edge = ranges if exact else guard
            if first < 0:
                edge.append(o >= 0)
            if last > out[d] - 1:
                edge.append(o <= out[d] - 1)
            orow.append(o)
        axes = [a for a in [rj] + rt if a is not None]
        if not axes:    # one tap, one channel: the edges guard the value
            guard, ranges = guard + ranges, []
        value = g[tuple(batch) + (oc,) + tuple(orow)]
        cond = conjunction(guard)
        if cond is not None:
            value = te.where(cond, value, 0)
        if wp is not None:
            weight = wp[(oc, local) + tuple(phase[d] for d in phased) +
                        tuple(0 if t is None else t for t in rt)]
        else:
            weight = w[(oc, local) + tuple(
                affine((phase[d], 1), (rt[d], stride[d])) if d in phase else
                (0 if rt[d] is None else rt[d]) for d in range(nd))]
        prod = value * weight
        if not axes:
            return prod
        return te.sum(prod, axis=axes, where=conjunction(ranges))

    shape = x.shape[:cdim] + (cin,) + tuple(stride[d] for d in phased) + tuple(extent)
    D = te.compute(shape, body, name=f"d{x.name}_phases" if phased else f"d{x.name}")
    if _waste(stride, lo, dilation, ks, out, a0, shift, taps, of_input=True) <= INPUT_EDGE_WASTE:
        layout = (cdim, stride, lo, dilation, groups, out, a0, shift, taps)
        D.op.adjoint_rules = ((g, lambda adj: _phases_input_grad(adj, g, w, wp, layout),
                               D.op.body),)

    if not phased:
        return D

    def gather(*idx):
        batch, ic, h = idx[:cdim], idx[cdim], idx[cdim + 1:]
        phase = {d: (h[d] + lo[d]) % stride[d] for d in phased}
        pos = [(h[d] + lo[d]) // stride[d] - a0[d] - shift[d][0] - shift[d][1] * phase[d]
               if stride[d] > 1 else h[d] for d in range(nd)]
        return D[tuple(batch) + (ic,) + tuple(phase.values()) + tuple(pos)]

    return te.compute(x.shape, gather, name=f"d{x.name}")


def _phases_input_grad(adj, g, w, wp, layout):
    """The gradient of the phase compute D by its input `g` (a transposed
    convolution's input), given D's adjoint `adj`: the strided convolution
    read back through the phases,

        dg[n, oc, o] = sum_{c, r, t} adj[n, c, r, o - a0 - b - c*r + t] * w[oc, c, r + s*t]

    each phase's positions guarded in the value (zero outside the phase),
    so that, like a forward convolution, it has no tap range that moves with
    the output point. Derived by the index solver it had one (the positions
    bound the tap loops), which took the output rows from the channel tile:
    DCGAN's generator 58 GFLOP/s."""
    cdim, stride, lo, dilation, groups, out, a0, shift, taps = layout
    nd = len(stride)
    phased = [d for d in range(nd) if stride[d] > 1]
    ks, extent = w.shape[2:], adj.shape[-nd:]
    cout, cin_g = w.shape[0], w.shape[1]
    cout_g = cout // groups
    rc = te.reduce_axis(cin_g, name="rc") if cin_g > 1 else None
    rr = {d: te.reduce_axis(stride[d], name=f"r{d}") for d in phased}
    rt = [te.reduce_axis(n, name=f"t{d}") if n > 1 else None for d, n in enumerate(taps)]

    def body(*idx):
        batch, oc, o = idx[:cdim], idx[cdim], idx[cdim + 1:]
        grp = None if groups == 1 else oc // cout_g
        ic = affine((grp, cin_g), (rc, 1))
        pos, guard, ranges = [], [], []
        for d in range(nd):
            if d in rr:   # o = a + a0 + b + c*r - t
                b, c, _ = shift[d]
                a = affine((o[d], 1), (rr[d], -c), (rt[d], 1), const=-a0[d] - b)
                if rt[d] is not None and ks[d] % stride[d]:
                    ranges.append(affine((rr[d], 1), (rt[d], stride[d])) <= ks[d] - 1)
            else:         # o = h + lo - dilation * t
                a = affine((o[d], 1), (rt[d], dilation[d]), const=-lo[d])
            guard += [a >= 0, a <= extent[d] - 1]
            pos.append(a)
        value = te.where(conjunction(guard), adj[tuple(batch) + (ic,) + tuple(
            rr[d] for d in phased) + tuple(pos)], 0)
        local = 0 if cin_g == 1 else rc
        taps_ = tuple(0 if t is None else t for t in rt)
        if wp is not None:
            weight = wp[(oc, local) + tuple(rr[d] for d in phased) + taps_]
        else:
            weight = w[(oc, local) + tuple(
                affine((rr[d], 1), (taps_[d], stride[d])) if d in rr else taps_[d]
                for d in range(nd))]
        axes = [ax for ax in [rc, *rr.values(), *rt] if ax is not None]
        return te.sum(value * weight, axis=axes, where=conjunction(ranges))

    return te.compute(g.shape, body, name=f"d{g.name}")


def _phase_weight(w, stride, phased, taps):
    """The weight by phase: wp[oc, c, r..., t...] = w[oc, c, r + s*t...] (0
    past the kernel's end). Read through it, the phases' weight gradient is
    a dense contraction, and the solver maps it back to the kernel's taps by
    digits (k = r + s*t); read directly, that gradient indexes by k // s and
    k % s, and measured 70x slower (DCGAN's transposed convolutions). Not
    for a convolution's own input gradient: there the direct read measured
    2-3x faster (3x3/2, 64 and 128 channels)."""
    ks, nd = w.shape[2:], len(stride)

    def body(oc, c, *idx):
        phase = dict(zip(phased, idx[:len(phased)]))
        t = idx[len(phased):]
        k = [affine((phase[d], 1), (t[d], stride[d])) if d in phase else t[d]
             for d in range(nd)]
        edge = conjunction([k[d] <= ks[d] - 1 for d in phased if ks[d] % stride[d]])
        value = w[(oc, c) + tuple(k)]
        return value if edge is None else te.where(edge, value, 0)

    shape = w.shape[:2] + tuple(stride[d] for d in phased) + tuple(taps)
    return te.compute(shape, body, name=f"{w.name}_phases")


def _phase_shift(s, lo, size):
    """(b, c, extent) of one dimension: phase r's positions a run from
    b + c*r (after a0 = lo // s) over `extent` points. The input positions
    h of phase r = (h + lo) % s start at a = [r < lo % s]; where that start
    is affine in r (always for two phases) each phase starts at its own
    first position and the phases are as long as the longest one needs --
    (size / s for an even split: DCGAN's 4x4/2 onto 8x8 computes 4 of each
    phase, not 5); else all start at 0, over the union of their ranges.
    Unstrided: (0, 0, size).

    >>> _phase_shift(2, 1, 8), _phase_shift(2, 0, 8), _phase_shift(3, 1, 9)
    ((1, -1, 4), (0, 0, 4), (0, 0, 4))
    """
    if s == 1:
        return 0, 0, size
    starts = [int(r < lo % s) for r in range(s)]
    c = starts[1] - starts[0]
    if any(starts[r] != starts[0] + c * r for r in range(s)):
        return 0, 0, (lo + size - 1) // s - lo // s + 1
    ends = [(h + lo) // s - lo // s - starts[(h + lo) % s] for h in range(size)]
    return starts[0], c, max(ends) + 1


def _waste(stride, lo, dilation, ks, out, a0, shift, taps, of_input=False):
    """Taps the guarded form multiplies per tap that reads the output
    gradient (counted per dimension, multiplied); `of_input`: the same for
    the phases' own input gradient (`_phases_input_grad`), guarded in the
    phase positions."""
    ratio = 1.0
    for d, s in enumerate(stride):
        done = useful = 0
        b, c, extent = shift[d]
        for r in range(s):
            for a in range(extent):
                for t in range(taps[d]):
                    if s > 1 and r + s * t >= ks[d]:
                        continue
                    o = a + a0[d] + b + c * r - t if s > 1 else a + lo[d] - dilation[d] * t
                    done += 1
                    useful += 0 <= o < out[d]
        if of_input:    # per output point o, the (r, t) whose position a falls in the phase
            done = sum(1 for r in range(s) for t in range(taps[d])
                       if s == 1 or r + s * t < ks[d]) * out[d]
        ratio *= done / max(useful, 1)
    return ratio
