"""Checks what tessera-node train-local wrote: model.pt loads with torch.load, model.torchscript.pt
with torch.jit.load, both hold the same weights, and the TorchScript model's accuracy on the
Fashion-MNIST test set equals the accuracy Tessera reported for the last round.

Usage: check_export.py OUT_DIR FASHION_MNIST_DIR
Prints "accuracy <python> <tessera>" and exits non-zero on any mismatch.
"""
import gzip
import json
import sys

import numpy as np
import torch

out, data = sys.argv[1], sys.argv[2]


def idx(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


x = torch.tensor(idx(data + "/t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).copy()).float() / 255.0
x = (x - 0.2860) / 0.3530
y = torch.tensor(idx(data + "/t10k-labels-idx1-ubyte.gz", 8).copy()).long()

weights = torch.load(out + "/model.pt")
module = torch.jit.load(out + "/model.torchscript.pt")
scripted = dict(module.named_parameters())
assert sorted(scripted) == sorted(weights), (sorted(scripted), sorted(weights))
for name, tensor in weights.items():
    assert torch.equal(scripted[name], tensor), name

with torch.no_grad():
    accuracy = (module(x).argmax(1) == y).float().mean().item()
report = json.load(open(out + "/report.json"))
reported = report["rounds"][-1]["testAccuracy"]
print("accuracy %.6f %.6f" % (accuracy, reported))
assert abs(accuracy - reported) < 1e-6, "PyTorch and Tessera disagree on the accuracy"
