"""Writes PyTorch-made inputs for tst_compute into a folder:
  scripted.pt      a torch.jit.script'ed classifier for 28x28 images (10 classes)
  wrong_input.pt   a scripted model that expects 100 features (a shape mismatch on Fashion-MNIST)
  no_params.pt     a scripted model without parameters
  tensors.pt       torch.save({"x": X, "y": Y}) of 600 samples of 20 features, 3 classes
  tensors_test.pt  200 more samples of the same kind
"""
import sys

import torch

out = sys.argv[1]
torch.manual_seed(0)


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(784, 32)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.head(torch.relu(self.hidden(x.flatten(1))))


class Wrong(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(100, 10)

    def forward(self, x):
        return self.fc(x)


class NoParams(torch.nn.Module):
    def forward(self, x):
        return x.flatten(1)[:, :10]


torch.jit.script(Small()).save(out + "/scripted.pt")
torch.jit.script(Wrong()).save(out + "/wrong_input.pt")
torch.jit.script(NoParams()).save(out + "/no_params.pt")

centers = torch.randn(3, 20) * 3
def blobs(n):
    y = torch.randint(0, 3, (n,))
    return {"x": centers[y] + torch.randn(n, 20), "y": y}

torch.save(blobs(600), out + "/tensors.pt")
torch.save(blobs(200), out + "/tensors_test.pt")
