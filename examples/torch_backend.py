"""A stock PyTorch model trained through torch.compile(backend="neoflow").

A small conv net (Conv2d, BatchNorm2d, ReLU, MaxPool2d, Linear) trained with
torch.optim.SGD; its forward and backward ATen graphs are lowered to tensor
expressions and compiled by NeoFlow. The backend is found through its entry
point: this script never needs to import neoflow for it, only for the report.

    python examples/torch_backend.py
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def make_model():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                         nn.Flatten(), nn.Linear(16 * 4 * 4, 10))


def main(steps=30):
    torch.manual_seed(0)
    x = torch.randn(32, 1, 8, 8)
    y = torch.randint(0, 10, (32,))
    model = make_model()
    compiled = torch.compile(model, backend="neoflow", options={"tuning": "off"})
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        loss = F.cross_entropy(compiled(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    import neoflow as nf
    print(nf.torch.report(compiled))


if __name__ == "__main__":
    main()
