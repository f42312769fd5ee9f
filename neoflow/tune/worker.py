"""tune/worker: the measuring process. Run as a script (it imports numpy and
ctypes, never NeoFlow), it reads one JSON request per line on stdin and
answers one JSON line on stdout:

    {"op": "setup", "inputs": [[shape, dtype], ...], "outputs": [...],
     "seed": 0, "reference": "/path/default.so"}
        random inputs from the seed (floats uniform in [-1, 1), integers 0,
        booleans random); runs the reference library once and keeps its
        outputs -> {"ok": true}
    {"op": "run", "path": "/path/candidate.so", "repeats": 5, "min_time": 0.05}
        runs the candidate once on fresh outputs filled with a sentinel,
        compares with the reference (NaNs where the reference has them,
        floats within 1e-3 relative plus 1e-3 of the largest magnitude,
        integers exactly), then times `repeats` batches of calls, each long
        enough for `min_time / repeats` -> {"status": "ok", "median_s": ...}
        or {"status": "wrong" | "error", "detail": "..."}

A candidate that crashes or hangs takes only this process down; the tuner
(tune/measure.py) restarts it. Hands on: JSON lines.
"""
import ctypes
import json
import statistics
import sys
import time

import numpy as np

ENTRY = "nf_main"
SENTINEL = {"f": 3.0e38, "i": 123456789, "b": True}
RTOL = 1e-3


class Worker:
    def __init__(self):
        self.inputs, self.out_specs, self.reference = [], [], []

    def setup(self, req):
        rng = np.random.default_rng(req["seed"])
        self.inputs = [_random(rng, shape, dtype) for shape, dtype in req["inputs"]]
        self.out_specs = [(tuple(shape), dtype) for shape, dtype in req["outputs"]]
        run, outputs = self._bind(req["reference"])
        code = run()
        if code != 0:
            return {"ok": False, "detail": f"the reference schedule reported error {code}"}
        self.reference = [o.copy() for o in outputs]
        return {"ok": True}

    def _bind(self, path):
        entry = ctypes.CDLL(path)[ENTRY]
        entry.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        entry.restype = ctypes.c_int64
        outputs = [np.full(shape, SENTINEL[np.dtype(dtype).kind], dtype=dtype)
                   for shape, dtype in self.out_specs]
        arrays = self.inputs + outputs
        pointers = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        err = (ctypes.c_int64 * 2)()

        def run():
            return entry(pointers, err)
        return run, outputs

    def run(self, req):
        run, outputs = self._bind(req["path"])
        code = run()
        if code != 0:
            return {"status": "error", "detail": f"the kernel reported error {code}"}
        for n, (got, ref) in enumerate(zip(outputs, self.reference)):
            why = _mismatch(got, ref)
            if why is not None:
                return {"status": "wrong", "detail": f"output {n}: {why}"}
        t0 = time.perf_counter()
        run()
        once = max(time.perf_counter() - t0, 1e-7)
        repeats = max(1, int(req.get("repeats", 5)))
        inner = max(1, int(req.get("min_time", 0.05) / repeats / once))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(inner):
                run()
            times.append((time.perf_counter() - t0) / inner)
        return {"status": "ok", "median_s": statistics.median(times), "times": times}


def _random(rng, shape, dtype):
    kind = np.dtype(dtype).kind
    if kind == "f":
        return rng.uniform(-1.0, 1.0, shape).astype(dtype)
    if kind == "b":
        return rng.random(shape) < 0.5
    return np.zeros(shape, dtype)


def _mismatch(got, ref):
    """None if `got` agrees with `ref`, else a short description."""
    if np.dtype(ref.dtype).kind != "f":
        bad = got != ref
    else:
        scale = float(np.nanmax(np.abs(np.where(np.isinf(ref), 0, ref)), initial=0.0))
        with np.errstate(invalid="ignore"):
            close = np.abs(got - ref) <= RTOL * np.abs(ref) + RTOL * scale
        same = (got == ref) | (np.isnan(got) & np.isnan(ref))
        bad = ~(close | same)
    if not bad.any():
        return None
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{int(bad.sum())} element(s) differ, first at {at}: {got[at]!r} vs {ref[at]!r}"


def main():
    worker = Worker()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            reply = {"setup": worker.setup, "run": worker.run}[req["op"]](req)
        except Exception as e:  # a broken candidate must not end the worker
            reply = {"ok": False, "status": "error", "detail": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
