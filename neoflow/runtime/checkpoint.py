"""Checkpoints: a trainer's parameters, optimizer state and step count in one
NumPy .npz file.

Entries: "param/<name>" for every parameter (trainable and requires_grad=False),
"optim/<param>.<slot>" for the optimizer state, "step" for the optimizer
steps taken, and "format" (the checkpoint version).

Hands on: the .npz file, and {entry: ndarray} read back from one.
"""
import numpy as np

from ..errors import InputError

FORMAT = 1


def write(path, params, state, step):
    """Write `params` and `state` ({name: ndarray}) and `step` to `path`.

    >>> write("ckpt.npz", {"w": w}, {"w.momentum_buffer": buf}, 10)   # doctest: +SKIP
    """
    entries = {f"param/{k}": v for k, v in params.items()}
    entries.update({f"optim/{k}": v for k, v in state.items()})
    with open(path, "wb") as f:
        np.savez(f, format=np.int64(FORMAT), step=np.int64(step), **entries)


def read(path):
    """(params, state, step) from a checkpoint written by `write`.

    >>> params, state, step = read("ckpt.npz")                        # doctest: +SKIP
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            entries = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read checkpoint {path!s}: {e}") from None
    if int(entries.pop("format", -1)) != FORMAT or "step" not in entries:
        raise InputError(f"{path!s} is not a NeoFlow checkpoint (format {FORMAT})")
    step = int(entries.pop("step"))
    params = {k[len("param/"):]: v for k, v in entries.items() if k.startswith("param/")}
    state = {k[len("optim/"):]: v for k, v in entries.items() if k.startswith("optim/")}
    return params, state, step
