"""Randomness as a leaf of the expression language: `random_uniform`.

A random tensor is an ordinary compute whose body is one `Random` node: a
pure function of a 64-bit seed, a 64-bit per-draw counter, a 32-bit stream
number and the element's flat index (Philox-4x32-10, Salmon et al., SC'11,
the generator of Random123, cuRAND and JAX). Nothing is stored: every
kernel that reads a random tensor (the forward, the backward, a fused
consumer) recomputes the same bits from the same four numbers, so one
step's forward and backward see the same values and a dropout mask is
never kept in memory.

The seed, the counter and the stream live in a small int64 leaf of the
tensor (a `RandomStateOp` tensor of shape (3,)) that the runtime writes
before each draw: `nf.build`'s functions per call (counter = call number,
or 0 under `seed=`), the Trainer per step (counter = step number) and
`nf.evaluate` per call. Streams are numbered by the order of the state
leaves in the order they were made (`random_states`), so the same network built twice draws
the same numbers from the same seed.

The generator exists twice, once in NumPy here (for nf.evaluate) and once
in C (codegen/c/prelude.py), bit for bit the same: the words are integers
and the conversion to float is exact (24 bits for float32, 53 for float64).

Hands on: `random_uniform` tensors; `Random` nodes; state arrays for the runtime.
"""
import math
import numbers
import os

import numpy as np

from ..errors import DTypeError, InputError, ShapeError
from . import dtype as dt
from .expr import Const, Expr
from .tensor import Tensor, _check_shape, compute

MAX_ELEMENTS = 1 << 32          # the flat index is one 32-bit counter word
STATE_SHAPE = (3,)              # seed, counter, stream
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
ROUNDS = 10
_MASK32 = np.uint64(0xFFFFFFFF)


class RandomStateOp:
    """The leaf holding (seed, counter, stream) of one random tensor; written by
    the runtime before every draw, never fed by the user."""


class Random(Expr):
    """A U[0, 1) value of `dtype`: Philox-4x32-10 of (seed, counter, stream,
    index); children are int64 expressions (reads of the state leaf and the
    flat element index)."""
    __slots__ = ("seed", "counter", "stream", "index")

    def __init__(self, dtype, seed, counter, stream, index):
        self.dtype = dtype
        self.seed, self.counter, self.stream, self.index = seed, counter, stream, index

    @property
    def args(self):
        return (self.seed, self.counter, self.stream, self.index)


def random_uniform(shape, dtype="float32", name=None):
    """A tensor of independent U[0, 1) values, drawn afresh for every Trainer
    step and every call of a built function (see the module comment).

    >>> u = nf.random_uniform((4, 3), name="u")
    >>> f = nf.build(u, []); a = f(seed=7); b = f(seed=7)
    >>> bool((a == b).all()), bool(((0 <= a) & (a < 1)).all())
    (True, True)
    """
    what = f"random_uniform '{name}'" if name else "random_uniform"
    shape = _check_shape(shape, what)
    dtype = dt.canonical(dtype, what)
    if not dt.is_float(dtype):
        raise DTypeError(f"{what}: dtype must be float32 or float64, got {dtype}")
    if math.prod(shape) > MAX_ELEMENTS:
        raise ShapeError(f"{what}: {math.prod(shape)} elements; at most 2**32 per random "
                         "tensor (draw several)")
    base = name or "random_uniform"
    state = Tensor(STATE_SHAPE, dt.INDEX, None, RandomStateOp())
    state.name = f"{base}.rng{state.id}"
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]

    def body(*i):
        flat = None
        for v, s in zip(i, strides):
            term = v if s == 1 else v * s
            flat = term if flat is None else flat + term
        return Random(dtype, state[0], state[1], state[2],
                      flat if flat is not None else Const(0, dt.INDEX))
    return compute(shape, body, name=base)


def is_random_state(t):
    """True for the state leaf of a random tensor."""
    return isinstance(t.op, RandomStateOp)


def random_states(tensors):
    """The random state leaves among `tensors`, in the order they were made
    (stream n is the n-th): the same for a network built twice, fused or not."""
    found = {id(t): t for t in tensors if isinstance(t.op, RandomStateOp)}
    return sorted(found.values(), key=lambda t: t.id)


def fresh_seed():
    """A 64-bit seed from the operating system's entropy (a draw without a seed)."""
    return int.from_bytes(os.urandom(8), "little")


def state_array(seed, counter, stream):
    """The int64 (seed, counter, stream) array a state leaf holds; seed and
    counter are taken modulo 2**64 (their bits), the stream modulo 2**32.

    >>> state_array(7, 1, 0)
    array([7, 1, 0])
    """
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
        raise InputError(f"seed must be an int, got {seed!r}")
    words = np.array([int(seed) % (1 << 64), int(counter) % (1 << 64),
                      int(stream) % (1 << 32)], np.uint64)
    return words.view(np.int64)


def state_feed(states, seed, counter):
    """{id(state leaf): state array} for the leaves `states` (stream = position)."""
    return {id(t): state_array(seed, counter, n) for n, t in enumerate(states)}


def philox4x32(c0, c1, c2, c3, k0, k1):
    """Philox-4x32-10 of the counter words (c0..c3) under key (k0, k1); uint64
    arrays holding 32-bit values in and out (broadcast together).

    >>> [hex(int(w)) for w in philox4x32(*[np.uint64(0)] * 6)]
    ['0x6627e8d5', '0xe169c58d', '0xbc57ac4c', '0x9b00dbd8']
    """
    m0, m1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    w0, w1 = np.uint64(PHILOX_W[0]), np.uint64(PHILOX_W[1])
    c0, c1, c2, c3, k0, k1 = (np.asarray(x, np.uint64) for x in (c0, c1, c2, c3, k0, k1))
    shift = np.uint64(32)
    for _ in range(ROUNDS):
        p0, p1 = m0 * c0, m1 * c2
        c0, c1, c2, c3 = ((p1 >> shift) ^ c1 ^ k0, p1 & _MASK32,
                          (p0 >> shift) ^ c3 ^ k1, p0 & _MASK32)
        k0, k1 = (k0 + w0) & _MASK32, (k1 + w1) & _MASK32
    return c0, c1, c2, c3


def uniform(dtype, seed, counter, stream, index):
    """The values of a `Random` node: int64 arrays (broadcast) in, `dtype` out.

    >>> uniform("float32", np.int64(7), np.int64(0), np.int64(0), np.arange(3)).dtype
    dtype('float32')
    """
    seed, counter, stream, index = (np.asarray(x).astype(np.int64, copy=False).view(np.uint64)
                                    for x in (seed, counter, stream, index))
    shift = np.uint64(32)
    x0, x1, _, _ = philox4x32(index & _MASK32, stream & _MASK32, counter & _MASK32,
                              counter >> shift, seed & _MASK32, seed >> shift)
    if dtype == "float32":
        return (x0 >> np.uint64(8)).astype(np.float32) * np.float32(2.0 ** -24)
    bits = (x1 << shift) | x0
    return (bits >> np.uint64(11)).astype(np.float64) * np.float64(2.0 ** -53)
