"""Writes docs/PERFORMANCE.md (and the accuracy plot) from what bench/run.sh measured.

Usage: report.py RESULTS_DIR TEMPLATE OUTPUT_MD OUTPUT_SVG

RESULTS_DIR holds records.txt ("key value" lines appended by the benchmarks, bench/record.h),
devices-1.json and devices-2.json (tessera-node benchmark --json), local/report.json (train-local)
and verified/ and unverified/ (job.json from tessera-job wait --json, checks.json). The template
holds the text; each {{key}} or {{key:format}} in it is replaced by a figure (Python's format
spec), and every figure the template names must exist: a missing one stops the report, so that an
old number is never left standing.
"""
import json
import math
import os
import platform
import re
import sys
from datetime import date


def load_json(path):
    text = open(path).read()
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    return json.loads(text[min(starts):])


def met(value, goal, at_least=True):
    return "met" if (value >= goal if at_least else value <= goal) else "**not met**"


def figures(results):
    f = {}
    for line in open(os.path.join(results, "records.txt")):
        parts = line.split()
        if len(parts) == 2:
            try:
                f[parts[0]] = float(parts[1])
            except ValueError:
                f[parts[0]] = parts[1]

    # Derived figures and verdicts.
    for model, goal in (("mlp", 0.97), ("cnn", 0.97), ("gpt", 0.95)):
        if "trainer.%s.ratio" % model in f:
            f["trainer.%s.verdict" % model] = met(f["trainer.%s.ratio" % model], goal)
        if "trainer.%s.workerRatio" % model in f:
            f["trainer.%s.workerVerdict" % model] = met(f["trainer.%s.workerRatio" % model], 0.98)
        if "trainer.%s.portableRatio" % model in f:
            f["trainer.%s.portableVerdict" % model] = met(f["trainer.%s.portableRatio" % model], 0.7)
    for task in ("classify", "classifyCnn", "generate"):
        if "inference.%s.ratio" % task in f:
            f["inference.%s.verdict" % task] = met(f["inference.%s.ratio" % task], 0.9)
    if "serve.scaling" in f:
        f["serve.scalingVerdict"] = met(f["serve.scaling"], 1.7)
        f["serve.latencyVerdict"] = met(f["serve.firstTokenExtraMs"], 20.0, at_least=False)
    for model in ("mlp", "mlp1024"):
        if "dispute.%s.updateRatio" % model in f:
            f["dispute.%s.updateShare" % model] = 1.0 / f["dispute.%s.updateRatio" % model]
            f["dispute.%s.costlyShare" % model] = 1.0 / f["dispute.%s.costlyRatio" % model]
            f["dispute.%s.verdict" % model] = met(f["dispute.%s.updateShare" % model], 100)
    if "broker.assignmentsPerSecond" in f:
        f["broker.verdict"] = met(f["broker.assignmentsPerSecond"], 5000)
    if "ledger.logShare" in f:
        f["ledger.logPercent"] = f["ledger.logShare"] * 100
        f["ledger.verdict"] = met(f["ledger.logShare"], 0.10, at_least=False)
    if "ledger.inclusionProofBytes" in f:
        f["ledger.proofVerdict"] = met(
            max(f["ledger.inclusionProofBytes"], f["ledger.consistencyProofBytes"]) <= 1024
            and max(f["ledger.inclusionVerifyMicros"], f["ledger.consistencyVerifyMicros"]) <= 1000, True)
    # Measured only where PostgreSQL is installed, and the failover only as root (namespaces).
    if "broker.postgresAssignmentsPerSecond" in f:
        f["broker.postgresRow"] = "| %s /s | %.3f | %s |" % (
            format(f["broker.postgresAssignmentsPerSecond"], ",.0f"), f["broker.postgresRatio"],
            met(f["broker.postgresRatio"], 0.5))
    else:
        f["broker.postgresRow"] = "| not measured (no PostgreSQL here) | | |"
    if "failover.firstResultS" in f:
        f["failover.row"] = "| %.1f s | %.1f s | %s |" % (
            f["failover.takeoverS"], f["failover.firstResultS"], met(f["failover.firstResultS"], 15, at_least=False))
    else:
        f["failover.row"] = "| not measured (needs root for network namespaces) | | |"
    for link in ("plain", "curve"):
        if "blob.%s.blob" % link in f:
            f["blob.%s.ratio" % link] = f["blob.%s.blob" % link] / f["blob.%s.raw" % link]
            f["blob.%s.verdict" % link] = met(f["blob.%s.ratio" % link], 0.8)
            f["blob.%s.blobMB" % link] = f["blob.%s.blob" % link] / 1e6
            f["blob.%s.rawMB" % link] = f["blob.%s.raw" % link] / 1e6
            # A receiver that checks every byte moves at most what SHA-256 hashes, whatever the link.
            if "blob.sha256" in f:
                ceiling = min(f["blob.%s.raw" % link], f["blob.sha256"])
                f["blob.%s.ceilingMB" % link] = ceiling / 1e6
                f["blob.%s.ofCeiling" % link] = f["blob.%s.blob" % link] / ceiling
    if "blob.sha256" in f:
        f["blob.sha256MB"] = f["blob.sha256"] / 1e6
    if "network.bytesPerRound" in f:
        f["network.ratio"] = f["network.bytesPerRound"] / f["network.bytesPerStepExchange"]
        f["network.fewer"] = f["network.bytesPerStepExchange"] / f["network.bytesPerRound"]
        f["network.fewerVerdict"] = met(f["network.fewer"], 400)
        if "network.bytesPerRoundPlain" in f:
            f["network.fewerPlain"] = f["network.bytesPerStepExchange"] / f["network.bytesPerRoundPlain"]
        if "network.bytesPerRoundFloat" in f:
            f["network.fewerFloat"] = f["network.bytesPerStepExchange"] / f["network.bytesPerRoundFloat"]
        if "network.bytesPerRoundFloatDownload" in f:
            f["network.fewerFloatDownload"] = f["network.bytesPerStepExchange"] / f["network.bytesPerRoundFloatDownload"]
        if "network.changeBytes" in f:
            f["network.changeShare"] = f["network.changeBytes"] / f["network.weightsBytes"]
        if "network.updateBytes" in f:
            f["network.updateShare"] = f["network.updateBytes"] / f["network.weightsBytes"]
    compression(f)
    if "lm.tessera.testLoss" in f and "lm.reference.testLoss" in f:
        f["lm.ratio"] = f["lm.tessera.testLoss"] / f["lm.reference.testLoss"]
        f["lm.percent"] = (f["lm.ratio"] - 1.0) * 100.0
        f["lm.verdict"] = met(f["lm.ratio"], 1.02, at_least=False)
        f["lm.tessera.perplexity"] = math.exp(f["lm.tessera.testLoss"])
        f["lm.reference.perplexity"] = math.exp(f["lm.reference.testLoss"])
    if "lm.network.wall" in f and "lm.reference.wall" in f:
        f["lm.network.perplexity"] = math.exp(f["lm.network.testLoss"])
        f["lm.network.wallRatio"] = f["lm.network.wall"] / f["lm.reference.wall"]
        # PyTorch's time for one round's windows (2 shards x H steps x 16 windows, at 32 a step).
        f["lm.network.referenceSecondsPerRound"] = (f["lm.reference.wall"] / 600.0 * f["lm.network.jobLocalSteps"]
                                                    * 2 * 16 / 32.0)
        f["lm.network.roundRatio"] = f["lm.network.secondsPerRound"] / f["lm.network.referenceSecondsPerRound"]
        if "lm.network.toTarget" in f:
            f["lm.network.timeRatio"] = f["lm.network.toTarget"] / f["lm.reference.wall"]
            f["lm.network.toTargetText"] = "%.0f s (round %d)" % (f["lm.network.toTarget"], f["lm.network.targetRound"])
            f["lm.network.timeRatioText"] = "%.2fx (%s)" % (f["lm.network.timeRatio"], met(f["lm.network.timeRatio"], 0.8, at_least=False))
        else:
            f["lm.network.toTargetText"] = "not reached in %.0f s" % f["lm.network.wall"]
            f["lm.network.timeRatioText"] = "**not met**"
    if "load.share" in f:
        f["load.percent"] = f["load.share"] * 100
        f["load.verdict"] = met(f["load.share"], 0.30, at_least=False)
    if "load.postgres.share" in f:
        f["load.postgresRows"] = "\n".join(
            "| %s | %.1f%% (%s messages in) | %s |" % (name, f["%s.share" % key] * 100, format(f["%s.messages" % key], ",.0f"),
                                                      met(f["%s.share" % key], 0.30, at_least=False))
            for name, key in (("the first broker", "load.postgres"), ("a second broker beside it", "load.second")) if "%s.share" % key in f)
    else:
        f["load.postgresRows"] = "| not measured (no PostgreSQL here) | | |"
    if "verification.steadyOverhead" in f:
        f["verification.steadyVerdict"] = met(f["verification.steadyOverhead"], 0.10, at_least=False)
        f["verification.caughtNewVerdict"] = met(f["verification.caughtNew"], 0.99)
        for key in ("caughtNew", "caughtAfter100", "caughtAfter1000"):
            f["verification.%sPercent" % key] = f["verification." + key] * 100
    if "control.apiCpuPercent5" in f:
        f["control.cpuVerdict"] = met(f["control.apiCpuPercent5"], 1, at_least=False)
    if "app.start" in f:
        f["app.startRatio"] = f["app.start"] / f["app.versionStart"]
        f["app.startVerdict"] = met(f["app.start"], 0.3, at_least=False)
        f["app.rssRatio"] = f["app.rssMB"] / 100
        f["app.rssVerdict"] = met(f["app.rssMB"], 100, at_least=False)
        f["app.cpuVerdict"] = met(f["app.cpuPercent"], 0.5, at_least=False)

    scale(f)

    for threads in (1, 2):
        path = os.path.join(results, "devices-%d.json" % threads)
        if os.path.exists(path):
            device = load_json(path)
            for m in device["measurements"]:
                f["device.%d.%s" % (threads, m["name"])] = m["value"]
                f["device.%d.%s.cv" % (threads, m["name"])] = m["cv"] * 100
            f["device.name"] = device["device"].split(" ", 1)[-1]
            f["device.profile"] = device["runtimeProfile"]

    curves = {}
    local = os.path.join(results, "local", "report.json")
    if os.path.exists(local):
        report = load_json(local)
        curves["local"] = [r["testAccuracy"] for r in report["rounds"]]
        f["local.accuracy"] = curves["local"][-1] * 100
        f["local.rounds"] = len(curves["local"])
        f["local.hash"] = report["finalWeightsHash"][:16]
        training = report["job"]["training"]
        f["local.shards"] = training["rounds"] * training["shardsPerRound"]
    for run in ("verified", "unverified"):
        path = os.path.join(results, run, "job.json")
        if not os.path.exists(path):
            continue
        job = load_json(path)
        curves[run] = [r["testAccuracy"] for r in job["history"]]
        f["net.%s.accuracy" % run] = curves[run][-1] * 100
        f["net.%s.hash" % run] = job.get("weightsHash", "")[:16]
        f["net.%s.same" % run] = "the same bits" if job.get("weightsHash", "")[:16] == f.get("local.hash") \
            else "**different bits**"
        if "local" in curves:
            f["net.%s.accuracyRatio" % run] = curves[run][-1] / curves["local"][-1]
        checks = load_json(os.path.join(results, run, "checks.json")) if os.path.exists(
            os.path.join(results, run, "checks.json")) else []
        f["net.%s.checks" % run] = len(checks)
        f["net.%s.samples" % run] = sum(1 for c in checks if c.get("kind") == "sample")
        f["net.%s.canaries" % run] = sum(1 for c in checks if c.get("kind") == "canary")
        f["net.%s.disputes" % run] = sum(1 for c in checks if c.get("outcome") not in (None, "none"))
        if "local.shards" in f:
            f["net.%s.shards" % run] = f["local.shards"]
    if "net.verified.wall" in f and "net.unverified.wall" in f:
        f["net.verificationOverhead"] = f["net.verified.wall"] / f["net.unverified.wall"]
    if "net.unverified.wall" in f and "local.wall" in f:
        f["net.unverifiedVsLocal"] = f["net.unverified.wall"] / f["local.wall"]
    for mode in ("swarm.uplink", "swarm.plain.uplink"):
        if mode + ".seconds" in f and "swarm.uplink.getSeconds" in f:
            f[mode + ".faster"] = f["swarm.uplink.getSeconds"] / f[mode + ".seconds"]
    if "chunks.node.bytes" in f and "chunks.bytes" in f and f["chunks.node.bytes"] > 0:
        f["chunks.ratio"] = f["chunks.bytes"] / f["chunks.node.bytes"]
        f["chunks.corpusGiB"] = f["chunks.corpus.bytes"] / float(1 << 30)
        f["chunks.nodeMiB"] = f["chunks.node.bytes"] / float(1 << 20)
        f["chunks.cutMBs"] = f["chunks.corpus.bytes"] / 1e6 / f["chunks.cut.seconds"]
        f["chunks.uploadMBs"] = f["chunks.bytes"] / 1e6 / f["chunks.upload.seconds"]
    f["date"] = date.today().isoformat()
    return f, curves


def render(template, f):
    missing = []

    def replace(match):
        key, _, spec = match.group(1).partition(":")
        if key not in f:
            missing.append(key)
            return match.group(0)
        value = f[key]
        return format(value, spec) if spec else str(value)

    text = re.sub(r"\{\{([^{}]+)\}\}", replace, template)
    if missing:
        sys.exit("report: no figure for %s (did a benchmark fail?)" % ", ".join(sorted(set(missing))))
    return text


SCALE = ("1m", "10m", "40m", "100m")


def compression(f):
    """bench/compression.sh: final test accuracy per job with float32 weights and int8 updates, over
    seeds; the goal is int8 within 0.3 points of float32 (on the mean)."""
    for job in ("mlp", "cnn"):
        for kind in ("none", "int8"):
            values = [v for k, v in sorted(f.items()) if k.startswith("compression.%s.%s." % (job, kind))]
            if values:
                f["compression.%s.%s.mean" % (job, kind)] = sum(values) / len(values)
                f["compression.%s.%s.runs" % (job, kind)] = ", ".join("%.2f" % v for v in values)
                f["compression.%s.seeds" % job] = len(values)
        if "compression.%s.int8.mean" % job in f and "compression.%s.none.mean" % job in f:
            delta = f["compression.%s.int8.mean" % job] - f["compression.%s.none.mean" % job]
            f["compression.%s.delta" % job] = delta
            f["compression.%s.verdict" % job] = met(delta, -0.3)


def scale(f):
    """The scale curve (bench/scale.sh): derived figures and the issue's goals. Memory budgets are
    against the smallest model's figures of the same run (runtime and dataset)."""
    if "scale.1m.nodeRssMB" not in f:
        return
    for name in SCALE + ("gpt40m",):
        key = "scale.%s." % name
        if key + "params" not in f:
            continue
        f[key + "paramsM"] = f[key + "params"] / 1e6
        f[key + "modelMB"] = f[key + "modelBytes"] / 1e6
        f[key + "bytesPerRoundMB"] = f[key + "bytesPerRound"] / 1e6
        # A node holds about 5 model copies with SGD; AdamW adds its two moments, live and in the kept state.
        f[key + "nodeBudgetMB"] = f["scale.1m.nodeRssMB"] + (9 if name.startswith("gpt") else 5) * f[key + "modelMB"]
        f[key + "brokerBudgetMB"] = f["scale.1m.brokerRssMB"] + 3 * f[key + "modelMB"]
        f[key + "nodeBudget"] = met(f[key + "nodeRssMB"], f[key + "nodeBudgetMB"], at_least=False)
        f[key + "brokerBudget"] = met(f[key + "brokerRssMB"], f[key + "brokerBudgetMB"], at_least=False)
        f[key + "silentInt"] = int(f[key + "silent"])
        f[key + "checksInt"] = int(f[key + "checks"])
    if "scale.40m.ratio" in f:
        f["scale.40m.ratioVerdict"] = met(f["scale.40m.ratio"], 2.0, at_least=False)
        f["scale.40m.silentVerdict"] = met(f["scale.40m.silent"], 0, at_least=False)
        f["scale.40m.rssVerdict"] = met(f["scale.40m.nodeRssMB"], 1200, at_least=False)
    if "scale.100m.state" in f:
        f["scale.100m.finishedVerdict"] = "met" if f["scale.100m.state"] == "finished" else "**not met**"


def scale_svg(f):
    """Network / train-local wall time and peak RSS per model size, as an SVG chart (log x)."""
    names = [n for n in SCALE if "scale.%s.params" % n in f]
    if not names:
        return None
    width, height, left, right, top, bottom = 640, 360, 60, 20, 30, 50
    params = [f["scale.%s.params" % n] for n in names]
    series = {
        "ratio": [f["scale.%s.ratio" % n] for n in names],
        "node": [f["scale.%s.nodeRssMB" % n] / 1000 for n in names],
        "broker": [f["scale.%s.brokerRssMB" % n] / 1000 for n in names],
    }
    high = max(1.0, math.ceil(max(v for values in series.values() for v in values)))
    lo, hi = math.log10(min(params)), math.log10(max(params))

    def x(p):
        return left + (width - left - right) * ((math.log10(p) - lo) / max(hi - lo, 1e-9))

    def y(v):
        return top + (height - top - bottom) * (1 - v / high)

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif" font-size="12">' % (width, height, width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="14">Zoo MLPs on a broker + 2 nodes, by parameters</text>' % left]
    for v in range(0, int(high) + 1):
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, width - right, y(v), y(v)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (left - 6, y(v) + 4, v))
    for p in params:
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%.1f M</text>' % (x(p), height - bottom + 16, p / 1e6))
    out.append('<text x="%d" y="%d" text-anchor="middle">parameters (log scale)</text>' % (
        (left + width - right) / 2, height - 12))
    styles = {
        "ratio": ("#d62728", "", "network wall / train-local wall"),
        "node": ("#1f77b4", "6 4", "node peak RSS (GB)"),
        "broker": ("#2ca02c", "2 3", "broker peak RSS (GB)"),
    }
    lines = [styles[name] + ([(x(p), y(v)) for p, v in zip(params, values)],) for name, values in series.items()]
    out += svg_lines(lines, left, top)
    out.append("</svg>")
    return "\n".join(out) + "\n"


SWARM_NODES = (4, 16, 32)


def svg_lines(lines, left, top):
    """One polyline per (color, dash, label, points), with its legend entry in the top left."""
    out = []
    legend_y = top + 14
    for color, dash, label, points in lines:
        dashing = 'stroke-dasharray="%s"' % dash if dash else ""
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" %s points="%s"/>' % (
            color, dashing, " ".join("%.1f,%.1f" % point for point in points)))
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2" %s/>' % (
            left + 10, left + 40, legend_y, legend_y, color, dashing))
        out.append('<text x="%d" y="%d">%s</text>' % (left + 46, legend_y + 4, label))
        legend_y += 18
    return out


def swarm_svg(f):
    """The broker's bytes for a round's blob against the number of nodes (tessera-bench-swarm):
    GET alone, the swarm by default and with every node dialling the seed, for each blob."""
    if not all("swarm.%s.%d.ratio" % (b, n) in f for b in ("example", "40m") for n in SWARM_NODES):
        return None
    width, height, left, right, top, bottom = 640, 360, 60, 20, 30, 50
    high = max(SWARM_NODES)

    def x(n):
        return left + (width - left - right) * (n - SWARM_NODES[0]) / (high - SWARM_NODES[0])

    def y(v):
        return top + (height - top - bottom) * (1 - v / high)

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif" font-size="12">' % (width, height, width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="14">The broker\'s bytes per round\'s blob, in copies of it</text>' % left]
    for v in range(0, high + 1, 4):
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, width - right, y(v), y(v)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%dx</text>' % (left - 6, y(v) + 4, v))
    for n in SWARM_NODES:
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (x(n), height - bottom + 16, n))
    out.append('<text x="%d" y="%d" text-anchor="middle">nodes fetching the blob</text>' % (
        (left + width - right) / 2, height - 12))
    lines = [("#7f7f7f", "6 4", "GET alone", [float(n) for n in SWARM_NODES])]
    for key, color, label in (("40m", "#d62728", "swarm, 43 MB change"), ("example", "#1f77b4", "swarm, 242 KB change")):
        lines.append((color, "", label, [f["swarm.%s.%d.ratio" % (key, n)] for n in SWARM_NODES]))
        if all("swarm.plain.%s.%d.ratio" % (key, n) in f for n in SWARM_NODES):
            lines.append((color, "2 3", label + ", every node dials the seed",
                          [f["swarm.plain.%s.%d.ratio" % (key, n)] for n in SWARM_NODES]))
    out += svg_lines([(color, dash, label, [(x(n), y(v)) for n, v in zip(SWARM_NODES, values)])
                      for color, dash, label, values in lines], left, top)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def svg(curves):
    """Test accuracy per round as an SVG line chart, no dependencies."""
    width, height, left, right, top, bottom = 640, 360, 60, 20, 30, 50
    rounds = max(len(c) for c in curves.values())
    values = [v for c in curves.values() for v in c]
    low = max(0.0, (min(values) * 100 // 10) * 10 / 100)
    high = 1.0 if max(values) > 0.9 else (max(values) * 100 // 10 + 1) * 10 / 100

    def x(i):
        return left + (width - left - right) * (i / max(1, rounds - 1))

    def y(v):
        return top + (height - top - bottom) * (1 - (v - low) / (high - low))

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif" font-size="12">' % (width, height, width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="14">Fashion-MNIST MLP: test accuracy per round</text>' % left]
    step = 0.05 if high - low <= 0.3 else 0.1
    v = low
    while v <= high + 1e-9:
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, width - right, y(v), y(v)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%d%%</text>' % (left - 6, y(v) + 4, round(v * 100)))
        v += step
    for i in range(rounds):
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (x(i), height - bottom + 16, i + 1))
    out.append('<text x="%d" y="%d" text-anchor="middle">round</text>' % ((left + width - right) / 2, height - 12))
    styles = {
        "local": ("#1f77b4", "", "one machine (train-local)"),
        "verified": ("#d62728", "6 4", "broker + 3 nodes"),
        "unverified": ("#2ca02c", "2 3", "broker + 3 nodes, no re-execution"),
    }
    legend_y = height - bottom - 18 * len(curves) - 4  # lower right: accuracy curves rise to the upper right
    for name, curve in curves.items():
        color, dash, label = styles[name]
        points = " ".join("%.1f,%.1f" % (x(i), y(v)) for i, v in enumerate(curve))
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" %s points="%s"/>' % (
            color, 'stroke-dasharray="%s"' % dash if dash else "", points))
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2" %s/>' % (
            width - right - 250, width - right - 220, legend_y, legend_y, color,
            'stroke-dasharray="%s"' % dash if dash else ""))
        out.append('<text x="%d" y="%d">%s</text>' % (width - right - 214, legend_y + 4, label))
        legend_y += 18
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    results, template, output, plot = sys.argv[1:5]
    f, curves = figures(results)
    f["machine"] = "%s, %d cores, Linux %s" % (f.get("device.name", platform.processor()), os.cpu_count(),
                                               platform.release())
    text = render(open(template).read(), f)
    with open(output, "w") as md:
        md.write(text)
    if curves:
        with open(plot, "w") as image:
            image.write(svg(curves))
    scaled = scale_svg(f)
    if scaled:
        with open(os.path.join(os.path.dirname(plot), "scale-curve.svg"), "w") as image:
            image.write(scaled)
    swarmed = swarm_svg(f)
    if swarmed:
        with open(os.path.join(os.path.dirname(plot), "swarm-egress.svg"), "w") as image:
            image.write(swarmed)
    print("report: wrote %s%s" % (output, " and " + plot if curves else ""))


if __name__ == "__main__":
    main()
