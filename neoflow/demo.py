"""`neoflow demo`: novel operators written as tensor expressions, compiled to
native code, checked against the reference interpreter and timed next to
NumPy and PyTorch.

Hands on: a printed table.
"""
import time

import numpy as np
import torch

import neoflow as nf


def _median_ms(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def _mi_gate(batch, hidden):
    """Multiplicative-integration gate: tanh(a*(Wx)*(Uh) + b1*Wx + b2*Uh + bias)."""
    wx = nf.placeholder((batch, hidden), name="wx")
    uh = nf.placeholder((batch, hidden), name="uh")
    a, b1, b2, bias = (nf.placeholder((hidden,), name=n) for n in ("alpha", "beta1", "beta2", "bias"))
    out = nf.compute((batch, hidden), lambda i, j: nf.tanh(
        a[j] * wx[i, j] * uh[i, j] + b1[j] * wx[i, j] + b2[j] * uh[i, j] + bias[j]), name="mi_gate")
    inputs = [wx, uh, a, b1, b2, bias]

    def numpy_ref(wx, uh, a, b1, b2, bias):
        return np.tanh(a * wx * uh + b1 * wx + b2 * uh + bias)

    def torch_ref(wx, uh, a, b1, b2, bias):
        return (a * wx * uh + b1 * wx + b2 * uh + bias).tanh()
    return "MI-LSTM gate", out, inputs, numpy_ref, torch_ref


def _capsule_votes(batch, caps_in, caps_out, d_in, d_out):
    """Capsule votes: u_hat[b, i, j, e] = sum_d W[i, j, e, d] * u[b, i, d]."""
    u = nf.placeholder((batch, caps_in, d_in), name="u")
    W = nf.placeholder((caps_in, caps_out, d_out, d_in), name="W")
    d = nf.reduce_axis(d_in, name="d")
    votes = nf.compute((batch, caps_in, caps_out, d_out),
                       lambda b, i, j, e: nf.sum(W[i, j, e, d] * u[b, i, d], axis=d), name="votes")

    def numpy_ref(u, W):
        return np.einsum("ijed,bid->bije", W, u)

    def torch_ref(u, W):
        return torch.einsum("ijed,bid->bije", W, u)
    return "capsule votes", votes, [u, W], numpy_ref, torch_ref


def _masked_softmax(rows, cols, window):
    """Softmax over a sliding causal window of each row (a custom attention mask)."""
    x = nf.placeholder((rows, cols), name="scores")
    r, s = nf.reduce_axis(cols, name="r"), nf.reduce_axis(cols, name="s")
    inside = lambda i, c: (c <= i % cols) & (c > i % cols - window)  # noqa: E731
    mx = nf.compute((rows,), lambda i: nf.max(x[i, r], axis=r, where=inside(i, r)), name="mx")
    den = nf.compute((rows,), lambda i: nf.sum(nf.exp(x[i, s] - mx[i]), axis=s,
                                               where=inside(i, s)), name="den")
    out = nf.compute((rows, cols), lambda i, j: nf.where(
        inside(i, j), nf.exp(x[i, j] - mx[i]) / den[i], 0.0), name="attn")

    i = np.arange(rows)[:, None] % cols
    c = np.arange(cols)[None, :]
    mask = (c <= i) & (c > i - window)

    def numpy_ref(x):
        z = np.where(mask, x, -np.inf)
        e = np.exp(z - z.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    torch_mask = torch.from_numpy(~mask)

    def torch_ref(x):
        return torch.softmax(x.masked_fill(torch_mask, float("-inf")), dim=1)
    return "windowed softmax", out, [x], numpy_ref, torch_ref


def run_demo(quick=False):
    """Build, check and time a few novel operators; print a table.

    >>> run_demo(quick=True)  # doctest: +SKIP
    """
    torch.set_num_threads(2)
    scale = 1 if quick else 4
    repeats = 5 if quick else 20
    rng = np.random.default_rng(0)
    cases = [_mi_gate(16 * scale, 256 * scale), _capsule_votes(4 * scale, 32, 10, 8, 16),
             _masked_softmax(128 * scale, 256, 16)]
    print(f"{'operator':<18} {'max |nf - ref|':>15} {'NeoFlow ms':>11} {'NumPy ms':>9} {'torch ms':>9}")
    for title, out, inputs, numpy_ref, torch_ref in cases:
        arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in inputs]
        start = time.perf_counter()
        f = nf.build(out, inputs)
        build_s = time.perf_counter() - start
        got = f(*arrays)
        err = float(np.max(np.abs(got - numpy_ref(*arrays))))
        tensors = [torch.from_numpy(a) for a in arrays]
        nf_ms = _median_ms(lambda: f(*arrays), repeats)
        np_ms = _median_ms(lambda: numpy_ref(*arrays), repeats)
        with torch.no_grad():
            torch_ms = _median_ms(lambda: torch_ref(*tensors), repeats)
        print(f"{title:<18} {err:>15.2e} {nf_ms:>11.3f} {np_ms:>9.3f} {torch_ms:>9.3f}"
              f"   (built in {build_s:.2f}s)")
