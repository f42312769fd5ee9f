"""The trainer's feed checks: a dict keyed by placeholder (or its name) is
matched against the placeholders a step or a forward run needs.

A missing input, a key that names no input of the trainer's graph, a
parameter passed as data, and a value of the wrong shape or dtype each raise
InputError naming the placeholder; values are checked by te.feed's
`as_input_array`, the rule every entry point shares.

Hands on: {id(placeholder): ndarray shaped like the placeholder}.
"""
from ..errors import InputError
from ..te import Tensor
from ..te.feed import as_input_array
from ..te.tensor import ParameterOp


def check_feed(feed, needed, known, what, convert=as_input_array):
    """Arrays for every placeholder in `needed`, from `feed`.

    Keys may name any placeholder in `known` (those not needed are ignored);
    any other key raises. `what` names the call in messages ("step", "run");
    `convert(placeholder, value)` checks a value (a device backend's keeps
    its device tensors).

    >>> x = nf.placeholder((2,), name="x")
    >>> check_feed({"x": np.zeros(2, np.float32)}, [x], [x], "step")[id(x)]
    array([0., 0.], dtype=float32)
    """
    return FeedCheck(needed, known, what, convert)(feed)


class FeedCheck:
    """`check_feed` with its placeholders indexed once (a trainer checks
    every step's feed against the same ones).

    >>> check = FeedCheck([x], [x], "step"); check({"x": xb})[id(x)]   # doctest: +SKIP
    """

    def __init__(self, needed, known, what, convert=as_input_array):
        self.needed, self.what, self.convert = list(needed), what, convert
        self.by_name = {t.name: t for t in known}
        self.by_id = {id(t): t for t in known}
        self.needed_ids = {id(t) for t in needed}
        self.exact = self.needed_ids == set(self.by_id)   # every known input is needed

    def __call__(self, feed):
        what = self.what
        if not isinstance(feed, dict):
            raise InputError(f"{what}: the feed must be a dict keyed by placeholder or name, "
                             f"got {type(feed).__name__}")
        by_name, by_id, convert = self.by_name, self.by_id, self.convert
        values = {}
        for key, value in feed.items():
            t = by_name.get(key) if isinstance(key, str) else by_id.get(id(key))
            if t is None:
                name = key if isinstance(key, str) else getattr(key, "name", repr(key))
                if isinstance(key, Tensor) and isinstance(key.op, ParameterOp):
                    raise InputError(f"{what}: '{name}' is a parameter, not a data input; set "
                                     "parameters with trainer.load_parameters")
                raise InputError(f"{what}: '{name}' is not an input of this trainer's graph "
                                 f"(inputs: {', '.join(sorted(by_name)) or 'none'})")
            if id(t) in values:
                raise InputError(f"{what}: input '{t.name}' is fed twice (by tensor and by name)")
            values[id(t)] = convert(t, value)
        if self.exact and len(values) == len(self.needed_ids):
            return values
        missing = [t for t in self.needed if id(t) not in values]
        if missing:
            t = missing[0]
            raise InputError(f"{what}: no value fed for input '{t.name}' {t.shape} {t.dtype}"
                             + (f" (also missing: {', '.join(m.name for m in missing[1:])})"
                                if len(missing) > 1 else ""))
        return {k: v for k, v in values.items() if k in self.needed_ids}
