"""Independent reference: trains the same MLP with torch.optim on the same batches.

Usage: reference_optimizer.py CASE.pt OUT.pt
CASE.pt (written by tst_compute with torch::pickle_save) holds the start weights under "w/<name>",
the batches under "x<i>" / "y<i>", and the optimizer settings under "opt/<name>" (0-d tensors).
OUT.pt gets the final weights, by name.
"""
import sys

import torch

case = torch.load(sys.argv[1])
weights = {k[2:]: v.clone() for k, v in case.items() if k.startswith("w/")}
settings = {k[4:]: v.item() for k, v in case.items() if k.startswith("opt/")}
layers = sorted({k.split(".")[0] for k in weights})

params = {k: torch.nn.Parameter(v) for k, v in weights.items()}


def forward(x):
    x = x.flatten(1)
    for i, layer in enumerate(layers):
        x = torch.nn.functional.linear(x, params[layer + ".weight"], params[layer + ".bias"])
        if i + 1 < len(layers):
            x = torch.relu(x)
    return x


ordered = [params[k] for k in sorted(params)]
if settings["adam"]:
    optimizer = torch.optim.Adam(ordered, lr=settings["lr"], betas=(settings["beta1"], settings["beta2"]),
                                 eps=settings["eps"], weight_decay=settings["weight_decay"], foreach=False)
else:
    optimizer = torch.optim.SGD(ordered, lr=settings["lr"], momentum=settings["momentum"],
                                nesterov=bool(settings["nesterov"]), weight_decay=settings["weight_decay"], foreach=False)

steps = sum(1 for k in case if k.startswith("x"))
for i in range(steps):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(forward(case["x%d" % i]), case["y%d" % i])
    loss.backward()
    optimizer.step()

torch.save({k: v.detach() for k, v in params.items()}, sys.argv[2])
