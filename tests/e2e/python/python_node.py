"""A Tessera compute node written from docs/PROTOCOL.md, docs/DETERMINISM.md and docs/JOBS.md alone,
with pyzmq, PyTorch and PyNaCl: it registers, trains the shards it is given bit for bit as the docs
say, commits, uploads its weights or their int8 update (as a dict PyTorch saved), reports them, keeps
its training states and answers disputes. It also answers inference shards that classify
Fashion-MNIST (docs/DETERMINISM.md, "Inference"; --capabilities int8,inference) and gives other
inference tasks back. It is the proof that the docs are enough to build a node.

Usage: python_node.py ENDPOINT --name NAME [--threads N] [--seconds S] [--shards K]
                      [--poison nan|huge] [--fail-with REASON]
Runs until SIGTERM (or S seconds). Plaintext brokers only. Logs to stdout. For the hostile tests
(tests/e2e/tst_hostile_jobs.cpp) it can lie: --poison reveals weights with a NaN in them, or an
update 30 times the one it trained (its chain, commitment and hashes consistent with what it
reveals); --fail-with reports every shard failed with REASON; --shards K asks for K shards and
then only answers disputes.
"""
import argparse
import base64
import ctypes
import gzip
import hashlib
import io
import json
import os
import re
import signal
import struct
import sys
import time

import numpy as np
import torch
import zmq
from nacl.signing import SigningKey

PROTOCOL = b"TESSERA/1"
REGISTER, WELCOME, HEARTBEAT, READY, TASK, RESULT, OK, ERROR, BYE = range(1, 10)
GET, CHUNK, PUT = 0x10, 0x11, 0x12
COMMIT, CHECKPOINT, VERDICT = 0x29, 0x2A, 0x2B
MIB = 1 << 20
M64 = (1 << 64) - 1


def log(*words):
    print(time.strftime("%H:%M:%S"), *words, flush=True)


# --- DETERMINISM.md, "Seeds" ------------------------------------------------------------------

class SplitMix64:
    def __init__(self, seed):
        self.state = seed & M64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def below(self, n):
        limit = M64 - M64 % n
        v = self.next()
        while v >= limit:
            v = self.next()
        return v % n


def derive(seed, path):
    s = seed & M64
    for p in path:
        s = SplitMix64(s ^ ((p * 0x9E3779B97F4A7C15) & M64)).next()
    return s


def perm(n, seed):
    a = list(range(n))
    r = SplitMix64(seed)
    for i in range(n - 1, 0, -1):
        j = r.below(i + 1)
        a[i], a[j] = a[j], a[i]
    return a


ROUND_PERMUTATION, SHARD_PASS, STEP, INITIALISATION = 1, 2, 3, 4


# --- DETERMINISM.md, "Canonical weights" and "Runtime profile" ----------------------------------

CODES = {torch.float32: 1, torch.float64: 2, torch.int64: 3, torch.int32: 4, torch.float16: 5,
         torch.bfloat16: 6, torch.bool: 7, torch.uint8: 8, torch.int8: 9, torch.int16: 10}


def canonical_hash(tensors):
    h = hashlib.sha256()
    for name in sorted(tensors, key=lambda n: n.encode()):
        t = tensors[name].detach().contiguous().cpu()
        h.update(name.encode() + b"\0" + bytes([CODES.get(t.dtype, 0)]) + struct.pack("<q", t.dim()))
        for size in t.shape:
            h.update(struct.pack("<q", size))
        h.update((t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes())
    return h.digest()


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def blas_name():
    libc = ctypes.CDLL(None)
    libc.dlsym.restype = ctypes.c_void_p
    libc.dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    symbol = libc.dlsym(None, b"sgemm_")  # RTLD_DEFAULT
    info = DlInfo()
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    if not symbol or libc.dladdr(symbol, ctypes.byref(info)) == 0 or not info.dli_fname:
        return "unknown"
    path = os.path.realpath(info.dli_fname.decode())
    folder = os.path.basename(os.path.dirname(path))
    if folder == "blas":
        return "reference"
    if folder.startswith(("openblas", "blis", "atlas")):
        return folder
    return os.path.basename(path)


def runtime_profile(threads):
    version = re.match(r"\d+\.\d+\.\d+", torch.__version__).group(0)
    found = re.search(r"CPU capability usage: (\w+)", torch.__config__.show())
    cpu = found.group(1).lower() if found else "default"
    return "libtorch=%s;blas=%s;threads=%d;cpu=%s;device=cpu" % (version, blas_name(), threads, cpu)


# --- DETERMINISM.md, "Data"; JOBS.md, "The zoo" ---------------------------------------------------

def read_idx(path, magic):
    raw = gzip.open(path).read()
    assert struct.unpack(">I", raw[:4])[0] == magic, path
    dims = magic & 0xFF
    sizes = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(sizes).copy()


_fashion = {}


def fashion_mnist(split="train"):
    if split not in _fashion:
        folder = "/usr/share/datasets/fashion-mnist"
        prefix = "train" if split == "train" else "t10k"
        images = read_idx(folder + "/%s-images-idx3-ubyte.gz" % prefix, 0x803)
        labels = read_idx(folder + "/%s-labels-idx1-ubyte.gz" % prefix, 0x801)
        x = ((torch.from_numpy(images).to(torch.float32) / 255.0 - 0.2860) / 0.3530).unsqueeze(1).contiguous()
        _fashion[split] = (x, torch.from_numpy(labels).to(torch.int64))
    return _fashion[split]


class Mlp(torch.nn.Module):
    def __init__(self, inputs, hidden, classes, p):
        super().__init__()
        widths = [inputs] + list(hidden)
        for i, out in enumerate(list(hidden) + [classes]):
            setattr(self, "fc%d" % i, torch.nn.Linear(widths[i], out))
        self.hidden, self.p = len(hidden), p

    def forward(self, x):
        x = x.flatten(1)
        for i in range(self.hidden):
            x = torch.relu(getattr(self, "fc%d" % i)(x))
            if self.p > 0:
                x = torch.nn.functional.dropout(x, self.p, training=True)
        return getattr(self, "fc%d" % self.hidden)(x)


class Cnn(torch.nn.Module):
    def __init__(self, shape, channels, hidden, classes, p):
        super().__init__()
        c, h, w = shape
        self.conv1 = torch.nn.Conv2d(c, channels[0], 3, padding=1)
        self.conv2 = torch.nn.Conv2d(channels[0], channels[1], 3, padding=1)
        self.fc0 = torch.nn.Linear(channels[1] * (h // 4) * (w // 4), hidden[0])
        self.fc1 = torch.nn.Linear(hidden[0], classes)
        self.p = p

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.fc0(x.flatten(1)))
        if self.p > 0:
            x = torch.nn.functional.dropout(x, self.p, training=True)
        return self.fc1(x)


def build_model(spec):
    if spec.get("zoo") == "mlp":
        return Mlp(784, spec.get("hidden", [256, 128]), 10, spec.get("dropout", 0.0))
    if spec.get("zoo") == "cnn":
        return Cnn((1, 28, 28), spec.get("channels", [16, 32]), spec.get("hidden", [128]), 10, spec.get("dropout", 0.0))
    raise ValueError("this node trains the zoo's mlp and cnn on Fashion-MNIST only")


# --- DETERMINISM.md, "Steps" and "Training state" -----------------------------------------------

class Optimizer:
    def __init__(self, spec, named):
        self.spec, self.named = spec, named
        self.first, self.second, self.steps = {}, {}, 0

    def zero_grad(self):
        for _, p in self.named:
            if p.grad is not None:
                p.grad.detach_()
                p.grad.zero_()

    @torch.no_grad()
    def step(self):
        s = self.spec
        self.steps += 1
        for name, p in self.named:
            if p.grad is None:
                continue
            g = p.grad
            if s.get("weightDecay", 0.0) != 0.0:
                g = g.add(p, alpha=s["weightDecay"])
            if s["kind"] == "sgd":
                momentum = s.get("momentum", 0.0)
                if momentum != 0.0:
                    if name not in self.first:
                        self.first[name] = g.clone().detach()
                    else:
                        self.first[name].mul_(momentum).add_(g)
                    buf = self.first[name]
                    g = g.add(buf, alpha=momentum) if s.get("nesterov", False) else buf
                p.add_(g, alpha=-s["lr"])
                continue
            beta1, beta2 = s.get("beta1", 0.9), s.get("beta2", 0.999)
            if name not in self.first:
                self.first[name] = torch.zeros_like(p)
                self.second[name] = torch.zeros_like(p)
            m, v = self.first[name], self.second[name]
            m.mul_(beta1).add_(g, alpha=1.0 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
            bc1 = 1.0 - beta1 ** self.steps
            bc2 = 1.0 - beta2 ** self.steps
            denom = (v.sqrt() / (bc2 ** 0.5)).add_(s.get("eps", 1e-8))
            p.addcdiv_(m, denom, value=-(s["lr"] / bc1))

    def state(self):
        adam = self.spec["kind"] == "adam"
        out = {}
        for name, tensor in self.first.items():
            out[("exp_avg/" if adam else "momentum/") + name] = tensor
        for name, tensor in self.second.items():
            out["exp_avg_sq/" + name] = tensor
        if adam:
            out["adam_step"] = torch.tensor(self.steps, dtype=torch.int64)
        return out


def training_state(model, optimizer):
    state = {"model/" + k: v for k, v in model.state_dict().items()}
    state.update({"optimizer/" + k: v for k, v in optimizer.state().items()})
    return state


# --- DETERMINISM.md, "Revealed update" --------------------------------------------------------

UPDATE_BLOCK = 256


def revealed(task, start, final):
    """What the node uploads: its final weights, or (compression "int8") their update from the
    round's weights, int8 with a float32 scale per block of 256 elements."""
    if task.get("compression", "none") == "none" or IGNORE_COMPRESSION:
        return final
    out = {"meta/compression": torch.tensor([1, UPDATE_BLOCK], dtype=torch.int64)}
    for name, w in start.items():
        f = final[name].detach()
        if w.dtype != torch.float32:
            out["keep/" + name] = f.clone()
            continue
        d = (f - w).flatten()
        if not bool(torch.isfinite(d).all()):
            raise ValueError("the update of %s is not finite" % name)
        blocks = (d.numel() + UPDATE_BLOCK - 1) // UPDATE_BLOCK
        padded = torch.zeros(blocks * UPDATE_BLOCK, dtype=torch.float32)
        padded[: d.numel()] = d
        scale = padded.view(blocks, UPDATE_BLOCK).abs().amax(dim=1) / 127.0
        per_element = scale.repeat_interleave(UPDATE_BLOCK)[: d.numel()]
        q = torch.where(per_element == 0, torch.zeros_like(d), torch.round(d / per_element))
        out["update/" + name] = q.clamp(-127, 127).to(torch.int8).view(w.shape)
        out["scale/" + name] = scale
    return out


# --- DETERMINISM.md, "Round weights" ------------------------------------------------------------

def round_weights(previous, change):
    """A round's weights from the previous round's and the round's int8 change: W + q * s."""
    out = {}
    for name, w in previous.items():
        if w.dtype != torch.float32:
            out[name] = change["keep/" + name]
            continue
        q, scale = change["update/" + name], change["scale/" + name]
        per_element = scale.repeat_interleave(UPDATE_BLOCK)[: w.numel()]
        out[name] = w + (q.flatten().to(torch.float32) * per_element).view(w.shape)
    return out


def train(task, start_bytes):
    """The shard: (revealed weights file, ShardResult, {k: state file} for checkpoints 1..n-1)."""
    torch.set_num_threads(task["threads"])
    x_all, y_all = fashion_mnist()
    r, k, seed = task["round"], task["shard"], task["seed"]
    steps, batch, c = task["localSteps"], task["batchSize"], task["checkpointInterval"]
    model = build_model(task["model"])
    start = torch.load(io.BytesIO(start_bytes))
    if canonical_hash(start).hex() != task["startWeights"]:
        raise ValueError("the start weights do not hash to the task's startWeights")
    model.load_state_dict(start)
    optimizer = Optimizer(task["optimizer"], list(model.named_parameters()))
    permutation = perm(len(y_all), derive(seed, [ROUND_PERMUTATION, r]))
    slice_ = permutation[task["sampleBegin"]:task["sampleEnd"]]
    length = len(slice_)
    passes = {}

    def sample(q):
        p = q // length
        if p not in passes:
            passes[p] = perm(length, derive(seed, [SHARD_PASS, r, k, p]))
        return slice_[passes[p][q % length]]

    chain = [canonical_hash(start)]
    losses, states = [], {}
    for s in range(steps):
        index = torch.tensor([sample(q) for q in range(s * batch, s * batch + batch)], dtype=torch.int64)
        x, y = x_all.index_select(0, index), y_all.index_select(0, index)
        torch.manual_seed(derive(seed, [STEP, r, k, s]))
        model.train()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        value = loss.item()
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("the loss became NaN or infinite")
        loss.backward()
        optimizer.step()
        losses.append(value)
        done = s + 1
        if done % c == 0 or done == steps:
            state = training_state(model, optimizer)
            chain.append(canonical_hash(state))
            # Checkpoint len(chain) - 1, interior or the last one: kept for disputes (a dispute
            # over the revealed update asks for the last one).
            kept = {name: t.detach().clone() for name, t in state.items()}
            kept["meta/step"] = torch.tensor(done, dtype=torch.int64)
            buffer = io.BytesIO()
            torch.save(kept, buffer)
            states[len(chain) - 1] = buffer.getvalue()
    final = revealed(task, start, poisoned(task, start, model.state_dict()))
    weights = io.BytesIO()
    torch.save(final, weights)  # the state_dict() (an OrderedDict, as PyTorch users save weights) or the update
    result = {
        "jobId": task["jobId"], "round": r, "shard": k, "outcome": "completed",
        "finalHash": canonical_hash(final).hex(),
        "checkpointHashes": [h.hex() for h in chain],
        "weightsSha256": hashlib.sha256(weights.getvalue()).hexdigest(),
        "losses": losses, "samplesProcessed": steps * batch, "wallTimeMs": 0,
        "runtimeProfile": runtime_profile(task["threads"]),
    }
    return weights.getvalue(), result, states, chain


# --- DETERMINISM.md, "Inference" -----------------------------------------------------------------

class CannotRun(Exception):
    """A task this node does not implement: given back (outcome "returned"), held against nobody."""


def infer(task, start_bytes):
    """A classify shard: (lines blob, ShardResult, chain). One line per input of [sampleBegin,
    sampleEnd) of the split, in batches of batchSize counted from input 0; a chain entry per batch,
    the SHA-256 of its lines' SHA-256s."""
    inference = task["inference"]
    if inference["task"] != "classify" or task["dataset"].get("builtin") != "fashion-mnist":
        raise CannotRun("this node classifies Fashion-MNIST only")
    torch.set_num_threads(task["threads"])
    x_all, y_all = fashion_mnist(inference.get("split", "test"))
    model = build_model(task["model"])
    start = torch.load(io.BytesIO(start_bytes))
    if canonical_hash(start).hex() != task["startWeights"]:
        raise ValueError("the model's weights do not hash to the task's startWeights")
    model.load_state_dict(start)
    model.eval()
    batch, lines, chain = task["batchSize"], [], [canonical_hash(start)]
    with torch.no_grad():
        for begin in range(task["sampleBegin"], task["sampleEnd"], batch):
            end = min(begin + batch, task["sampleEnd"])
            p = torch.softmax(model(x_all[begin:end]), 1)
            written = []
            for i in range(end - begin):
                row = [float(v) for v in p[i]]
                chosen = row.index(max(row))  # the first of the largest
                written.append('{"index":%d,"class":%d,"probabilities":[%s],"label":%d}' % (
                    begin + i, chosen, ",".join("%.9g" % v for v in row), int(y_all[begin + i])))
            lines += written
            chain.append(hashlib.sha256(b"".join(hashlib.sha256(w.encode()).digest() for w in written)).digest())
    blob = "".join(line + "\n" for line in lines).encode()
    result = {
        "jobId": task["jobId"], "round": task["round"], "shard": task["shard"], "outcome": "completed",
        "finalHash": hashlib.sha256(blob).hexdigest(), "checkpointHashes": [h.hex() for h in chain],
        "weightsSha256": hashlib.sha256(blob).hexdigest(), "losses": [],
        "samplesProcessed": task["sampleEnd"] - task["sampleBegin"], "wallTimeMs": 0,
        "runtimeProfile": runtime_profile(task["threads"]),
    }
    return blob, result, chain


POISON = None  # --poison
CAPABILITIES = ["int8"]  # --capabilities
IGNORE_COMPRESSION = False  # --ignore-compression: reveals whole weights whatever the task says


def poisoned(task, start, final):
    """What a poisoner reveals instead of its final weights (its update, compressed or not, follows)."""
    if POISON is None:
        return final
    out = {name: t.detach().clone() for name, t in final.items()}
    names = [name for name, t in start.items() if t.dtype == torch.float32]
    if POISON == "nan":
        out[names[0]].view(-1)[0] = float("nan")
    else:  # "huge": an update 30 times the trained one
        for name in names:
            out[name] = start[name] + 30.0 * (out[name] - start[name])
    log("poisoned (%s) round %d shard %d" % (POISON, task["round"], task["shard"]))
    return out


# --- PROTOCOL.md ------------------------------------------------------------------------------

class Node:
    def __init__(self, endpoint, name, threads, shards=None, fail_with=None):
        self.shards, self.fail_with, self.taken = shards, fail_with, 0
        self.key = SigningKey.generate()
        self.node_id = "python-" + self.key.verify_key.encode().hex()[:24]
        self.name, self.threads = name, threads
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)
        self.last_sent = 0.0
        self.blobs = {}  # sha256 hex -> bytes (every blob we fetched or made)
        self.kept = {}  # assignment -> {k: state bytes}
        self.results = 0

    def send(self, command, header, payload=None):
        frames = [PROTOCOL, bytes([command]), json.dumps(header, separators=(",", ":")).encode()]
        if payload is not None:
            frames.append(payload)
        self.socket.send_multipart(frames)
        self.last_sent = time.monotonic()

    def receive(self, timeout_ms):
        if not self.socket.poll(timeout_ms):
            return None
        frames = self.socket.recv_multipart()
        if len(frames) < 3 or frames[0] != PROTOCOL:
            return None
        return frames[1][0], json.loads(frames[2]), frames[3] if len(frames) > 3 else b""

    def sign(self, document):
        document = dict(document, signer=base64.b64encode(self.key.verify_key.encode()).decode())
        message = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        document["signature"] = base64.b64encode(self.key.sign(message).signature).decode()
        return document

    # Waits for the reply to a request, handling what comes meanwhile (heartbeats, checkpoint
    # requests, verdicts). want(command, header, payload) says whether a message is the reply.
    def await_reply(self, want, timeout=120.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.heartbeat()
            message = self.receive(200)
            if message is None:
                continue
            if want(*message):
                return message
            self.unasked(*message)
        raise TimeoutError("no reply from the broker")

    def heartbeat(self):
        if time.monotonic() - self.last_sent >= 1.0:
            self.send(HEARTBEAT, {})

    def unasked(self, command, header, payload):
        if command == TASK:
            self.pending_tasks.append(header)
        elif command == VERDICT:
            log("verdict", header.get("assignment"), header.get("state"), header.get("paid", ""), header.get("detail", ""))
        elif command == CHECKPOINT and "checkpoint" in header:
            self.pending_checkpoints.append(header)
        elif command == ERROR:
            log("broker says", header.get("code"), header.get("message"))

    def register(self):
        node = {
            "nodeId": self.node_id, "name": self.name, "softwareVersion": "python-node 1",
            "runtimeProfile": runtime_profile(1),
            "devices": [{"kind": "cpu", "index": 0, "name": "CPU", "usable": True}],
            "maxThreads": self.threads,
            "signingKey": base64.b64encode(self.key.verify_key.encode()).decode(),
        }
        if CAPABILITIES is not None:  # None: a node from before capabilities, which sends no list
            node["capabilities"] = CAPABILITIES
        self.send(REGISTER, {"node": node, "id": "register"})
        _, header, _ = self.await_reply(lambda c, h, p: c in (WELCOME, ERROR) and h.get("id") == "register")
        if "code" in header:
            raise RuntimeError("registration refused: %s" % header["message"])
        log("registered as", header["nodeId"], "with profile", runtime_profile(1))

    def fetch(self, sha):
        if sha in self.blobs:
            return self.blobs[sha]
        received, size, offset, in_flight = bytearray(), None, 0, 0
        self.send(GET, {"sha256": sha, "offset": 0, "length": MIB})
        offset, in_flight = MIB, 1
        while size is None or len(received) < size:
            command, header, payload = self.await_reply(
                lambda c, h, p: (c == CHUNK and h.get("sha256") == sha) or (c == ERROR and h.get("re") == GET))
            if command == ERROR:
                raise RuntimeError("blob %s: %s" % (sha[:12], header["message"]))
            in_flight -= 1
            assert header["offset"] == len(received), "chunks out of order"
            size = header["size"]
            received += payload
            while in_flight < 8 and offset < size:
                self.send(GET, {"sha256": sha, "offset": offset, "length": MIB})
                offset += MIB
                in_flight += 1
        data = bytes(received)
        if hashlib.sha256(data).hexdigest() != sha:
            raise RuntimeError("blob %s does not hash to its name" % sha[:12])
        self.blobs[sha] = data
        return data

    def upload(self, data):
        sha = hashlib.sha256(data).hexdigest()
        offset, in_flight, complete = 0, 0, False
        while not complete:
            while in_flight < 8 and offset < len(data):
                self.send(PUT, {"sha256": sha, "offset": offset, "size": len(data)}, data[offset:offset + MIB])
                offset += MIB
                in_flight += 1
            command, header, _ = self.await_reply(
                lambda c, h, p: (c == OK and h.get("sha256") == sha and "received" in h) or (c == ERROR and h.get("re") == PUT))
            if command == ERROR:
                raise RuntimeError("upload refused: %s" % header["message"])
            in_flight -= 1
            complete = header.get("complete", False)
        return sha

    def answer_checkpoints(self):
        while self.pending_checkpoints:
            ask = self.pending_checkpoints.pop(0)
            state = self.kept.get(ask["assignment"], {}).get(ask["checkpoint"])
            header = {"verification": ask["verification"], "id": "checkpoint:" + ask["verification"]}
            if state is None:
                log("a dispute asks for a checkpoint this node does not have")
            else:
                header["sha256"] = self.upload(state)
                log("sent checkpoint", ask["checkpoint"], "of", ask["assignment"], "to the referee")
            self.send(CHECKPOINT, header)
            command, reply, _ = self.await_reply(
                lambda c, h, p: c in (OK, ERROR) and h.get("id") == "checkpoint:" + ask["verification"])
            log("the referee answered", "OK" if command == OK else reply.get("message"))

    def start_weights(self, header):
        """The round's weights: rebuilt from the previous round's and the round's change when this
        node holds the previous round's (PROTOCOL.md, "The round's change"), else fetched whole.
        torch.save writes other bytes than Tessera's broker, so the check is the canonical hash."""
        sha, change, base = header["startWeightsBlob"], header.get("startChangeBlob"), header.get("startChangeBase")
        if sha not in self.blobs and change and base in self.blobs:
            try:
                weights = round_weights(torch.load(io.BytesIO(self.blobs[base])), torch.load(io.BytesIO(self.fetch(change))))
            except (RuntimeError, KeyError, ValueError) as error:
                log("the round's change could not be used (%s): fetching the weights whole" % error)
                return self.fetch(sha)
            if canonical_hash(weights).hex() == header["task"]["startWeights"]:
                buffer = io.BytesIO()
                torch.save(weights, buffer)
                self.blobs[sha] = buffer.getvalue()
                log("rebuilt the round's weights from its change")
                return self.blobs[sha]
            log("the round's change did not give its weights: fetching them whole")
        return self.fetch(sha)

    def work(self, assignment, task, start):
        log("training", assignment, "(job %s round %d shard %d)" % (task["jobId"], task["round"], task["shard"]))
        if "inference" in task:
            weights, result, chain = infer(task, start)
            states = {}  # no dispute asks an inference node for a state
        else:
            weights, result, states, chain = train(task, start)
        self.kept[assignment] = states
        root = hashlib.sha256(b"".join(chain)).hexdigest()
        commitment = self.sign({"kind": "tessera-commitment", "assignment": assignment, "jobId": task["jobId"],
                                "round": task["round"], "shard": task["shard"], "finalHash": result["finalHash"],
                                "chainRoot": root})
        self.send(COMMIT, {"commitment": commitment, "id": "commit"})
        command, header, _ = self.await_reply(lambda c, h, p: c in (OK, ERROR) and h.get("id") == "commit")
        if command == ERROR:
            raise RuntimeError("commitment refused: %s" % header["message"])
        self.upload(weights)
        self.send(RESULT, {"assignment": assignment, "result": result, "id": "result"})
        command, header, _ = self.await_reply(lambda c, h, p: c in (OK, ERROR) and h.get("id") == "result")
        if command == ERROR:
            log("result refused:", header["code"], header["message"])
        else:
            self.results += 1
            log("result", assignment, header.get("verdict"), header.get("paid", ""))

    def run(self, stop):
        self.pending_checkpoints, self.pending_tasks = [], []
        # The data is read before the node offers work: a first shard that reads it too would keep
        # the node silent (no heartbeats while it trains) for seconds.
        fashion_mnist()
        self.register()
        ready = False
        while not stop():
            self.answer_checkpoints()
            if not ready and (self.shards is None or self.taken < self.shards):
                self.send(READY, {"slots": 1})
                ready = True
            self.heartbeat()
            message = (TASK, self.pending_tasks.pop(0), b"") if self.pending_tasks else self.receive(200)
            if message is None:
                continue
            command, header, payload = message
            if command == TASK:
                ready = False
                self.taken += 1
                if self.fail_with is not None:
                    log("reporting", header["assignment"], "failed:", self.fail_with)
                    self.send(RESULT, {"assignment": header["assignment"], "id": "result", "result": {
                        "jobId": header["task"]["jobId"], "round": header["task"]["round"],
                        "shard": header["task"]["shard"], "outcome": "failed", "failure": self.fail_with}})
                    continue
                if header["task"].get("determinism") == "portable":
                    # Tessera's portable kernels are not PyTorch's: this node gives such a shard back
                    # (outcome "returned": its own limit, held against nobody), as PROTOCOL.md says.
                    log("cannot train a portable shard", header["assignment"])
                    self.send(RESULT, {"assignment": header["assignment"], "id": "result", "result": {
                        "jobId": header["task"]["jobId"], "round": header["task"]["round"],
                        "shard": header["task"]["shard"], "outcome": "returned",
                        "failure": "this node trains with PyTorch's kernels, not the portable ones"}})
                    continue
                try:
                    self.work(header["assignment"], header["task"], self.start_weights(header))
                except CannotRun as error:
                    log("gives back", header["assignment"], ":", error)
                    self.send(RESULT, {"assignment": header["assignment"], "id": "result", "result": {
                        "jobId": header["task"]["jobId"], "round": header["task"]["round"],
                        "shard": header["task"]["shard"], "outcome": "returned", "failure": str(error)}})
                except (ValueError, RuntimeError) as error:
                    log("cannot train", header["assignment"], ":", error)
                    self.send(RESULT, {"assignment": header["assignment"], "id": "result", "result": {
                        "jobId": header["task"]["jobId"], "round": header["task"]["round"],
                        "shard": header["task"]["shard"], "outcome": "failed", "failure": str(error)}})
            elif command == ERROR and header.get("code") == "not-registered":
                self.register()
                ready = False
            else:
                self.unasked(command, header, payload)
        self.send(BYE, {})
        log("stopped after reporting %d shard(s)" % self.results)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("--name", default="python-node")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--shards", type=int, default=None)
    parser.add_argument("--poison", choices=["nan", "huge"], default=None)
    parser.add_argument("--fail-with", default=None)
    # What it declares it can run (docs/PROTOCOL.md, "Capabilities"): int8 updates; not Tessera's
    # portable kernels nor carried optimizer state. "none": a node from before capabilities.
    parser.add_argument("--capabilities", default="int8")
    # As a node written before int8 updates would: whole weights whatever the task's compression.
    parser.add_argument("--ignore-compression", action="store_true")
    options = parser.parse_args()
    global POISON, CAPABILITIES, IGNORE_COMPRESSION
    IGNORE_COMPRESSION = options.ignore_compression
    POISON = options.poison
    CAPABILITIES = None if options.capabilities == "none" else [c for c in options.capabilities.split(",") if c]
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    until = time.monotonic() + options.seconds
    Node(options.endpoint, options.name, options.threads, options.shards, options.fail_with).run(lambda: stopping or time.monotonic() > until)


if __name__ == "__main__":
    sys.exit(main())
