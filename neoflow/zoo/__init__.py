"""The zoo: the networks NeoFlow is evaluated on, written as a user writes
them (nf.nn operators plus custom operators in the expression language),
each with a PyTorch twin of identical semantics and synthetic data.

>>> from neoflow import zoo
>>> model = zoo.get("milstm").build("small", dtype="float64")
>>> batch = model.make_batch(np.random.default_rng(0))
>>> float(nf.evaluate(model.loss, {**batch, **values}))     # values: {name: ndarray}
"""
from . import (capsnet, lenet, lltm, milstm, mlp, mobilenet_v2, scrnn, shufflenet, sublstm,
               transformer)
from . import lstm_scan
from . import dcgan, resnet3d, yolo
from .network import Model, Network, ParamSet

NETWORKS = {n.name: n for n in (
    milstm.NETWORK, scrnn.NETWORK, sublstm.NETWORK, lltm.NETWORK, capsnet.NETWORK,
    lenet.NETWORK, mobilenet_v2.NETWORK, shufflenet.NETWORK, transformer.NETWORK,
    lstm_scan.NETWORK, yolo.NETWORK, resnet3d.NETWORK, dcgan.NETWORK, mlp.NETWORK)}


def get(name):
    """The `Network` called `name` (see `NETWORKS`).

    >>> zoo.get("lltm").defaults["state"]
    128
    """
    if name not in NETWORKS:
        raise KeyError(f"no network {name!r} in the zoo; known: {', '.join(NETWORKS)}")
    return NETWORKS[name]


__all__ = ["NETWORKS", "Network", "Model", "ParamSet", "get"]
