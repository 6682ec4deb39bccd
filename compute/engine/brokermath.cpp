#include "brokermath.h"

#include "shardrun.h"
#include "weights.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <exception>
#include <new>

namespace tessera::compute {

namespace {

// The broker's arithmetic runs on what strangers send: whatever LibTorch throws (a bad state, an
// allocation that fails) becomes an error for that request, never the end of the broker.
//
// Each call ends by handing the heap's free pages back to the system: the arithmetic of a large
// model frees hundreds of MB of tensors, which glibc would otherwise keep for this thread's arena
// and add to every later peak (docs/BROKER.md, "Memory").
template<typename F> auto shielded(const char* what, F&& f) -> decltype(f())
{
    struct Trim {
        ~Trim()
        {
#ifdef __GLIBC__
            malloc_trim(0);
#endif
        }
    } trim;
    try {
        return f();
    } catch (const std::bad_alloc&) {
        return core::Error { QString::fromLatin1(what), QStringLiteral("out of memory") };
    } catch (const std::exception& error) {
        return core::Error { QString::fromLatin1(what), QString::fromUtf8(error.what()).section(u'\n', 0, 0) };
    }
}

} // namespace

BrokerMath::BrokerMath(ComputeEnvironment environment)
    : m_environment(std::move(environment))
{ }

BrokerMath::BrokerMath(ComputeEnvironment environment, core::BlobStore& blobs)
    : m_environment(std::move(environment))
{
    // From the worker thread of core::broker::OffThreadMath too: storedFile touches nothing shared.
    m_environment.blobPath = [&blobs](const core::Digest& digest) { return blobs.storedFile(digest); };
}

namespace {

// A worker's time limit on the owner's code that runs for no shard, said as what it is.
core::Error jobCodeError(core::Error error, const char* what)
{
    if (error.message.startsWith(QLatin1String("time limit")))
        error.message = QStringLiteral("time limit: the job's code ran past Broker/JobCodeSeconds building %1 (%2)")
                            .arg(QLatin1String(what), error.message);
    return error;
}

} // namespace

core::Result<BrokerMath::Weights> BrokerMath::initialWeights(const core::JobSpec& spec)
{
    return shielded("weights", [&]() -> core::Result<Weights> {
        core::Result<compute::Weights> weights = core::Error {};
        if (const auto worker = jobCodeSandboxFor(spec.model)) {
            auto bytes = sandbox::initialWeightsInWorker(spec, m_environment, *worker);
            if (!bytes)
                return jobCodeError(bytes.error(), "its initial weights");
            auto hash = canonicalHashOf(*bytes);
            if (!hash)
                return hash.error();
            weights = compute::Weights { std::move(*bytes), *hash };
        } else {
            weights = compute::initialWeights(spec, m_environment);
        }
        if (!weights)
            return weights.error();
        auto parameters = elementCount(weights->bytes);
        if (!parameters)
            return parameters.error();
        return Weights { weights->bytes, weights->canonicalHash, *parameters, core::Digest::ofBytes(weights->bytes) };
    });
}

core::Result<core::Digest> BrokerMath::canonicalHash(const QByteArray& weights)
{
    return shielded("weights", [&]() -> core::Result<core::Digest> { return canonicalHashOf(weights); });
}

core::Result<BrokerMath::Inspection> BrokerMath::inspectResult(
    const QString& revealedPath, const QString& roundWeightsPath, const std::optional<StagePart>& part)
{
    return shielded("weights", [&]() -> core::Result<Inspection> {
        // From the files: neither file's bytes are held beside its tensors.
        auto form = inspectRevealed(revealedPath, roundWeightsPath,
            part ? std::optional<RevealedStage>(RevealedStage { part->stage, part->stages, part->layers }) : std::nullopt);
        if (!form)
            return form.error();
        return Inspection { form->canonicalHash, form->unfit, form->updateNorm, form->compression };
    });
}

core::Result<core::Digest> BrokerMath::mergeStages(const QStringList& parts, const QString& out)
{
    return shielded("aggregation", [&] { return mergeStageFiles(parts, out); });
}

core::Result<BrokerMath::Aggregated> BrokerMath::aggregate(const core::AggregationSpec& spec, const QString& globalFile,
    const QList<Update>& updates, const QByteArray& outerState, const QString& weightsOut)
{
    return shielded("aggregation", [&]() -> core::Result<Aggregated> {
        QList<ShardUpdate> shardUpdates;
        for (const auto& update : updates)
            shardUpdates.append({ update.shard, update.samples, update.weights, update.weightsFile });
        auto output = compute::aggregateFromFile(spec, globalFile, shardUpdates, outerState, weightsOut);
        if (!output)
            return output.error();
        // Hashed here, off the broker's network loop, for the blob store.
        const auto sha256 = core::Digest::ofFile(weightsOut);
        if (!sha256)
            return core::Error { QStringLiteral("blob"), sha256.error().message };
        const auto changeSha256 = output->change.isEmpty() ? core::Digest {} : core::Digest::ofBytes(output->change);
        return Aggregated { { {}, output->weights.canonicalHash, 0, *sha256 }, output->outerState, output->change, changeSha256 };
    });
}

core::Result<BrokerMath::Evaluation> BrokerMath::evaluate(const core::JobSpec& spec, QByteArray weights)
{
    return shielded("evaluation", [&]() -> core::Result<Evaluation> {
        const auto worker = jobCodeSandboxFor(spec.model);
        auto evaluation = worker ? sandbox::evaluateInWorker(spec, weights, int(spec.training.threads), m_environment, *worker)
                                 : compute::evaluate(spec, std::move(weights), m_environment, int(spec.training.threads));
        if (!evaluation)
            return worker ? jobCodeError(evaluation.error(), "its evaluation") : evaluation.error();
        return Evaluation { evaluation->loss, evaluation->accuracy };
    });
}

core::Result<BrokerMath::Replay> BrokerMath::replay(const core::ShardTask& task, std::int64_t from, const QByteArray& state,
    const core::Digest& expected, std::int64_t to, const QByteArray& roundWeights)
{
    return shielded("state", [&]() -> core::Result<Replay> {
        const auto* worker = sandboxFor(task.model);
        auto replayed = worker ? sandbox::replayInWorker(task, from, state, expected, to, roundWeights, m_environment, *worker)
                               : replayShard(task, from, state, expected, to, roundWeights, m_environment);
        if (!replayed)
            return replayed.error();
        return Replay { replayed->checkpoints, replayed->weightsHash, replayed->weights, replayed->runtimeProfile,
            replayed->tensorsRoot };
    });
}

core::Result<double> BrokerMath::distance(const QByteArray& a, const QByteArray& b, const QByteArray& roundWeights)
{
    return shielded("weights", [&]() -> core::Result<double> { return relativeDistance(a, b, roundWeights); });
}

core::Result<core::verification::TraceComparison> BrokerMath::compareTraces(const core::ShardTask& task, std::int64_t checkpoint,
    const core::Digest& agreed, const QByteArray& roundWeights, const core::Digest& firstClaim, const core::Digest& secondClaim,
    const QByteArray& firstTrace, const QByteArray& secondTrace)
{
    return shielded("trace", [&] {
        return compute::compareTraces(
            task, checkpoint, agreed, roundWeights, firstClaim, secondClaim, firstTrace, secondTrace, m_environment);
    });
}

core::Result<core::verification::Ruling> BrokerMath::refereeInstruction(const core::ShardTask& task, std::int64_t step,
    std::int64_t instruction, const QByteArray& operands, const QByteArray& firstTrace, const QByteArray& secondTrace)
{
    return shielded("operands",
        [&] { return compute::refereeInstruction(task, step, instruction, operands, firstTrace, secondTrace, m_environment); });
}

core::Result<std::int64_t> BrokerMath::traceBytesBound(const core::ShardTask& task, std::int64_t checkpoint)
{
    return shielded("trace", [&] { return compute::traceBytesBound(task, checkpoint, m_environment); });
}

} // namespace tessera::compute
