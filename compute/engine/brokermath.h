#pragma once

#include <compute/common/environment.h>
#include <compute/supervisor/sandbox/worker.h>

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

    // Broker/Sandbox: the calls that run a job owner's code (initial weights, evaluation, replays
    // of a TorchScript model: the only code an owner sends) run in confined one-shot
    // tessera-compute workers (compute/supervisor/sandbox/worker.h), each stopped at options.timeLimitMs; a
    // zoo model is Tessera's own code and stays here (a worker's start, about a second, each
    // round, is what a job of many small rounds would pay), as does the broker's own arithmetic
    // (hashes, aggregation, distances, portable traces). everyModel: zoo models too (tests).
    // Without it, everything runs here.
    void setSandbox(const sandbox::WorkerOptions& options, bool everyModel = false)
    {
        m_sandbox = options;
        m_sandboxEveryModel = everyModel;
    }
    // Broker/JobCodeSeconds: the owner's code that runs for no shard (a model's loading for its
    // initial weights, a round's evaluation) is stopped after this long, not at options.timeLimitMs
    // (a replay's, which is a shard's). 0: options.timeLimitMs. Initial weights may be built from any
    // thread beside the arithmetic's when they run in a worker (core::broker::Broker::setJobCodeMath).
    void setJobCodeLimit(std::int64_t ms) { m_jobCodeMs = ms; }

    core::Result<Weights> initialWeights(const core::JobSpec& spec) override;
    core::Result<core::Digest> canonicalHash(const QByteArray& weights) override;
    core::Result<Inspection> inspectResult(
        const QString& revealedPath, const QString& roundWeightsPath, const std::optional<StagePart>& part) override;
    core::Result<core::Digest> mergeStages(const QStringList& parts, const QString& out) override;
    core::Result<Aggregated> aggregate(const core::AggregationSpec& spec, const QString& globalFile, const QList<Update>& updates,
        const QByteArray& outerState, const QString& weightsOut) override;
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
    core::Result<std::int64_t> traceBytesBound(const core::ShardTask& task, std::int64_t checkpoint) override;

private:
    ComputeEnvironment m_environment;
    std::optional<sandbox::WorkerOptions> m_sandbox;
    bool m_sandboxEveryModel = false;
    std::int64_t m_jobCodeMs = 0;
    // The worker options for a run of this model's code that is no shard's (initial weights, evaluation).
    std::optional<sandbox::WorkerOptions> jobCodeSandboxFor(const core::ModelSpec& model) const
    {
        const auto* worker = sandboxFor(model);
        if (!worker)
            return std::nullopt;
        auto options = *worker;
        if (m_jobCodeMs > 0 && (options.timeLimitMs <= 0 || m_jobCodeMs < options.timeLimitMs))
            options.timeLimitMs = m_jobCodeMs;
        return options;
    }
    // The worker options for a run of this model's code, if it runs in a worker.
    const sandbox::WorkerOptions* sandboxFor(const core::ModelSpec& model) const
    {
        return m_sandbox && (m_sandboxEveryModel || model.source == core::ModelSpec::Source::TorchScript) ? &*m_sandbox : nullptr;
    }
};

} // namespace tessera::compute
