#include "offthreadmath.h"

#include <chrono>
#include <future>

namespace tessera::core::broker {

OffThreadMath::OffThreadMath(TrainingMath& inner)
    : m_inner(inner)
{ }

template<typename F> auto OffThreadMath::offThread(F&& work) -> decltype(work())
{
    if (m_busy) {
        if (m_background.valid())
            m_background.get(); // from inside whileWaiting: waited for here, without serving
        return work(); // called from inside whileWaiting: no second worker
    }
    m_busy = true;
    awaitBackground();
    // The arguments live in the caller's frame until the worker is done: it is always waited for.
    auto result = std::async(std::launch::async, std::forward<F>(work));
    while (result.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
        if (m_whileWaiting)
            m_whileWaiting();
    }
    m_busy = false;
    return result.get();
}

void OffThreadMath::awaitBackground()
{
    if (!m_background.valid())
        return;
    while (m_background.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
        if (m_whileWaiting)
            m_whileWaiting();
    }
    m_background.get();
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

Result<TrainingMath::Inspection> OffThreadMath::inspectResult(const QString& revealedPath, const QString& roundWeightsPath)
{
    return offThread([&] { return m_inner.inspectResult(revealedPath, roundWeightsPath); });
}

Result<TrainingMath::Aggregated> OffThreadMath::aggregate(
    const AggregationSpec& spec, QByteArray global, const QList<Update>& updates, const QByteArray& outerState)
{
    return offThread([&] { return m_inner.aggregate(spec, std::move(global), updates, outerState); });
}

Result<TrainingMath::Evaluation> OffThreadMath::evaluate(const JobSpec& spec, QByteArray weights)
{
    return offThread([&] { return m_inner.evaluate(spec, std::move(weights)); });
}

std::future<Result<TrainingMath::Evaluation>> OffThreadMath::evaluateInBackground(const JobSpec& spec, QByteArray weights)
{
    if (m_busy)
        return TrainingMath::evaluateInBackground(spec, std::move(weights)); // inside whileWaiting: inline
    m_busy = true;
    awaitBackground(); // one at a time
    m_busy = false;
    auto evaluation = std::make_shared<std::promise<Result<Evaluation>>>();
    auto answer = evaluation->get_future();
    m_background = std::async(std::launch::async, [this, evaluation, spec, weights = std::move(weights)]() mutable {
        evaluation->set_value(m_inner.evaluate(spec, std::move(weights)));
    });
    return answer;
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
