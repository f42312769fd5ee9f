"""How far NeoFlow's float32 is from float64, next to torch float32's own
distance (issue 22: DCGAN's float32 parity).

Two studies, each against torch float64 as the exact answer:
  * grads: per zoo network (and phase) and parameter, the float32 gradient
    error -- max |g32 - g64| / max |g64| -- of nf.build (default schedules)
    and of torch float32, at the same parameters (the initialisers' draws
    plus N(0, 0.1^2) noise) and batch; the ratio of the two;
  * seeds: per batch seed, the benchmark's parity loop (zoo.benchmark: 5 SGD
    steps or GAN rounds, lr 0.01 or the network's own, momentum 0.9) in
    NeoFlow float32, torch float32 and torch float64 from the same initial
    parameters; the largest relative loss difference of each float32 run to
    float64. One seed's figure is luck where the training is chaotic (DCGAN:
    docs/zoo.md, "Float32 parity"); the share of seeds over 1e-4 is not.

    python bench/fp32_parity.py grads lenet dcgan yolo resnet3d mobilenet_v2 shufflenet
    python bench/fp32_parity.py seeds dcgan --seeds 12 --preset default
    python bench/fp32_parity.py --smoke          # lenet, small, 2 seeds: seconds
"""
import argparse
import sys

import numpy as np

from neoflow import build, grad, zoo
from neoflow.optim import SGD
from neoflow.zoo import benchmark
from neoflow.zoo.alternating import AlternatingTrainers

PASS = 1e-4     # the benchmark's parity mark


def relative(got, exact):
    """max |got - exact| / max |exact| (inf where exact is all zero)."""
    scale = float(np.max(np.abs(exact)))
    return float(np.max(np.abs(np.asarray(got, np.float64) - exact))) / scale if scale else \
        float("inf")


def _torch_grads(model, values, batch, dtype):
    import torch
    twin = model.torch_model({k: v.astype(dtype) for k, v in values.items()})
    data = {k: torch.from_numpy(v.astype(dtype) if v.dtype.kind == "f" else v)
            for k, v in batch.items() if k in model.inputs}
    twin(data).backward()
    tensors = twin.tensors()
    return {n: tensors[n].grad.double().numpy() for n in model.trainable}


def grad_rows(name, preset="small"):
    """[{network, phase, parameter, neoflow, torch}]: float32 gradient errors.

    >>> grad_rows("lenet")[0]["parameter"]
    'conv1.weight'
    """
    rows = []
    for model in zoo.get(name).build_phases(preset):
        batch = model.make_batch(np.random.default_rng(0))
        values = model.perturbed_values()
        grads = grad(model.loss, [model.params[n] for n in model.trainable])
        f = build(list(grads), list(model.inputs.values()) + list(model.params.values()))
        ours = f(*[batch[k] for k in model.inputs], *[values[k] for k in model.params])
        exact = _torch_grads(model, values, batch, np.float64)
        theirs = _torch_grads(model, values, batch, np.float32)
        for n, g in zip(model.trainable, ours):
            rows.append({"network": name, "phase": model.phase, "parameter": n,
                         "neoflow": relative(g, exact[n]), "torch": relative(theirs[n], exact[n])})
    return rows


def seed_rows(name, seeds, preset="small"):
    """[{network, seed, neoflow, torch}]: each float32 run's largest relative
    loss difference to torch float64 over the benchmark's parity loop.

    >>> seed_rows("lenet", 1)[0]["seed"]
    0
    """
    import torch
    net = zoo.get(name)
    models = net.build_phases(preset)
    lr = net.lr or benchmark.LR
    rows = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        batches = [models[0].make_batch(rng) for _ in range(benchmark.PARITY_STEPS)]
        with AlternatingTrainers(models, SGD(lr=lr, momentum=benchmark.MOMENTUM),
                                 tuning="off") as trainers:
            initial = trainers.parameters()
            ours = [trainers.step(b) for b in batches]
        tensors = [{k: torch.from_numpy(v) for k, v in b.items()} for b in batches]
        eager = benchmark._torch_step(models, initial, lr)
        theirs = [eager(b) for b in tensors]
        exact = benchmark._torch_step(models, benchmark._float64(initial), lr)
        reference = [exact(benchmark._float64(b)) for b in tensors]
        rows.append({"network": name, "seed": seed,
                     "neoflow": benchmark._max_rel(ours, reference),
                     "torch": benchmark._max_rel(theirs, reference)})
    return rows


def grad_table(rows):
    lines = ["| network | phase | parameter | NeoFlow f32 err | torch f32 err | ratio |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        ratio = r["neoflow"] / r["torch"] if r["torch"] else float("inf")
        lines.append(f"| {r['network']} | {r['phase'] or ''} | {r['parameter']} | "
                     f"{r['neoflow']:.2e} | {r['torch']:.2e} | {ratio:.1f} |")
    return "\n".join(lines)


def seed_table(rows):
    lines = ["| network | seed | NeoFlow f32 vs f64 | torch f32 vs f64 |", "|---|---|---|---|"]
    lines += [f"| {r['network']} | {r['seed']} | {r['neoflow']:.1e} | {r['torch']:.1e} |"
              for r in rows]
    for who in ("neoflow", "torch"):
        over = sum(r[who] > PASS for r in rows)
        lines.append(f"* {who}: {over} of {len(rows)} seeds over {PASS:g}")
    return "\n".join(lines)


def main(argv=None):
    """Run the chosen study; prints its table and returns its rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", nargs="?", choices=("grads", "seeds"), default="grads")
    parser.add_argument("networks", nargs="*")
    parser.add_argument("--preset", default="small", choices=("small", "default"))
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="lenet, small, both studies, 2 seeds")
    args = parser.parse_args(argv)
    if args.smoke:
        rows = {"grads": grad_rows("lenet"), "seeds": seed_rows("lenet", 2)}
        print(grad_table(rows["grads"]))
        print(seed_table(rows["seeds"]))
        return rows
    names = args.networks or ["dcgan"]
    if args.study == "grads":
        rows = [r for n in names for r in grad_rows(n, args.preset)]
        print(grad_table(rows))
    else:
        rows = [r for n in names for r in seed_rows(n, args.seeds, args.preset)]
        print(seed_table(rows))
    sys.stdout.flush()
    return rows


if __name__ == "__main__":
    main()
