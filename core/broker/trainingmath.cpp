#include "trainingmath.h"

namespace tessera::core::broker {

namespace {

Error cannotNarrow()
{
    return { QStringLiteral("verification"),
        QStringLiteral("this broker's arithmetic cannot narrow a dispute to one instruction") };
}

} // namespace

std::future<Result<TrainingMath::Evaluation>> TrainingMath::evaluateInBackground(const JobSpec& spec, QByteArray weights)
{
    std::promise<Result<Evaluation>> evaluation;
    evaluation.set_value(evaluate(spec, std::move(weights)));
    return evaluation.get_future();
}

Result<verification::TraceComparison> TrainingMath::compareTraces(const ShardTask&, std::int64_t, const Digest&,
    const QByteArray&, const Digest&, const Digest&, const QByteArray&, const QByteArray&)
{
    return cannotNarrow();
}

Result<verification::Ruling> TrainingMath::refereeInstruction(
    const ShardTask&, std::int64_t, std::int64_t, const QByteArray&, const QByteArray&, const QByteArray&)
{
    return cannotNarrow();
}

Result<std::int64_t> TrainingMath::traceBytesBound(const ShardTask&, std::int64_t)
{
    return std::int64_t(-1);
}

} // namespace tessera::core::broker
