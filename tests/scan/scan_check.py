"""Shared check of the scan tests: a NeoFlow function of placeholders against
a torch twin in float64, forward and the gradient of every input
(nf.grad through nf.evaluate, torch.autograd with the same head)."""
import numpy as np
import torch

import neoflow as nf


def check(nf_fn, torch_fn, shapes, seed=0, tol=1e-9, positive=()):
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(0.5, 1.5, s) if n in positive else rng.normal(size=s)
              for n, s in enumerate(shapes)]
    xs = [nf.placeholder(s, "float64", name=f"in{n}") for n, s in enumerate(shapes)]
    y = nf_fn(*xs)
    head = nf.placeholder(y.shape, "float64", name="head")
    hv = rng.normal(size=y.shape)
    grads = nf.grad(y, xs, head=head)
    got = nf.evaluate([y] + list(grads), {**dict(zip(xs, arrays)), head: hv})
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    want = torch_fn(*ts)
    want.backward(torch.tensor(hv))
    refs = [want.detach().numpy()] + [t.grad.numpy() if t.grad is not None else np.zeros_like(a)
                                      for t, a in zip(ts, arrays)]
    for n, (g, r) in enumerate(zip(got, refs)):
        assert g.shape == r.shape, (n, g.shape, r.shape)
        scale = max(1.0, float(np.max(np.abs(r))))
        err = float(np.max(np.abs(g - r))) / scale
        assert err < tol, f"{'output' if n == 0 else f'gradient of input {n - 1}'}: {err:.3g}"
    return got
