"""Independent reference for the int8 update a shard reveals (docs/DETERMINISM.md, "Revealed update").

Usage: reference_update.py START.pt FINAL.pt REVEALED.pt AGGREGATED.pt
START.pt holds the round's weights, FINAL.pt the shard's final weights (a run with compression
"none"), REVEALED.pt what the node revealed with compression "int8", AGGREGATED.pt what FedAvg with
outer lr 1 made of that one shard. Each is rebuilt here with torch operations and compared bit
for bit; the script exits non-zero and says what differs.
"""
import sys

import torch

BLOCK = 256

# start: the round's weights; final: a shard's; revealed: its int8 form; aggregated: FedAvg of that
# one shard without compression; change and stepped: the round's int8 change and the weights it
# gives (FedAvg with int8: the step quantised like an update, docs/DETERMINISM.md "Round weights").
start, final, revealed, aggregated, change, stepped = (torch.load(path) for path in sys.argv[1:7])
problems = []


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == torch.float32:
        return torch.equal(a.view(torch.int32), b.view(torch.int32))
    return torch.equal(a, b)


def quantised(d, shape):
    """q (int8, shape), the scales per block and each element's scale: docs/DETERMINISM.md."""
    blocks = (d.numel() + BLOCK - 1) // BLOCK
    padded = torch.zeros(blocks * BLOCK, dtype=torch.float32)
    padded[: d.numel()] = d
    scale = padded.view(blocks, BLOCK).abs().amax(dim=1) / 127.0
    per_element = scale.repeat_interleave(BLOCK)[: d.numel()]
    q = torch.where(per_element == 0, torch.zeros_like(d), torch.round(d / per_element))
    return q.clamp(-127, 127).to(torch.int8).view(shape), scale, per_element


expected_names = {"meta/compression"}
meta = revealed.get("meta/compression")
if meta is None or meta.dtype != torch.int64 or meta.tolist() != [1, BLOCK]:
    problems.append("meta/compression is %r, not int64 [1, %d]" % (meta, BLOCK))
for name in sorted(start):
    w, f = start[name], final[name]
    if not w.is_floating_point():
        expected_names.add("keep/" + name)
        if not same_bits(revealed.get("keep/" + name, torch.empty(0)), f):
            problems.append("keep/%s is not the final value" % name)
        continue
    expected_names.update({"update/" + name, "scale/" + name})
    d = (f - w).flatten()
    q, scale, per_element = quantised(d, w.shape)
    if not same_bits(revealed.get("scale/" + name, torch.empty(0)), scale):
        problems.append("scale/%s differs from max|d| / 127 per block" % name)
    if not same_bits(revealed.get("update/" + name, torch.empty(0)), q):
        problems.append("update/%s differs from round(d / scale)" % name)
    decoded = q.flatten().to(torch.float32) * per_element
    error = (decoded - d).abs()
    # Half a step, and float32's own rounding of d / scale and of q * scale (a d within ~1e-5 of a
    # step from a half step may round either way).
    if bool((error > per_element * (0.5 + 1e-4)).any()):
        problems.append("update/%s is further than half a step from the update" % name)
    if not same_bits(aggregated[name], w + decoded.view(w.shape)):
        problems.append("the aggregated %s is not W + q * scale" % name)
    # FedAvg of one shard at outer lr 1: the step is the shard's decoded update, quantised again.
    q2, scale2, per_element2 = quantised(decoded, w.shape)
    if not same_bits(change.get("scale/" + name, torch.empty(0)), scale2) or not same_bits(
        change.get("update/" + name, torch.empty(0)), q2
    ):
        problems.append("the round's change of %s is not the step quantised" % name)
    if not same_bits(stepped[name], w + (q2.flatten().to(torch.float32) * per_element2).view(w.shape)):
        problems.append("the int8 round's %s is not W + q * scale of its change" % name)
if set(revealed) != expected_names:
    problems.append("the revealed names are %s, not %s" % (sorted(revealed), sorted(expected_names)))
if set(change) != expected_names:
    problems.append("the change's names are %s, not %s" % (sorted(change), sorted(expected_names)))
if problems:
    print("\n".join(problems))
    sys.exit(1)
print("the int8 update, the round's change and the aggregations match PyTorch bit for bit (%d tensors)" % len(start))
