"""Frontends: other frameworks' programs in and out of NeoFlow. `torch`
(imported lazily, as `nf.torch`) turns tensor-expression functions into
PyTorch custom operators and serves `torch.compile(backend="neoflow")`."""
