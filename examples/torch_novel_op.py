"""A novel operator inside a PyTorch model, trained with torch.optim.

`soft_max_plus` -- a tropical (log-sum-exp) matrix product, which no
library ships -- is written once as a tensor expression and registered as
a torch custom op with `nf.torch.op`: NeoFlow derives its backward with
nf.grad and builds native kernels for each input shape. The module around
it is ordinary PyTorch, trained eagerly and under torch.compile(fullgraph=True).

    python examples/torch_novel_op.py
"""
import torch

import neoflow as nf


@nf.torch.op("examples::soft_max_plus")
def soft_max_plus(x, w):
    """y[i, j] = log sum_k exp(x[i, k] + w[k, j])."""
    k = nf.reduce_axis(x.shape[1], name="k")
    return nf.compute((x.shape[0], w.shape[1]),
                      lambda i, j: nf.log(nf.sum(nf.exp(x[i, k] + w[k, j]), axis=k)),
                      name="soft_max_plus")


class TropicalNet(torch.nn.Module):
    def __init__(self, n_in=16, hidden=32, n_out=4):
        super().__init__()
        self.embed = torch.nn.Linear(n_in, hidden)
        self.w = torch.nn.Parameter(0.1 * torch.randn(hidden, n_out))

    def forward(self, x):
        return soft_max_plus(torch.tanh(self.embed(x)), self.w)


def train(model, step_fn, x, y, steps=60):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(steps):
        loss = torch.nn.functional.cross_entropy(step_fn(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == steps - 1:
            print(f"  step {step:3d}  loss {loss.item():.4f}")
    return loss.item()


def main():
    torch.manual_seed(0)
    x = torch.randn(64, 16)
    y = x[:, :4].argmax(dim=1)                      # a learnable labelling
    eager = TropicalNet()
    compiled = TropicalNet()
    compiled.load_state_dict(eager.state_dict())    # the same start for both runs
    print("eager:")
    first = train(eager, eager, x, y)
    print("torch.compile(fullgraph=True):")
    second = train(compiled, torch.compile(compiled, fullgraph=True), x, y)
    print(f"final losses: eager {first:.6f}, compiled {second:.6f}")


if __name__ == "__main__":
    main()
