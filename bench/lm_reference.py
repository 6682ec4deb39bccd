"""make bench, language model part: the example gpt (examples/jobs/fortunes-gpt.json) trained by
PyTorch alone in one process, the baseline for Tessera's run of the same job. Same model (nanoGPT's
layout and initialisation), the same text cut by the same rule (docs/DETERMINISM.md, "Text"), the
same optimiser, clipping and schedule, and the same token budget: rounds x localSteps steps of
shardsPerRound x batchSize windows (so the schedule's steps are the job's). Prints the final test
loss per token and the wall time.

Usage: lm_reference.py JOB.json FORTUNES_DIR
"""
import json
import math
import os
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F

job = json.load(open(sys.argv[1]))
model_spec, training, opt = job["model"], job["training"], job["optimizer"]
torch.set_num_threads(training.get("threads", 1))
torch.manual_seed(training.get("seed", 0))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "compute", "python"))
import fortunes_text  # noqa: E402  (the documented cut of the text, shared with the tests)

fortunes, train_stream, test_stream, pinned = fortunes_text.streams(sys.argv[2])
if not pinned:
    sys.exit("the fortunes files are not the pinned ones")
L = model_spec["context"]


def windows(stream):
    tokens = torch.tensor(list(stream), dtype=torch.long)
    n = (len(tokens) - 1) // L
    return tokens[: n * L].view(n, L), tokens[1: n * L + 1].view(n, L)


train_x, train_y = windows(train_stream)
test_x, test_y = windows(test_stream)
C, H, N = model_spec["width"], model_spec["heads"], model_spec["layers"]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.attn = nn.ModuleDict(dict(c_attn=nn.Linear(C, 3 * C), c_proj=nn.Linear(C, C)))
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(C, 4 * C), c_proj=nn.Linear(4 * C, C)))

    def forward(self, x):
        b, t, _ = x.size()
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        x = x + self.attn.c_proj((att @ v).transpose(1, 2).contiguous().view(b, t, C))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(256, C), nn.Embedding(L, C)
        self.h = nn.ModuleList([Block() for _ in range(N)])
        self.ln_f = nn.LayerNorm(C)
        for name, p in sorted(self.named_parameters()):  # nanoGPT's initialisation, as the zoo's
            if "ln_" in name:
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * N) if "c_proj.weight" in name else 0.02)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T


model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=opt["lr"], weight_decay=opt.get("weightDecay", 0.0), foreach=False)
steps = training["rounds"] * training["localSteps"]
batch = training["shardsPerRound"] * training["batchSize"]
schedule = opt.get("schedule", {})
warmup, low = schedule.get("warmupSteps", 0), schedule.get("minLr", 0.0)
total = schedule.get("totalSteps", 0) or steps


def learning_rate(t):
    if t < warmup:
        return opt["lr"] * (t + 1) / warmup
    progress = min(1.0, (t - warmup) / max(1, total - warmup))
    return low + (opt["lr"] - low) * 0.5 * (1.0 + math.cos(math.pi * progress))


start = time.time()
order = torch.randperm(len(train_x))
position = 0
for t in range(steps):
    if position + batch > len(order):
        order, position = torch.randperm(len(train_x)), 0
    index = order[position: position + batch]
    position += batch
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(t)
    optimizer.zero_grad()
    loss = F.cross_entropy(model(train_x[index]).reshape(-1, 256), train_y[index].reshape(-1))
    loss.backward()
    if opt.get("clipNorm", 0.0) > 0.0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), opt["clipNorm"])
    optimizer.step()
model.eval()
with torch.no_grad():
    total_loss = sum(F.cross_entropy(model(test_x[i: i + 7]).reshape(-1, 256), test_y[i: i + 7].reshape(-1),
                                     reduction="sum").item() for i in range(0, len(test_x), 7))
print("test loss %.4f perplexity %.2f after %d steps of %d windows, %.1f s" % (
    total_loss / test_y.numel(), math.exp(total_loss / test_y.numel()), steps, batch, time.time() - start))
print("lm.reference.testLoss %.6f" % (total_loss / test_y.numel()))
print("lm.reference.wall %.3f" % (time.time() - start))
