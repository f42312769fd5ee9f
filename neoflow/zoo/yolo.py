"""YOLO-v1 (Redmon, Divvala, Girshick and Farhadi, "You Only Look Once:
Unified, Real-Time Object Detection", CVPR 2016) with its detection loss, at
a reduced input size.

    the paper's 24 convolutions (Figure 3; 'same' padding, leaky relu 0.1)
    with its 2x2 max pools - flatten - dense `hidden` - leaky relu - dense
    S x S x (5B + C) (linear) -> per cell B boxes (x, y, w, h, confidence)
    then C class scores
`layers` is the convolution table: ("conv", kernel, channels, stride) or
("pool",). The default keeps the paper's table at 112x112 -- a quarter of
its 448 -- and its 7x7 grid by dropping the fourth max pool and the last
convolution's stride 2; `hidden` is 512 (the paper: 4096, a 200M-weight
dense layer at this grid) and there is no dropout (the twin must be
deterministic).

The loss (the paper's eq. 3, summed over cells, averaged over images):
    lambda_coord * sum_obj,resp [(x - x')^2 + (y - y')^2
                                 + (sqrt w - sqrt w')^2 + (sqrt h - sqrt h')^2]
    + sum_obj,resp (c - 1)^2 + lambda_noobj * sum_others c^2
    + sum_obj cells sum_classes (p - p')^2
The box responsible for a cell's object is the one whose box has the
largest IoU with the object's (the first on ties), chosen with comparisons
in the expression language; its confidence target is 1 (as most
reimplementations; the paper's IoU target needs a stop-gradient). Predicted
widths enter as sign(w) sqrt(|w| + 1e-6), so the linear outputs may be
negative. The target holds per cell (x, y, w, h, object?, one-hot class):
x, y in the cell, w, h relative to the image.

Hands on: the `NETWORK` record (see zoo.network).
"""
import numpy as np

from .. import nn, te
from ..nn.common import conjunction
from .layers import leaky_relu
from .network import Network

LAMBDA_COORD, LAMBDA_NOOBJ, SLOPE, EPS = 5.0, 0.5, 0.1, 1e-6

PAPER_LAYERS = (
    ("conv", 7, 64, 2), ("pool",), ("conv", 3, 192, 1), ("pool",),
    ("conv", 1, 128, 1), ("conv", 3, 256, 1), ("conv", 1, 256, 1), ("conv", 3, 512, 1), ("pool",),
    *(("conv", 1, 256, 1), ("conv", 3, 512, 1)) * 4, ("conv", 1, 512, 1), ("conv", 3, 1024, 1),
    ("pool",),
    *(("conv", 1, 512, 1), ("conv", 3, 1024, 1)) * 2, ("conv", 3, 1024, 1), ("conv", 3, 1024, 2),
    ("conv", 3, 1024, 1), ("conv", 3, 1024, 1))


def reduced_layers(layers=PAPER_LAYERS):
    """The table at a quarter of the input size with the same grid: without
    the last max pool, the last stride-2 convolution at stride 1.

    >>> sum(1 for layer in reduced_layers() if layer[0] == "pool")
    3
    """
    last_pool = max(n for n, layer in enumerate(layers) if layer[0] == "pool")
    out = [layer for n, layer in enumerate(layers) if n != last_pool]
    last_stride = max(n for n, layer in enumerate(out) if layer[0] == "conv" and layer[3] == 2)
    out[last_stride] = out[last_stride][:3] + (1,)
    return tuple(out)


def grid(image, layers):
    """The side of the output grid: the image over every stride and pool.

    >>> grid(112, reduced_layers())
    7
    """
    for layer in layers:
        image = image // 2 if layer[0] == "pool" else (image - 1) // layer[3] + 1
    return image


def _build(ps, dtype, batch, image, layers, hidden, boxes, classes):
    x = te.placeholder((batch, 3, image, image), dtype, name="x")
    s = grid(image, layers)
    target = te.placeholder((batch, s, s, 5 + classes), dtype, name="target")
    h = x
    for n, layer in enumerate(layers):
        if layer[0] == "pool":
            h = nn.max_pool2d(h, 2)
            continue
        _, k, c, stride = layer
        w = ps(f"conv{n}.weight", (c, h.shape[1], k, k), "kaiming")
        h = leaky_relu(nn.conv2d(h, w, ps(f"conv{n}.bias", (c,), "zeros"), stride=stride,
                                 padding=k // 2), SLOPE)
    h = nn.flatten(h, 1)
    h = leaky_relu(nn.dense(h, ps("fc1.weight", (hidden, h.shape[1])),
                            ps("fc1.bias", (hidden,), "zeros")), SLOPE)
    depth = 5 * boxes + classes
    out = nn.dense(h, ps("fc2.weight", (s * s * depth, hidden)),
                   ps("fc2.bias", (s * s * depth,), "zeros"))
    pred = nn.reshape(out, (batch, s, s, depth))
    return detection_loss(pred, target, boxes, classes), {"x": x, "target": target}


def detection_loss(pred, target, boxes, classes):
    """The YOLO-v1 loss (module docstring) of predictions (N, S, S, 5B + C)
    against targets (N, S, S, 5 + C), a 0-d tensor.

    >>> loss = detection_loss(pred, target, boxes=2, classes=20)
    """
    n, s = pred.shape[0], pred.shape[1]
    dtype = pred.dtype

    def corners(t, off, i, j, *cell):
        """(x1, y1, x2, y2) in image units of the box at offset `off` of t[cell]."""
        cx = (t[cell + (off,)] + te.cast(j, dtype)) * (1.0 / s)
        cy = (t[cell + (off + 1,)] + te.cast(i, dtype)) * (1.0 / s)
        hw, hh = te.abs(t[cell + (off + 2,)]) * 0.5, te.abs(t[cell + (off + 3,)]) * 0.5
        return cx - hw, cy - hh, cx + hw, cy + hh

    def iou_body(b, i, j, box):
        px1, py1, px2, py2 = corners(pred, 5 * box, i, j, b, i, j)
        tx1, ty1, tx2, ty2 = corners(target, 0, i, j, b, i, j)
        iw = te.maximum(te.minimum(px2, tx2) - te.maximum(px1, tx1), 0.0)
        ih = te.maximum(te.minimum(py2, ty2) - te.maximum(py1, ty1), 0.0)
        inter = iw * ih
        union = (px2 - px1) * (py2 - py1) + (tx2 - tx1) * (ty2 - ty1) - inter
        return inter / union
    iou = te.compute((n, s, s, boxes), iou_body, name="yolo_iou")

    def signed_sqrt(v):
        return te.where(v >= 0, te.const(1.0, dtype), te.const(-1.0, dtype)) * te.sqrt(
            te.abs(v) + EPS)

    def cell_loss(b, i, j):
        cell = (b, i, j)
        obj = target[cell + (4,)]
        total = None
        for box in range(boxes):
            mine = iou[cell + (box,)]
            resp = conjunction([mine > iou[cell + (k,)] for k in range(box)]
                                  + [mine >= iou[cell + (k,)] for k in range(box + 1, boxes)])
            o = 5 * box
            coord = sum((signed_sqrt(pred[cell + (o + d,)]) - te.sqrt(target[cell + (d,)])) ** 2
                        for d in (2, 3)) + sum((pred[cell + (o + d,)] - target[cell + (d,)]) ** 2
                                               for d in (0, 1))
            conf = pred[cell + (o + 4,)]
            responsible = LAMBDA_COORD * coord + (conf - 1.0) ** 2
            term = te.where(obj > 0.5, te.where(resp, responsible, LAMBDA_NOOBJ * conf * conf)
                            if resp is not None else responsible,
                            LAMBDA_NOOBJ * conf * conf)
            total = term if total is None else total + term
        k = te.reduce_axis(classes, name="k")
        cls = te.sum((pred[cell + (5 * boxes + k,)] - target[cell + (5 + k,)]) ** 2, axis=k)
        return total + te.where(obj > 0.5, cls, 0.0)
    per_cell = te.compute((n, s, s), cell_loss, name="yolo_cell_loss")
    return nn.sum(per_cell) * (1.0 / n)


def _torch_loss(p, data, layers, boxes, classes, **_):
    import torch.nn.functional as F
    h = data["x"]
    for n, layer in enumerate(layers):
        if layer[0] == "pool":
            h = F.max_pool2d(h, 2)
            continue
        _, k, _, stride = layer
        h = F.leaky_relu(F.conv2d(h, p[f"conv{n}.weight"], p[f"conv{n}.bias"], stride=stride,
                                  padding=k // 2), SLOPE)
    h = F.leaky_relu(F.linear(h.flatten(1), p["fc1.weight"], p["fc1.bias"]), SLOPE)
    t = data["target"]
    pred = F.linear(h, p["fc2.weight"], p["fc2.bias"]).reshape(t.shape[:3] + (-1,))
    return torch_detection_loss(pred, t, boxes, classes)


def torch_detection_loss(pred, target, boxes, classes):
    """The torch form of `detection_loss`.

    >>> loss = torch_detection_loss(pred, target, 2, 20)
    """
    import torch
    n, s = pred.shape[0], pred.shape[1]
    cols = torch.arange(s, dtype=pred.dtype).reshape(1, 1, s)
    rows = torch.arange(s, dtype=pred.dtype).reshape(1, s, 1)

    def corners(t, off):
        cx, cy = (t[..., off] + cols) * (1.0 / s), (t[..., off + 1] + rows) * (1.0 / s)
        hw, hh = t[..., off + 2].abs() * 0.5, t[..., off + 3].abs() * 0.5
        return cx - hw, cy - hh, cx + hw, cy + hh

    tx1, ty1, tx2, ty2 = corners(target, 0)
    ious = []
    for box in range(boxes):
        px1, py1, px2, py2 = corners(pred, 5 * box)
        iw = torch.clamp(torch.minimum(px2, tx2) - torch.maximum(px1, tx1), min=0.0)
        ih = torch.clamp(torch.minimum(py2, ty2) - torch.maximum(py1, ty1), min=0.0)
        inter = iw * ih
        ious.append(inter / ((px2 - px1) * (py2 - py1) + (tx2 - tx1) * (ty2 - ty1) - inter))
    obj = target[..., 4] > 0.5

    def signed_sqrt(v):
        return torch.where(v >= 0, 1.0, -1.0) * torch.sqrt(v.abs() + EPS)

    total = 0.0
    for box in range(boxes):
        resp = torch.ones_like(obj)
        for k in range(boxes):
            if k != box:
                resp = resp & ((ious[box] > ious[k]) if k < box else (ious[box] >= ious[k]))
        o = 5 * box
        coord = sum((pred[..., o + d] - target[..., d]) ** 2 for d in (0, 1)) + sum(
            (signed_sqrt(pred[..., o + d]) - torch.sqrt(target[..., d])) ** 2 for d in (2, 3))
        conf = pred[..., o + 4]
        noobj = LAMBDA_NOOBJ * conf * conf
        total = total + torch.where(obj & resp, LAMBDA_COORD * coord + (conf - 1.0) ** 2, noobj)
    cls = ((pred[..., 5 * boxes:] - target[..., 5:]) ** 2).sum(-1)
    return (total + torch.where(obj, cls, 0.0)).sum() / n


def _make_batch(rng, dtype, batch, image, layers, classes, **_):
    """Images (pixels in [0, 1)), and targets with an object in about a third of the cells."""
    s = grid(image, layers)
    target = np.zeros((batch, s, s, 5 + classes))
    obj = rng.random((batch, s, s)) < 0.35
    obj[:, 0, 0] = True                         # every image has an object
    count = int(obj.sum())
    target[obj, 0:2] = rng.random((count, 2))
    target[obj, 2:4] = rng.uniform(0.1, 0.9, (count, 2))
    target[obj, 4] = 1.0
    target[obj, 5 + rng.integers(0, classes, count)] = 1.0
    return {"x": rng.random((batch, 3, image, image)).astype(dtype),
            "target": target.astype(dtype)}


NETWORK = Network(
    "yolo", "cnn", "YOLO-v1 (24 convolutions, detection loss) on 112x112 images, 7x7 grid",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=2, image=112, layers=reduced_layers(), hidden=512, boxes=2,
                  classes=20),
    small=dict(batch=2, image=16, layers=(("conv", 3, 4, 2), ("pool",), ("conv", 1, 4, 1),
                                          ("conv", 3, 6, 1)), hidden=8, boxes=2, classes=3),
    lr=1e-4)   # its summed loss (about 330 at the start) diverges at 1e-3 at the default size
