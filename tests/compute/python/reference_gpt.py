"""Independent reference: the zoo gpt as a PyTorch user writes it (nanoGPT's layout), and the
fortunes text cut as docs/DETERMINISM.md, "Text", says.

Usage: reference_gpt.py HEADS WEIGHTS.pt TOKENS.pt LOGITS.pt FORTUNES_DIR STREAMS.pt SCRIPT.pt
WEIGHTS.pt: Tessera's state dict of a gpt; TOKENS.pt: {"tokens": int64 [B, L]}; LOGITS.pt:
{"logits": Tessera's forward of them}; STREAMS.pt: {"train": uint8, "test": uint8} Tessera's
streams; SCRIPT.pt: Tessera's TorchScript export of the same weights. Exits 1 with the differences named.
"""
import math
import sys

import torch
from torch import nn
from torch.nn import functional as F

import fortunes_text

heads = int(sys.argv[1])
state = torch.load(sys.argv[2])
tokens = torch.load(sys.argv[3])["tokens"]
theirs = torch.load(sys.argv[4])["logits"]
problems = []


class CausalSelfAttention(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(width), CausalSelfAttention(width), nn.LayerNorm(width)
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(width, 4 * width), c_proj=nn.Linear(4 * width, width)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocabulary, context, width, layers, tied):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocabulary, width), wpe=nn.Embedding(context, width),
            h=nn.ModuleList([Block(width) for _ in range(layers)]), ln_f=nn.LayerNorm(width)))
        self.lm_head = nn.Linear(width, vocabulary, bias=False)
        if tied:
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx):
        t = idx.size(1)
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


vocabulary, width = state["transformer.wte.weight"].shape
context = state["transformer.wpe.weight"].shape[0]
layers = len({k.split(".")[2] for k in state if k.startswith("transformer.h.")})
tied = "lm_head.weight" not in state
model = GPT(vocabulary, context, width, layers, tied)
missing, unexpected = model.load_state_dict(state, strict=False)
if unexpected or [m for m in missing if not (tied and m == "lm_head.weight")]:
    problems.append("the state dict does not fit nanoGPT's layout: missing %s, unexpected %s" % (missing, unexpected))
model.eval()
with torch.no_grad():
    ours = model(tokens)
difference = (ours - theirs).abs().max().item()
if difference > 1e-4:
    problems.append("the logits differ from PyTorch's by %g" % difference)

scripted = torch.jit.load(sys.argv[7])
with torch.no_grad():
    exported = (scripted(tokens) - ours).abs().max().item()
if exported > 1e-5:
    problems.append("the TorchScript export's logits differ from PyTorch's by %g" % exported)

# The fortunes text, by the documented rule (fortunes_text.py).
fortunes, train, test, pinned = fortunes_text.streams(sys.argv[5])
if not pinned:
    problems.append("the fortunes files are not the pinned ones")
streams = torch.load(sys.argv[6])
for name, mine in (("train", train), ("test", test)):
    if bytes(streams[name].numpy().tobytes()) != mine:
        problems.append("Tessera's %s stream differs from the documented rule" % name)

if problems:
    print("\n".join(problems))
    sys.exit(1)
print("the gpt is PyTorch's (logits within %g) and the text is cut as documented (%d fortunes)" % (difference, len(fortunes)))
