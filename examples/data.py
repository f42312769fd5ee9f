"""Data for the examples: scikit-learn's bundled 8x8 digits, split into train
and test sets, as flat vectors or as upsampled images; random minibatches;
and `train_digits`, the train-then-test loop of the digit examples (the
zoo's MLP and LeNet-5).

>>> train, test = digits(image_size=None)
>>> train["x"].shape, train["y"].dtype
((1347, 64), dtype('int64'))
"""
import numpy as np

import neoflow as nf
from neoflow import zoo
from progress import fit


def digits(image_size=None, seed=0):
    """(train, test) dicts {"x", "y"}: pixels scaled to [0, 1], 25% held out.

    image_size=None gives flat (n, 64) vectors; an int gives (n, 1, s, s)
    images, each 8x8 pixel repeated s/8 times per side (nearest upsampling).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)
    if image_size is None:
        x = x.reshape(len(x), 64)
    else:
        factor = image_size // 8
        x = np.repeat(np.repeat(x, factor, axis=1), factor, axis=2)[:, None]
    xtr, xte, ytr, yte = train_test_split(x, data.target.astype(np.int64), test_size=0.25,
                                          random_state=seed, stratify=data.target)
    return {"x": xtr, "y": ytr}, {"x": xte, "y": yte}


def minibatches(data, batch, seed=0):
    """Endless random minibatches of `batch` rows from `data` ({"x", "y"})."""
    rng = np.random.default_rng(seed)
    n = len(data["y"])
    while True:
        order = rng.permutation(n)
        for start in range(0, n - batch + 1, batch):
            rows = order[start:start + batch]
            yield {k: v[rows] for k, v in data.items()}


def train_digits(name, image_size, args):
    """Train the zoo classifier `name` ("mlp", or "lenet" with `image_size`)
    on the digits with SGD-momentum and print the test accuracy (a copy built
    for the whole test set shares the parameter names, so its logits come
    from the trained values).

    >>> train_digits("mlp", None, args)   # doctest: +SKIP
    """
    train, test = digits(image_size=image_size)
    sizes = {} if image_size is None else {"image": image_size}
    net = zoo.get(name).build(batch=args.batch, **sizes)
    test_net = zoo.get(name).build(batch=len(test["y"]), **sizes)
    optimizer = nf.optim.SGD(lr=args.lr, momentum=0.9)
    with nf.Trainer(net.loss, optimizer=optimizer, tuning="off", seed=args.seed) as trainer:
        fit(trainer, minibatches(train, args.batch, args.seed), args.steps, name)
        logits = trainer.run(test_net.outputs["logits"], {"x": test["x"]})
        print(f"test accuracy: {np.mean(logits.argmax(axis=1) == test['y']):.4f}  "
              f"({trainer.stats()['step_ms']:.2f} ms/step, "
              f"{trainer.stats()['kernels']} kernels/step)")
