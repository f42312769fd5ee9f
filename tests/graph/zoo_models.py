"""The zoo networks the graph tests fuse whole training steps of, at the
sizes the examples train them at (examples/mlp_digits.py, lltm.py,
milstm.py: 8 unrolled steps of 4 features) and batch 8 unless asked.

>>> model = build("lltm", batch=4)
"""
from neoflow import zoo

SIZES = {"mlp": dict(batch=8, n_in=64, hidden=128, layers=1, classes=10),
         "lltm": dict(batch=8, steps=8, n_in=4, state=16, n_out=1),
         "milstm": dict(batch=8, steps=8, n_in=4, hidden=16, classes=2)}


def build(name, **overrides):
    """A fresh zoo `Model` of `name` at the examples' sizes (with `overrides`)."""
    return zoo.get(name).build("small", **{**SIZES[name], **overrides})
