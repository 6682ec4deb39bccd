#include "brokermath.h"

#include "shardrun.h"
#include "weights.h"

namespace tessera::compute {

BrokerMath::BrokerMath(ComputeEnvironment environment)
    : m_environment(std::move(environment))
{ }

void BrokerMath::useBlobs(core::BlobStore& blobs)
{
    m_environment.blobPath = [&blobs](const core::Digest& digest) { return blobs.path(digest); };
}

core::Result<BrokerMath::Weights> BrokerMath::initialWeights(const core::JobSpec& spec)
{
    auto weights = compute::initialWeights(spec, m_environment);
    if (!weights)
        return weights.error();
    auto parameters = elementCount(weights->bytes);
    if (!parameters)
        return parameters.error();
    return Weights { weights->bytes, weights->canonicalHash, *parameters };
}

core::Result<core::Digest> BrokerMath::canonicalHash(const QByteArray& weights)
{
    return canonicalHashOf(weights);
}

core::Result<BrokerMath::Aggregated> BrokerMath::aggregate(
    const core::AggregationSpec& spec, const QByteArray& global, const QList<Update>& updates, const QByteArray& outerState)
{
    QList<ShardUpdate> shardUpdates;
    for (const auto& update : updates)
        shardUpdates.append({ update.shard, update.samples, update.weights });
    auto output = compute::aggregate(spec, global, shardUpdates, outerState);
    if (!output)
        return output.error();
    return Aggregated { { output->weights.bytes, output->weights.canonicalHash }, output->outerState };
}

core::Result<BrokerMath::Evaluation> BrokerMath::evaluate(const core::JobSpec& spec, const QByteArray& weights)
{
    auto evaluation = compute::evaluate(spec, weights, m_environment, int(spec.training.threads));
    if (!evaluation)
        return evaluation.error();
    return Evaluation { evaluation->loss, evaluation->accuracy };
}

core::Result<BrokerMath::Replay> BrokerMath::replay(
    const core::ShardTask& task, std::int64_t from, const QByteArray& state, const core::Digest& expected, std::int64_t to)
{
    auto replayed = replayShard(task, from, state, expected, to, m_environment);
    if (!replayed)
        return replayed.error();
    return Replay { replayed->checkpoints, replayed->weightsHash, replayed->weights, replayed->runtimeProfile };
}

core::Result<double> BrokerMath::distance(const QByteArray& a, const QByteArray& b)
{
    return relativeDistance(a, b);
}

} // namespace tessera::compute
