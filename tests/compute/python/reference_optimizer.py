"""Independent reference: trains the same MLP with torch.optim on the same batches.

Usage: reference_optimizer.py CASE.pt OUT.pt
CASE.pt (written by tst_training with torch::pickle_save) holds the start weights under "w/<name>",
the batches under "x<i>" / "y<i>", and the optimizer settings under "opt/<name>" (0-d tensors).
OUT.pt gets the final weights, by name.
"""
import math
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
if settings.get("adamw"):
    optimizer = torch.optim.AdamW(ordered, lr=settings["lr"], betas=(settings["beta1"], settings["beta2"]),
                                  eps=settings["eps"], weight_decay=settings["weight_decay"], foreach=False)
elif settings["adam"]:
    optimizer = torch.optim.Adam(ordered, lr=settings["lr"], betas=(settings["beta1"], settings["beta2"]),
                                 eps=settings["eps"], weight_decay=settings["weight_decay"], foreach=False)
else:
    optimizer = torch.optim.SGD(ordered, lr=settings["lr"], momentum=settings["momentum"],
                                nesterov=bool(settings["nesterov"]), weight_decay=settings["weight_decay"], foreach=False)



def learning_rate(t):
    """docs/DETERMINISM.md, "Steps": linear warmup, then cosine decay to min_lr at total steps."""
    lr = settings["lr"]
    if not settings.get("cosine"):
        return lr
    warmup, total, low = settings["warmup"], settings["total"], settings["min_lr"]
    if t < warmup:
        return lr * (t + 1) / warmup
    progress = min(1.0, (t - warmup) / max(1, total - warmup))
    return low + (lr - low) * 0.5 * (1.0 + math.cos(math.pi * progress))


steps = sum(1 for k in case if k.startswith("x"))
first = int(settings.get("round", 0)) * steps  # the shard's first global step
for i in range(steps):
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(first + i)
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(forward(case["x%d" % i]), case["y%d" % i])
    loss.backward()
    if settings.get("clip", 0.0) > 0.0:
        torch.nn.utils.clip_grad_norm_(ordered, settings["clip"])
    optimizer.step()

torch.save({k: v.detach() for k, v in params.items()}, sys.argv[2])
