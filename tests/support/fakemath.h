#pragma once

#include <functional>

// Stand-in arithmetic for the broker's state machine (a fake is fine in a unit test: the real
// arithmetic is tested in tests/compute and end to end in tests/e2e).

#include <core/broker/trainingmath.h>

#include <QFile>
#include <QList>

namespace tessera::tests {

using namespace tessera::core;
using namespace tessera::core::broker;

// Weights are plain bytes whose "canonical hash" is their SHA-256; aggregation concatenates the
// shards' weights in the order it is given them, so the test can see that order.
class FakeMath final : public TrainingMath {
public:
    QList<QList<std::int64_t>> aggregationOrders;

    int initialBuilds = 0;
    Result<Weights> initialWeights(const JobSpec&) override
    {
        ++initialBuilds;
        return Weights { "w0", Digest::ofBytes("w0"), 0, {} };
    }
    // A file the broker cannot read ("unreadable..."), and the same weights in another container
    // ("container:" + weights), which hashes as the weights do.
    Result<Digest> canonicalHash(const QByteArray& weights) override
    {
        if (weights.startsWith("unreadable"))
            return Error { QStringLiteral("weights"), QStringLiteral("not a dict of tensors") };
        return Digest::ofBytes(weights.startsWith("container:") ? weights.mid(10) : weights);
    }
    // Weights that start with "whole:" are whole weights in the form the broker can tell; other
    // bytes are of no form it can tell.
    Result<Inspection> inspectResult(
        const QString& revealedPath, const QString& roundWeightsPath, const std::optional<StagePart>& part) override
    {
        auto inspected = TrainingMath::inspectResult(revealedPath, roundWeightsPath, part);
        if (!inspected)
            return inspected;
        QFile file(revealedPath);
        if (file.open(QIODevice::ReadOnly) && file.read(6) == "whole:")
            inspected->form = Compression::None;
        return inspected;
    }
    // A pipeline shard's stages merged: their bytes joined by "+", in stage order.
    Result<Digest> mergeStages(const QStringList& parts, const QString& out) override
    {
        QByteArray merged;
        for (const auto& part : parts) {
            QFile file(part);
            if (!file.open(QIODevice::ReadOnly))
                return Error { QStringLiteral("blob"), QStringLiteral("cannot read %1").arg(part) };
            merged += (merged.isEmpty() ? "" : "+") + file.readAll();
        }
        QFile file(out);
        if (!file.open(QIODevice::WriteOnly) || file.write(merged) != merged.size())
            return Error { QStringLiteral("blob"), QStringLiteral("cannot write %1").arg(out) };
        return Digest::ofBytes(merged);
    }
    // With int8 compression the round's change is "change:" + the new weights.
    Result<Aggregated> aggregate(const AggregationSpec& spec, const QString& globalFile, const QList<Update>& updates,
        const QByteArray&, const QString& weightsOut) override
    {
        QFile global(globalFile);
        QByteArray next = (global.open(QIODevice::ReadOnly) ? global.readAll() : QByteArray("?")) + "|";
        QList<std::int64_t> order;
        for (const auto& update : updates) {
            QFile file(update.weightsFile);
            next += update.weights.isEmpty() && file.open(QIODevice::ReadOnly) ? file.readAll() : update.weights;
            order.append(update.shard);
        }
        aggregationOrders.append(order);
        const QByteArray change = spec.compression == Compression::Int8 ? "change:" + next : QByteArray();
        QFile out(weightsOut);
        if (!out.open(QIODevice::WriteOnly) || out.write(next) != next.size())
            return Error { QStringLiteral("blob"), QStringLiteral("cannot write %1").arg(weightsOut) };
        return Aggregated { { {}, Digest::ofBytes(next), 0, Digest::ofBytes(next) }, {}, change, {} };
    }
    int evaluations = 0;
    Result<Evaluation> evaluate(const JobSpec&, QByteArray) override
    {
        ++evaluations;
        return Evaluation { 0.5, 0.9 };
    }

    // The honest arithmetic of a shard, as stand-in bytes: the state at checkpoint k is
    // "s:<round>:<shard>:<k>", the final weights "w:<round>:<shard>".
    static QByteArray state(const ShardTask& task, std::int64_t k)
    {
        return QStringLiteral("s:%1:%2:%3").arg(task.round).arg(task.shard).arg(k).toUtf8();
    }
    static QByteArray weights(const ShardTask& task)
    {
        return QStringLiteral("w:%1:%2").arg(task.round).arg(task.shard).toUtf8();
    }
    int replays = 0;
    std::function<Digest(const ShardTask&)> stageRoot; // what a stage's replay sent and received
    bool replayFails = false; // the job's own fault: every run of it fails
    QByteArray refereeLine; // what the referee computes for an inference task ("": as for training)
    QString refereeProfile = QStringLiteral("p");
    Result<Replay> replay(const ShardTask& task, std::int64_t from, const QByteArray& start, const Digest& expected,
        std::int64_t to, const QByteArray&) override
    {
        ++replays;
        if (replayFails)
            return Error { QStringLiteral("training"), QStringLiteral("loss became NaN at step 3") };
        if (task.inference && !refereeLine.isEmpty()) { // a served answer's referee (tests/core/tst_serving)
            Replay answer;
            answer.weights = refereeLine + '\n';
            answer.runtimeProfile = refereeProfile;
            return answer;
        }
        if (Digest::ofBytes(start) != expected || (from > 0 && start != state(task, from)))
            return Error { QStringLiteral("state"), QStringLiteral("the state does not hash to the agreed checkpoint") };
        Replay replay;
        for (auto k = from + 1; k <= to; ++k)
            replay.checkpoints.append(Digest::ofBytes(state(task, k)));
        replay.weights = weights(task);
        replay.weightsHash = Digest::ofBytes(replay.weights);
        replay.runtimeProfile = QStringLiteral("p");
        if (task.isStage() && stageRoot)
            replay.tensorsRoot = stageRoot(task);
        return replay;
    }
    Result<double> distance(const QByteArray& a, const QByteArray& b, const QByteArray&) override { return a == b ? 0.0 : 1.0; }

    // A portable job's dispute. An honest node's trace of interval j is "t:<round>:<shard>:<j>";
    // other bytes that start with "t:" are a liar's usable trace (ending in ":batch": one that
    // differs in the step's batch, which the referee reads itself); anything else is no trace. Two
    // usable traces first differ at step (j-1)c + 2, instruction 5, whose agreed operands are
    // "o:<step>:<instruction>".
    // No honest trace here is longer than this; a longer one is not read.
    Result<std::int64_t> traceBytesBound(const ShardTask&, std::int64_t) override { return std::int64_t(4096); }
    static QByteArray trace(const ShardTask& task, std::int64_t j)
    {
        return QStringLiteral("t:%1:%2:%3").arg(task.round).arg(task.shard).arg(j).toUtf8();
    }
    static QByteArray operands(std::int64_t step, std::int64_t instruction)
    {
        return QStringLiteral("o:%1:%2").arg(step).arg(instruction).toUtf8();
    }
    int comparisons = 0;
    int instructionsRun = 0;
    Result<verification::TraceComparison> compareTraces(const ShardTask& task, std::int64_t checkpoint, const Digest&,
        const QByteArray&, const Digest&, const Digest&, const QByteArray& first, const QByteArray& second) override
    {
        ++comparisons;
        verification::TraceComparison comparison;
        auto fault = [](const QByteArray& trace) {
            return trace.isEmpty()       ? QStringLiteral("no trace came")
                : trace.startsWith("t:") ? QString()
                                         : QStringLiteral("not a trace");
        };
        comparison.firstFault = fault(first);
        comparison.secondFault = fault(second);
        if (!comparison.firstFault.isEmpty() || !comparison.secondFault.isEmpty())
            return comparison;
        if (first == second)
            return Error { QStringLiteral("trace"), QStringLiteral("the traces agree on every step") };
        const auto honestTrace = trace(task, checkpoint);
        comparison.step = (checkpoint - 1) * task.checkpointInterval + 2;
        if (first.endsWith(":batch") || second.endsWith(":batch")) {
            comparison.instruction = 0;
            comparison.instructionName = QStringLiteral("Batch (the step's samples and targets)");
            comparison.ruling = first == honestTrace ? verification::Ruling::FirstHonest
                : second == honestTrace              ? verification::Ruling::SecondHonest
                                                     : verification::Ruling::BothWrong;
            return comparison;
        }
        comparison.instruction = 5;
        comparison.instructionName = QStringLiteral("Sgd (fc0.weight: SGD update)");
        return comparison;
    }
    Result<verification::Ruling> refereeInstruction(const ShardTask& task, std::int64_t step, std::int64_t instruction,
        const QByteArray& given, const QByteArray& first, const QByteArray& second) override
    {
        if (given != operands(step, instruction))
            return Error { QStringLiteral("operands"), QStringLiteral("operand 0 is not the value both traces agree on") };
        ++instructionsRun;
        const auto honestTrace = trace(task, (step - 1) / task.checkpointInterval + 1);
        return first == honestTrace ? verification::Ruling::FirstHonest
            : second == honestTrace ? verification::Ruling::SecondHonest
                                    : verification::Ruling::BothWrong;
    }
};

} // namespace tessera::tests
