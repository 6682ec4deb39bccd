"""Writes PyTorch-made inputs for tst_compute into a folder:
  scripted.pt      a torch.jit.script'ed classifier for 28x28 images (10 classes)
  wrong_input.pt   a scripted model that expects 100 features (a shape mismatch on Fashion-MNIST)
  no_params.pt     a scripted model without parameters
  tensors.pt       torch.save({"x": X, "y": Y}) of 600 samples of 20 features, 3 classes
  tensors_test.pt  200 more samples of the same kind
and hostile files, which Tessera must refuse without running any of them (each would leave a file
named touched-* in the folder if it ran):
  reads_files.pt   forward() reads /etc/passwd with torch.from_file and writes it with torch.save
  writes_on_load.pt  __setstate__ (run by torch.jit.load itself) writes a file
  forks.pt         forward() starts a thread with torch.jit.fork
  system.pt        a "tensor file" whose pickle calls os.system when loaded by Python's pickle
"""
import os
import sys
from typing import Tuple

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



class ReadsFiles(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(784, 10)
        self.target = out + "/touched-forward.pt"

    def forward(self, x):
        secret = torch.from_file("/etc/passwd", False, 16, dtype=torch.uint8)
        torch.save(secret, self.target)
        return self.fc(x.flatten(1))


class WritesOnLoad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(10, 784))
        self.target = out + "/touched-load.pt"

    def forward(self, x):
        return torch.nn.functional.linear(x.flatten(1), self.weight)

    @torch.jit.export
    def __getstate__(self) -> Tuple[torch.Tensor, bool, str]:
        return (self.weight, self.training, self.target)

    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, bool, str]):
        torch.save(state[0], state[2])
        self.weight = state[0]
        self.training = state[1]
        self.target = state[2]


class Forks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(784, 10)

    def forward(self, x):
        future = torch.jit.fork(self.fc, x.flatten(1))
        return torch.jit.wait(future)


class System:
    def __reduce__(self):
        return (os.system, ("touch " + out + "/touched-pickle",))


torch.jit.script(ReadsFiles()).save(out + "/reads_files.pt")
torch.jit.script(WritesOnLoad()).save(out + "/writes_on_load.pt")
torch.jit.script(Forks()).save(out + "/forks.pt")
torch.save({"x": torch.zeros(4, 20), "y": torch.zeros(4, dtype=torch.long), "z": System()}, out + "/system.pt")
for name in os.listdir(out):  # scripting ran nothing, but be sure the test starts clean
    if name.startswith("touched-"):
        os.remove(os.path.join(out, name))

centers = torch.randn(3, 20) * 3
def blobs(n):
    y = torch.randint(0, 3, (n,))
    return {"x": centers[y] + torch.randn(n, 20), "y": y}

torch.save(blobs(600), out + "/tensors.pt")
torch.save(blobs(200), out + "/tensors_test.pt")
