#pragma once

#include "environment.h"
#include "sandbox/worker.h"

#include <core/blobstore.h>
#include <core/broker/trainingmath.h>

namespace tessera::compute {

// The broker's training arithmetic on LibTorch: initial weights, canonical hashes, aggregation and
// evaluation, exactly as tessera-node train-local does them.
class BrokerMath final : public core::broker::TrainingMath {
public:
    // Jobs that name no files (zoo models on built-in data).
    explicit BrokerMath(ComputeEnvironment environment);
    // The files jobs name (TorchScript models, tensor datasets) are blobs in the broker's store.
    BrokerMath(ComputeEnvironment environment, core::BlobStore& blobs);

    // Broker/Sandbox: the calls that run a job owner's code (initial weights, evaluation, replays)
    // run in confined one-shot tessera-compute workers (compute/sandbox/worker.h), each stopped
    // at options.timeLimitMs; what stays here reads weights and does the broker's own arithmetic
    // (hashes, aggregation, distances, portable traces). Without it, everything runs here.
    void setSandbox(const sandbox::WorkerOptions& options) { m_sandbox = options; }

    core::Result<Weights> initialWeights(const core::JobSpec& spec) override;
    core::Result<core::Digest> canonicalHash(const QByteArray& weights) override;
    core::Result<Aggregated> aggregate(const core::AggregationSpec& spec, QByteArray global, const QList<Update>& updates,
        const QByteArray& outerState) override;
    core::Result<Evaluation> evaluate(const core::JobSpec& spec, QByteArray weights) override;
    core::Result<Replay> replay(const core::ShardTask& task, std::int64_t from, const QByteArray& state,
        const core::Digest& expected, std::int64_t to, const QByteArray& roundWeights) override;
    core::Result<double> distance(const QByteArray& a, const QByteArray& b, const QByteArray& roundWeights) override;
    core::Result<core::verification::TraceComparison> compareTraces(const core::ShardTask& task, std::int64_t checkpoint,
        const core::Digest& agreed, const QByteArray& roundWeights, const core::Digest& firstClaim,
        const core::Digest& secondClaim, const QByteArray& firstTrace, const QByteArray& secondTrace) override;
    core::Result<core::verification::Ruling> refereeInstruction(const core::ShardTask& task, std::int64_t step,
        std::int64_t instruction, const QByteArray& operands, const QByteArray& firstTrace,
        const QByteArray& secondTrace) override;

private:
    ComputeEnvironment m_environment;
    std::optional<sandbox::WorkerOptions> m_sandbox;
};

} // namespace tessera::compute
