#include "offthreadmath.h"

#include <chrono>
#include <future>

namespace tessera::core::broker {

OffThreadMath::OffThreadMath(TrainingMath& inner)
    : m_inner(inner)
{ }

template<typename F> auto OffThreadMath::offThread(F&& work) -> decltype(work())
{
    if (m_busy)
        return work(); // called from inside whileWaiting: no second worker
    m_busy = true;
    // The arguments live in the caller's frame until the worker is done: it is always waited for.
    auto result = std::async(std::launch::async, std::forward<F>(work));
    while (result.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
        if (m_whileWaiting)
            m_whileWaiting();
    }
    m_busy = false;
    return result.get();
}

Result<TrainingMath::Weights> OffThreadMath::initialWeights(const JobSpec& spec)
{
    return offThread([&] { return m_inner.initialWeights(spec); });
}

Result<Digest> OffThreadMath::canonicalHash(const QByteArray& weights)
{
    return offThread([&] { return m_inner.canonicalHash(weights); });
}

Result<Digest> OffThreadMath::canonicalHashOfFile(const QString& path)
{
    return offThread([&] { return m_inner.canonicalHashOfFile(path); });
}

Result<TrainingMath::Inspection> OffThreadMath::inspectResult(
    const QString& revealedPath, const QString& roundWeightsPath, const std::optional<StagePart>& part)
{
    return offThread([&] { return m_inner.inspectResult(revealedPath, roundWeightsPath, part); });
}

Result<Digest> OffThreadMath::mergeStages(const QStringList& parts, const QString& out)
{
    return offThread([&] { return m_inner.mergeStages(parts, out); });
}

Result<TrainingMath::Aggregated> OffThreadMath::aggregate(const AggregationSpec& spec, const QString& globalFile,
    const QList<Update>& updates, const QByteArray& outerState, const QString& weightsOut)
{
    return offThread([&] { return m_inner.aggregate(spec, globalFile, updates, outerState, weightsOut); });
}

Result<TrainingMath::Evaluation> OffThreadMath::evaluate(const JobSpec& spec, QByteArray weights)
{
    return offThread([&] { return m_inner.evaluate(spec, std::move(weights)); });
}

Result<TrainingMath::Replay> OffThreadMath::replay(const ShardTask& task, std::int64_t from, const QByteArray& state,
    const Digest& expected, std::int64_t to, const QByteArray& roundWeights)
{
    return offThread([&] { return m_inner.replay(task, from, state, expected, to, roundWeights); });
}

Result<double> OffThreadMath::distance(const QByteArray& a, const QByteArray& b, const QByteArray& roundWeights)
{
    return offThread([&] { return m_inner.distance(a, b, roundWeights); });
}

Result<verification::TraceComparison> OffThreadMath::compareTraces(const ShardTask& task, std::int64_t checkpoint,
    const Digest& agreed, const QByteArray& roundWeights, const Digest& firstClaim, const Digest& secondClaim,
    const QByteArray& firstTrace, const QByteArray& secondTrace)
{
    return offThread([&] {
        return m_inner.compareTraces(task, checkpoint, agreed, roundWeights, firstClaim, secondClaim, firstTrace, secondTrace);
    });
}

Result<verification::Ruling> OffThreadMath::refereeInstruction(const ShardTask& task, std::int64_t step, std::int64_t instruction,
    const QByteArray& operands, const QByteArray& firstTrace, const QByteArray& secondTrace)
{
    return offThread([&] { return m_inner.refereeInstruction(task, step, instruction, operands, firstTrace, secondTrace); });
}

Result<std::int64_t> OffThreadMath::traceBytesBound(const ShardTask& task, std::int64_t checkpoint)
{
    return offThread([&] { return m_inner.traceBytesBound(task, checkpoint); });
}

} // namespace tessera::core::broker
