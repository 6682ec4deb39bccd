"""bench/report.py on made-up results: every figure of the template is filled, the verdicts follow
the goals, the plot has one line per run, and a missing figure stops the report instead of leaving
a placeholder (or an old number) standing.

Usage: test_bench_report.py SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

src = sys.argv[1]
report = os.path.join(src, "bench", "report.py")
template = os.path.join(src, "bench", "PERFORMANCE.md.in")

records = {
    "trainer.mlp.trainer": 23350, "trainer.mlp.bare": 23888, "trainer.mlp.ratio": 0.977,
    "trainer.mlp.ratioUnhashed": 1.003, "trainer.mlp.portable": 6000, "trainer.mlp.portableRatio": 0.257, "trainer.cnn.trainer": 4483, "trainer.cnn.bare": 4595,
    "trainer.cnn.ratio": 0.96, "trainer.cnn.ratioUnhashed": 1.012, "trainer.cnn.portable": 3600, "trainer.cnn.portableRatio": 0.8,
    "trainer.gpt.trainer": 10100, "trainer.gpt.bare": 10400, "trainer.gpt.ratio": 0.971, "trainer.gpt.ratioUnhashed": 0.99,
    "trainer.gpt.portable": 9000, "trainer.gpt.portableRatio": 0.9,
    "trainer.mlp.shardHereS": 0.5, "trainer.mlp.shardWorkerS": 0.505, "trainer.mlp.workerRatio": 0.99,
    "trainer.mlp.firstShardHereS": 0.6, "trainer.mlp.firstShardWorkerS": 1.6, "trainer.cnn.shardHereS": 0.9,
    "trainer.cnn.shardWorkerS": 0.91, "trainer.cnn.workerRatio": 0.989, "trainer.cnn.firstShardHereS": 1.0,
    "trainer.cnn.firstShardWorkerS": 2.0,
    "trainer.inspect.hashMs": 15.2, "trainer.inspect.inspectMs": 36.8, "trainer.inspect.mb": 23.0,
    "trainer.inspect.ratio": 2.41,
    "inference.classify.node": 130000, "inference.classify.bare": 175000, "inference.classify.ratio": 0.743,
    "inference.classifyCnn.node": 14000, "inference.classifyCnn.bare": 14500, "inference.classifyCnn.ratio": 0.966,
    "inference.generate.node": 2770, "inference.generate.bare": 2690, "inference.generate.ratio": 1.03,
    "inference.generate.uncached": 332, "inference.generate.cacheSpeedup": 8.1,
    "inference.classify.portable": 99927, "inference.classify.portableRatio": 0.75,
    "inference.classifyCnn.portable": 10828, "inference.classifyCnn.portableRatio": 0.98,
    "inference.generate.portable": 1213, "inference.generate.portableRatio": 0.44,
    "inference.generate.portableUncachedRatio": 3.42,
    "serve.local.requestsPerSecond": 81.6, "serve.one.requestsPerSecond": 80.7, "serve.two.requestsPerSecond": 134.7,
    "serve.scaling": 1.67, "serve.local.firstTokenMs": 618.1, "serve.one.firstTokenMs": 623.2, "serve.two.firstTokenMs": 365.0,
    "serve.firstTokenExtraMs": 5.1, "serve.local.aloneFirstTokenMs": 1.1, "serve.one.aloneFirstTokenMs": 2.1,
    "dispute.mlp.replayFirstMs": 14.5, "dispute.mlp.replayMs": 13.7, "dispute.mlp.updateMs": 0.18, "dispute.mlp.updateRatio": 0.0122,
    "dispute.mlp.costlyMs": 1.04, "dispute.mlp.costlyRatio": 0.076,
    "dispute.mlp1024.replayFirstMs": 117.8, "dispute.mlp1024.replayMs": 115.4, "dispute.mlp1024.updateMs": 0.19,
    "dispute.mlp1024.updateRatio": 0.0016, "dispute.mlp1024.costlyMs": 3.35, "dispute.mlp1024.costlyRatio": 0.029,
    "broker.assignmentsPerSecond": 20576, "broker.insertsPerSecond": 42439, "broker.ratio": 0.485,
    "broker.postgresAssignmentsPerSecond": 1788, "broker.postgresRatio": 0.19,
    "failover.takeoverS": 5.5, "failover.firstResultS": 6.7,
    "blob.plain.blob": 643e6, "blob.plain.raw": 2718e6, "blob.curve.blob": 373e6, "blob.curve.raw": 319e6,
    "blob.sha256": 1200e6,
    "network.bytesPerRound": 1348219, "network.bytesPerRoundFloat": 5664219, "network.bytesPerStepExchange": 564350400,
    "network.weightsBytes": 942359, "network.updateBytes": 246000, "network.changeBytes": 242000,
    "network.bytesPerRoundFloatDownload": 3564219, "network.bytesPerRoundPlain": 1464219,
    "network.codedUpdateBytes": 225000, "network.codedChangeBytes": 222000,
    "lm.tessera.testLoss": 2.1, "lm.reference.testLoss": 2.0, "lm.tessera.wall": 400, "lm.reference.wall": 250,
    "lm.network.wall": 260, "lm.network.testLoss": 1.95, "lm.network.toTarget": 190, "lm.network.targetRound": 24,
    "lm.network.rounds": 10, "lm.network.reexecuted": 3, "lm.network.jobRounds": 30, "lm.network.jobLocalSteps": 25,
    "lm.network.jobEvaluateEvery": 3, "lm.network.tokensRatio": 1.25, "lm.network.secondsPerRound": 9.0,
    "compression.mlp.none.0": 86.5, "compression.mlp.int8.0": 86.9, "compression.mlp.none.1": 86.9,
    "compression.mlp.int8.1": 86.8, "compression.cnn.none.0": 86.1, "compression.cnn.int8.0": 85.6,
    "load.nodes": 10000, "load.messages": 110269, "load.cpuSeconds": 1.3, "load.share": 0.13,
    "load.postgres.share": 0.24, "load.postgres.messages": 114829, "load.second.share": 0.275,
    "load.second.messages": 114605,
    "ledger.transfersPerSecond": 13553, "ledger.appendsPerSecond": 217367, "ledger.logShare": 0.062,
    "ledger.proofLogEntries": 10000000, "ledger.inclusionProofBytes": 768, "ledger.consistencyProofBytes": 800,
    "ledger.inclusionReadMs": 1.45, "ledger.inclusionVerifyMicros": 15.7, "ledger.consistencyVerifyMicros": 21.0,
    "verification.honestShards": 100000, "verification.honestSlashed": 0, "verification.steadyOverhead": 0.05,
    "verification.lifetimeOverhead": 0.087, "verification.caughtNew": 0.9995,
    "verification.caughtAfter100": 0.8875, "verification.caughtAfter1000": 0.389,
    "app.start": 0.27, "app.versionStart": 0.05, "app.torchStart": 0.72, "app.rssMB": 45, "app.brokerRssMB": 160,
    "app.cpuPercent": 0.3, "control.apiCpuPercent5": 0.2, "control.apiCpuPercent0": 0.0,
    "local.wall": 25.0, "net.verified.wall": 160.0, "net.unverified.wall": 70.0,
}


# tessera-bench-swarm: the broker's bytes per blob, by blob and node count, seeded by default and plainly.
for mode in ("swarm", "swarm.plain"):
    for blob in ("example", "40m"):
        for nodes in (4, 16, 32):
            records["%s.%s.%d.ratio" % (mode, blob, nodes)] = 1.5
            records["%s.%s.%d.seconds" % (mode, blob, nodes)] = 2.0
records.update({"swarm.uplink.seconds": 5.0, "swarm.uplink.ratio": 1.0, "swarm.uplink.getSeconds": 27.5,
                "swarm.plain.uplink.seconds": 11.0, "swarm.plain.uplink.ratio": 2.4})
# bench/uplink.sh: whole rounds behind tc tbf, with the swarm and by GET alone.
for kind in ("rounds", "delivery"):
    records.update({"swarm.%s.swarm.first" % kind: 30.0, "swarm.%s.swarm.later" % kind: 10.0,
                    "swarm.%s.get.first" % kind: 110.0, "swarm.%s.get.later" % kind: 35.0,
                    "swarm.%s.faster" % kind: 3.5, "swarm.%s.firstFaster" % kind: 3.7})

# bench/chunks.sh: a 4 GiB corpus, what a node held of it.
records.update({"chunks.corpus.bytes": 4 << 30, "chunks.generate.seconds": 40.0, "chunks.cut.seconds": 80.0,
                "chunks.count": 65, "chunks.bytes": 4.33e9, "chunks.upload.seconds": 60.0, "chunks.train.seconds": 30.0,
                "chunks.node.chunks": 4, "chunks.node.bytes": 2.7e8})

# bench/scale.sh: per model size; state is a word, not a number.
for name, params, ratio, node, broker, silent in (("1m", 1.07e6, 1.5, 268, 306, 0), ("10m", 10.0e6, 1.38, 531, 694, 0),
                                                  ("40m", 36.8e6, 1.2, 1143, 1586, 0), ("100m", 98.7e6, 1.27, 2555, 3742, 2),
                                                  ("gpt40m", 39.6e6, 1.3, 1500, 900, 0)):
    records.update({"scale.%s.%s" % (name, key): value for key, value in (
        ("params", params), ("modelBytes", params * 4), ("localWall", 10.0), ("netWall", 10.0 * ratio), ("ratio", ratio),
        ("checks", 4), ("bytesPerRound", params * 24), ("localRssMB", node), ("nodeRssMB", node),
        ("brokerRssMB", broker), ("nodeDiskMB", node), ("silent", silent))})


def device(threads):
    return {"device": "cpu:0 Test CPU", "runtimeProfile": "libtorch=1.13.0;threads=%d" % threads,
            "measurements": [{"name": n, "value": v * threads, "cv": 0.03, "unit": "u"}
                             for n, v in (("mlp", 20000), ("cnn", 3000), ("matmul", 30))]}


accuracy = [0.7 + 0.01 * r for r in range(15)]
with tempfile.TemporaryDirectory() as out:
    with open(os.path.join(out, "records.txt"), "w") as f:
        for key, value in records.items():
            f.write("%s %r\n" % (key, float(value)))
        for name in ("1m", "10m", "40m", "100m", "gpt40m"):
            f.write("scale.%s.state finished\n" % name)
    for threads in (1, 2):
        json.dump(device(threads), open(os.path.join(out, "devices-%d.json" % threads), "w"))
    os.makedirs(os.path.join(out, "local"))
    json.dump({"finalWeightsHash": "ab" * 32, "rounds": [{"testAccuracy": a} for a in accuracy],
               "job": {"training": {"rounds": 15, "shardsPerRound": 3}}},
              open(os.path.join(out, "local", "report.json"), "w"))
    for run, checks, bits in (("verified", 45, "ab"), ("unverified", 0, "cd")):
        os.makedirs(os.path.join(out, run))
        with open(os.path.join(out, run, "job.json"), "w") as f:
            f.write("round 15/15 ...\n")  # whatever tessera-job printed before the JSON
            json.dump({"rounds": 15, "shardsPerRound": 3, "weightsHash": bits * 32,
                       "history": [{"testAccuracy": a} for a in accuracy]}, f)
        json.dump([{"outcome": "none", "kind": "sample"}] * checks + [{"outcome": "none", "kind": "canary"}],
                  open(os.path.join(out, run, "checks.json"), "w"))

    md, svg = os.path.join(out, "PERFORMANCE.md"), os.path.join(out, "plot.svg")
    run = subprocess.run([sys.executable, report, out, template, md, svg], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    text = open(md).read()
    flat = " ".join(text.split())  # the template wraps its lines anywhere
    assert "{{" not in text, [line for line in text.splitlines() if "{{" in line]
    assert "| mlp 784-256-128-10, 500 steps | 23,350 samples/s | 23,888 samples/s | **0.977** | met |" in text, text
    assert "**0.960** | **not met**" in text  # cnn below 0.97
    # The portable kernels: mlp below 0.7 (not met), the cnn at 0.8 (met); the dispute's share.
    assert "| mlp | 6,000 samples/s | **0.257** | **not met** |" in text, text
    assert "| cnn | 3,600 samples/s | **0.800** | met |" in text, text
    assert "| **1/82** | **not met** |" in text and "| **1/625** | met |" in text, text
    assert "**2.29x**" in flat  # 160 s / 70 s
    # int8: mlp +0.15 points (met), cnn -0.5 (not met); 385x fewer bytes than a per-step exchange.
    assert "| mlp | 86.70% (86.50, 86.90) | 86.85% (86.90, 86.80) | +0.15 | met |" in text, text
    assert "| cnn | 86.10% (86.10) | 85.60% (85.60) | -0.50 | **not met** |" in text
    assert "**419x** fewer (met); 385x with plain ranges" in flat, flat
    assert "643 MB/s | 2,718 MB/s | 0.237 | **not met** | 1,200 MB/s | 0.536 |" in text
    assert "| broker + 3 nodes | 84.00% | 1.0000 | the same bits |" in text
    assert "| broker + 3 nodes, no re-execution | 84.00% | 1.0000 | **different bits** |" in text
    assert "(shards: 45; re-executions of sampled results: 45; canaries: 1; disputes: 0)" in flat, flat
    # Time to loss: 190 s against PyTorch's 250 s, 0.76x (met).
    assert "| 190 s (round 24) | 0.76x (met) | 1.9500 | 260 s |" in text, text
    plot = open(svg).read()
    assert plot.count("<polyline") == 3 and plot.startswith("<svg"), plot[:200]
    # The scale table: the 40 M goals met, the 100 M job finished, two heartbeats missed there.
    assert "| mlp [4096] x 3 | 36.8 M | 147 MB | 12.0 s / 10.0 s = **1.20x** |" in text, text
    assert "at most 2.0 (met), no heartbeat missed (met), node peak RSS at most 1.2 GB (met)" in flat, flat
    assert "the job finishes (met)" in flat
    assert "| 2,555 MB | 3,742 MB | 2,555 MB | 2 |" in text
    # The gpt's node budget counts AdamW's moments: 268 + 9 x 158 MB = 1,694 MB, 1,500 MB used.
    assert "| gpt, 8 blocks of width 640, AdamW | 39.6 M | 158 MB | 13.0 s / 10.0 s = **1.30x** |" in text, text
    assert "1,694 MB (met)" in flat, flat
    scale = open(os.path.join(out, "scale-curve.svg")).read()
    assert scale.count("<polyline") == 3 and "98.7 M" in scale, scale[:300]

    # A benchmark that did not run: the report says which figure is missing and writes nothing.
    lines = [l for l in open(os.path.join(out, "records.txt")) if not l.startswith("load.")]
    open(os.path.join(out, "records.txt"), "w").writelines(lines)
    os.remove(md)
    run = subprocess.run([sys.executable, report, out, template, md, svg], capture_output=True, text=True)
    assert run.returncode != 0 and "load.cpuSeconds" in run.stderr, run.stderr
    assert not os.path.exists(md)
print("bench report: every figure filled, verdicts follow the goals, missing figures refused")
