#pragma once

#include "trainingmath.h"

#include <functional>

namespace tessera::core::broker {

// The broker's arithmetic on a worker thread. The broker calls it as it calls any TrainingMath,
// from its one thread; each call runs on a thread of its own while the calling thread keeps
// calling `whileWaiting` (about every 10 ms), so that the network loop goes on answering
// heartbeats and reads during an aggregation, an evaluation or a replay (net::BrokerServer::
// serveWhileBusy). Calls do not overlap: a call made from inside `whileWaiting` runs inline.
// The inner math must not touch what the broker's thread owns (BrokerMath reads blob files by
// path, BlobStore::storedFile).
class OffThreadMath final : public TrainingMath {
public:
    explicit OffThreadMath(TrainingMath& inner);

    void setWhileWaiting(std::function<void()> whileWaiting) { m_whileWaiting = std::move(whileWaiting); }

    Result<Weights> initialWeights(const JobSpec& spec) override;
    Result<Digest> canonicalHash(const QByteArray& weights) override;
    Result<Digest> canonicalHashOfFile(const QString& path) override;
    Result<Inspection> inspectResult(
        const QString& revealedPath, const QString& roundWeightsPath, const std::optional<StagePart>& part) override;
    Result<Digest> mergeStages(const QStringList& parts, const QString& out) override;
    Result<Aggregated> aggregate(const AggregationSpec& spec, const QString& globalFile, const QList<Update>& updates,
        const QByteArray& outerState, const QString& weightsOut) override;
    Result<Evaluation> evaluate(const JobSpec& spec, QByteArray weights) override;
    Result<Replay> replay(const ShardTask& task, std::int64_t from, const QByteArray& state, const Digest& expected,
        std::int64_t to, const QByteArray& roundWeights) override;
    Result<double> distance(const QByteArray& a, const QByteArray& b, const QByteArray& roundWeights) override;
    Result<verification::TraceComparison> compareTraces(const ShardTask& task, std::int64_t checkpoint, const Digest& agreed,
        const QByteArray& roundWeights, const Digest& firstClaim, const Digest& secondClaim, const QByteArray& firstTrace,
        const QByteArray& secondTrace) override;
    Result<verification::Ruling> refereeInstruction(const ShardTask& task, std::int64_t step, std::int64_t instruction,
        const QByteArray& operands, const QByteArray& firstTrace, const QByteArray& secondTrace) override;
    Result<std::int64_t> traceBytesBound(const ShardTask& task, std::int64_t checkpoint) override;

private:
    template<typename F> auto offThread(F&& work) -> decltype(work());

    TrainingMath& m_inner;
    std::function<void()> m_whileWaiting;
    bool m_busy = false;
};

} // namespace tessera::core::broker
