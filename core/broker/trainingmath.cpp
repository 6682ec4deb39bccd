#include "trainingmath.h"

namespace tessera::core::broker {

namespace {

Error cannotNarrow()
{
    return { QStringLiteral("verification"),
        QStringLiteral("this broker's arithmetic cannot narrow a dispute to one instruction") };
}

} // namespace

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
