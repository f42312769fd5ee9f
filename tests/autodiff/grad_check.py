"""Shared checks of the autodiff tests: gradients of a NeoFlow expression
against torch.autograd (or central finite differences), through the
reference evaluator and through native code built with nf.build."""
import numpy as np
import torch

import neoflow as nf

TOL = {"float64": 1e-9, "float32": 1e-4}
HAS_BUILD = hasattr(nf, "build")


class Spec:
    """An input: shape, dtype, and for integer inputs the value range [0, high)."""

    def __init__(self, shape, dtype=None, high=None, positive=False):
        self.shape, self.dtype, self.high, self.positive = tuple(shape), dtype, high, positive


def random_inputs(specs, dtype, rng):
    arrays = []
    for s in specs:
        t = s.dtype or dtype
        if s.high is not None:
            arrays.append(rng.integers(0, s.high, size=s.shape).astype(t))
        elif s.positive:
            arrays.append(rng.uniform(0.5, 2.0, size=s.shape).astype(t))
        else:
            arrays.append(rng.normal(size=s.shape).astype(t))
    return arrays


def rel_error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    return float(np.max(np.abs(got - want))) / scale if want.size else 0.0


def nf_gradients(build, specs, dtype, arrays, native):
    """(output value, head value, [gradient arrays]) of `build` via nf.grad,
    evaluated by the interpreter and, when `native`, also by nf.build code
    (asserted to agree with the interpreter)."""
    xs = [nf.placeholder(s.shape, s.dtype or dtype, name=f"in{n}") for n, s in enumerate(specs)]
    y = build(*xs)
    rng = np.random.default_rng(len(arrays))
    head = None
    feed = list(arrays)
    if y.ndim:
        head = nf.placeholder(y.shape, y.dtype, name="head")
        feed.append(rng.normal(size=y.shape).astype(y.dtype))
    wrt = [x for x, s in zip(xs, specs) if s.high is None]
    grads = nf.grad(y, wrt, head=head)
    inputs = xs + ([head] if head is not None else [])
    outs = nf.evaluate([y] + grads, dict(zip(inputs, feed)))
    if native and HAS_BUILD:
        built = nf.build([y] + grads, inputs)(*feed)
        for n, (a, b) in enumerate(zip(built, outs)):
            err = rel_error(a, b)
            assert err <= TOL[dtype], f"nf.build and nf.evaluate differ on output {n}: {err:.3g}"
    return outs[0], (feed[-1] if head is not None else None), list(outs[1:])


def check_torch(build, torch_fn, specs, dtype, native=True, seed=0, tol=None):
    """Assert nf.grad of `build` matches torch.autograd of `torch_fn`, through the
    interpreter and (native=True, when nf.build exists) generated code."""
    rng = np.random.default_rng(seed)
    arrays = random_inputs(specs, dtype, rng)
    value, head, grads = nf_gradients(build, specs, dtype, arrays, native)
    ts = [torch.tensor(a, requires_grad=s.high is None) if s.high is None
          else torch.tensor(a.astype(np.int64)) for a, s in zip(arrays, specs)]
    ty = torch_fn(*ts)
    want = torch.autograd.grad(ty, [t for t in ts if t.requires_grad],
                               grad_outputs=None if head is None else torch.tensor(head),
                               allow_unused=True)
    tol = tol or TOL[dtype]
    assert rel_error(value, ty.detach().numpy()) <= tol, "forward differs from torch"
    for n, (g, w) in enumerate(zip(grads, want)):
        w = np.zeros_like(g) if w is None else w.numpy()
        err = rel_error(g, w)
        assert err <= tol, f"gradient {n}: relative error {err:.3g} > {tol}"


def check_fd(build, specs, native=False, seed=0, eps=1e-6, tol=1e-6):
    """Assert nf.grad of `build` (float64) matches central finite differences of
    <head, output> along a random direction per input."""
    rng = np.random.default_rng(seed)
    arrays = random_inputs(specs, "float64", rng)
    value, head, grads = nf_gradients(build, specs, "float64", arrays, native)
    xs = [nf.placeholder(s.shape, s.dtype or "float64", name=f"in{n}")
          for n, s in enumerate(specs)]
    y = build(*xs)

    def objective(vals):
        out = nf.evaluate(y, dict(zip(xs, vals)))
        return float(np.sum(out * head)) if head is not None else float(out)

    g = iter(grads)
    for n, s in enumerate(specs):
        if s.high is not None:
            continue
        grad = next(g)
        direction = rng.normal(size=s.shape)
        plus, minus = list(arrays), list(arrays)
        plus[n] = arrays[n] + eps * direction
        minus[n] = arrays[n] - eps * direction
        fd = (objective(plus) - objective(minus)) / (2 * eps)
        an = float(np.sum(grad * direction))
        assert abs(fd - an) <= tol * max(1.0, abs(fd)), f"input {n}: fd {fd} vs grad {an}"
