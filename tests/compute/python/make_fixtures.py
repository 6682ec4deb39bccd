"""Writes PyTorch-made inputs for the compute tests (tests/compute/computetesting.h) into a folder:
  scripted.pt      a torch.jit.script'ed classifier for 28x28 images (10 classes)
  wrong_input.pt   a scripted model that expects 100 features (a shape mismatch on Fashion-MNIST)
  no_params.pt     a scripted model without parameters
  tensors.pt       torch.save({"x": X, "y": Y}) of 600 samples of 20 features, 3 classes
  tensors_test.pt  200 more samples of the same kind
  scripted_lm.pt   a torch.jit.script'ed causal language model over bytes (the sequence contract:
                   forward(tokens [B, L]) -> logits [B, L, 256]), context 32
  tokens.pt        torch.save({"tokens": T}) of 300 windows of 33 bytes of English text
and hostile files, which Tessera must refuse without running any of them (each would leave a file
named touched-* in the folder if it ran):
  reads_files.pt   forward() reads /etc/passwd with torch.from_file and writes it with torch.save
  writes_on_load.pt  __setstate__ (run by torch.jit.load itself) writes a file
  forks.pt         forward() starts a thread with torch.jit.fork
  system.pt        a "tensor file" whose pickle calls os.system when loaded by Python's pickle
and hostile models that pass every check before loading, for the sandboxed compute worker:
  endless.pt       forward() never returns (a loop without end)
  hoarder.pt       forward() allocates 200 MB after 200 MB and keeps them all (untouched: the
                   limit counts address space, and filling pages only makes a test slower)
  printer.pt       forward() prints lines of the worker's own answers ("done", "progress ...")
  nondeterministic.pt  forward() scales its output by a term that depends on where a fresh
                   torch.empty lies: every run of a shard differs, on every node
  endless_load.pt  __setstate__ (run when the model is loaded, before any training) never returns
"""
import os
import sys
from typing import List, Tuple

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


class TinyLm(torch.nn.Module):
    """One block of causal self-attention and an MLP, written as a PyTorch user would."""

    def __init__(self, context: int = 32, width: int = 48):
        super().__init__()
        self.tokens = torch.nn.Embedding(256, width)
        self.positions = torch.nn.Embedding(context, width)
        self.norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.mix = torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
        self.head = torch.nn.Linear(width, 256)
        self.width = width

    def forward(self, tokens):
        length = tokens.size(1)
        x = self.tokens(tokens) + self.positions(torch.arange(length, device=tokens.device))
        q, k, v = self.qkv(self.norm(x)).split(self.width, dim=2)
        scores = (q @ k.transpose(1, 2)) / (self.width ** 0.5)
        future = torch.ones(length, length, dtype=torch.bool, device=tokens.device).triu(1)
        x = x + self.mix(scores.masked_fill(future, float("-inf")).softmax(-1) @ v)
        return self.head(x + self.mlp(x))


torch.jit.script(TinyLm()).save(out + "/scripted_lm.pt")
text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "README.md"), "rb").read()
text = (text * (1 + 300 * 33 // len(text)))[: 300 * 33]
torch.save({"tokens": torch.tensor(list(text), dtype=torch.long).view(300, 33)}, out + "/tokens.pt")



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


class Endless(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(784, 10)

    def forward(self, x):
        i = 0
        while i >= 0:
            i = i + 1
        return self.fc(x.flatten(1))


class Hoarder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(784, 10)

    def forward(self, x):
        # Each chunk is used (else TorchScript drops the allocation, and the loop only grows a list).
        kept: List[torch.Tensor] = []
        total = torch.zeros(1)
        while len(kept) >= 0:
            chunk = torch.empty(50_000_000)
            chunk[0] = 1.0
            kept.append(chunk)
            total = total + chunk[0]
        return self.fc(x.flatten(1)) + total


class Printer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(784, 10)

    def forward(self, x):
        print("done")
        print("progress 1000000 1 0.5 1")
        print("error: printed by the job's own code")
        return self.fc(x.flatten(1))


class Nondeterministic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(784, 10)

    def forward(self, x):
        # A fresh tensor's hash is its address: another in every process (ASLR), as torch.empty's
        # contents would be wherever the allocator hands out memory that held something else.
        scratch = torch.empty(1000 + x.size(0))
        wobble = float(hash(scratch) % 9973) * 1e-5
        return self.fc(x.flatten(1)) * (1.0 + wobble)


class EndlessLoad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(784, 10)
        self.spin = True

    def forward(self, x):
        return self.fc(x.flatten(1))

    @torch.jit.export
    def __getstate__(self) -> Tuple[torch.Tensor, torch.Tensor, bool, bool]:
        return (self.fc.weight, self.fc.bias, self.spin, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, torch.Tensor, bool, bool]):
        i = 0
        while state[2] and i >= 0:
            i = i + 1
        self.fc.weight = state[0]
        self.fc.bias = state[1]
        self.spin = state[2]
        self.training = state[3]


torch.jit.script(Endless()).save(out + "/endless.pt")
torch.jit.script(Hoarder()).save(out + "/hoarder.pt")
torch.jit.script(Printer()).save(out + "/printer.pt")
torch.jit.script(Nondeterministic()).save(out + "/nondeterministic.pt")
torch.jit.script(EndlessLoad()).save(out + "/endless_load.pt")
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

# Weights as PyTorch users save them, in every container Tessera must read the same way, with their
# canonical hashes computed here from docs/DETERMINISM.md ("Canonical weights") alone:
#   weights_*.pt   a plain dict, state_dict() (an OrderedDict with _metadata, buffers included),
#                  nn.Parameters, pickle protocol 4, views sharing a storage, every dtype
#   weights.json   {file: canonical hash}
#   refused_*.pt   files that are not a mapping of names to tensors
import collections
import hashlib
import json
import struct

CODES = {torch.float32: 1, torch.float64: 2, torch.int64: 3, torch.int32: 4, torch.float16: 5,
         torch.bfloat16: 6, torch.bool: 7, torch.uint8: 8}


def canonical_hash(tensors):
    digest = hashlib.sha256()
    for name in sorted(tensors, key=lambda n: n.encode()):
        t = tensors[name].detach().contiguous().cpu()
        digest.update(name.encode() + b"\0" + bytes([CODES.get(t.dtype, 0)]) + struct.pack("<q", t.dim()))
        for size in t.shape:
            digest.update(struct.pack("<q", size))
        raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
        digest.update(raw.numpy().tobytes())
    return digest.hexdigest()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0 = torch.nn.Linear(784, 16)
        self.norm = torch.nn.BatchNorm1d(16)
        self.fc1 = torch.nn.Linear(16, 10)


net = Net()
net.norm.running_mean.uniform_()
state = net.state_dict()
base = torch.randn(6, 5)
weights = {
    "weights_plain.pt": ({k: v.clone() for k, v in state.items()}, {}),
    "weights_state_dict.pt": (state, {}),
    "weights_parameters.pt": (dict(net.named_parameters()), {}),
    "weights_protocol4.pt": (state, {"pickle_protocol": 4}),
    "weights_views.pt": ({"whole": base, "column": base[:, 1], "transposed": base.t(), "tail": base[3:]}, {}),
    "weights_dtypes.pt": ({"f64": torch.randn(3, dtype=torch.float64), "f16": torch.randn(3).half(),
                           "bf16": torch.randn(3).bfloat16(), "i64": torch.arange(3), "i32": torch.arange(3).int(),
                           "u8": torch.arange(3).to(torch.uint8), "b": torch.tensor([True, False]),
                           "scalar": torch.tensor(7)}, {}),
}
hashes = {}
for name, (tensors, options) in weights.items():
    torch.save(tensors, out + "/" + name, **options)
    hashes[name] = canonical_hash(tensors)
json.dump(hashes, open(out + "/weights.json", "w"), indent=1)
torch.save(collections.OrderedDict([("x", torch.randn(8, 20)), ("y", torch.randint(0, 3, (8,)))]), out + "/tensors_ordered.pt")
torch.save([torch.zeros(2)], out + "/refused_list.pt")
torch.save({"outer": {"inner": torch.zeros(2)}}, out + "/refused_nested.pt")
torch.save({"weight": torch.zeros(2), 3: torch.zeros(2)}, out + "/refused_key.pt")
torch.save({"weight": torch.zeros(2).to_sparse()}, out + "/refused_sparse.pt")
