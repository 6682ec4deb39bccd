#include "localjob.h"

#include "detail/datasets.h"
#include "pipelinerun.h"
#include "shardrun.h"

#include <core/decomposition.h>

#include <QElapsedTimer>

namespace tessera::compute {

core::Result<LocalJobOutput> runJobLocally(
    const core::JobSpec& spec, const ComputeEnvironment& environment, const LocalJobObserver& observer)
{
    auto weights = initialWeights(spec, environment);
    if (!weights)
        return weights.error();
    LocalJobOutput output;
    Weights global = *weights;
    QByteArray outerState;
    const QString jobId = QStringLiteral("local");
    std::optional<core::DatasetManifest> manifest; // a chunked dataset's: which chunks each shard reads
    if (spec.dataset.source == core::DatasetSpec::Source::Chunks) {
        auto read = detail::readManifest(spec.dataset, environment);
        if (!read)
            return read.error();
        manifest = std::move(*read);
    }

    for (std::int64_t round = 0; round < spec.training.rounds; ++round) {
        QElapsedTimer timer;
        timer.start();
        QList<ShardUpdate> updates;
        double lossSum = 0.0;
        std::int64_t lossCount = 0;
        for (auto task : core::decomposeRound(jobId, spec, round, global.canonicalHash)) {
            if (manifest)
                task.dataChunks = core::chunksOfTask(task, *manifest);
            if (spec.training.pipeline.stages > 1) { // each stage on a thread, as stage tasks on nodes
                auto shard = runPipelineShard(task, spec.training.pipeline.stages, global.bytes, environment);
                if (shard.result.outcome != core::ShardResult::Outcome::Completed)
                    return core::Error { {},
                        QStringLiteral("round %1, shard %2: %3").arg(round).arg(task.shard).arg(shard.result.failure) };
                for (double loss : shard.result.losses)
                    lossSum += loss;
                lossCount += shard.result.losses.size();
                if (observer.stepFinished)
                    observer.stepFinished(task, task.localSteps);
                if (observer.shardFinished)
                    observer.shardFinished(shard.result);
                updates.append({ task.shard, task.sampleEnd - task.sampleBegin, shard.weights, {} });
                continue;
            }
            auto run = ShardRun::start(task, global.bytes, environment);
            if (!run)
                return core::Error { run.error().field,
                    QStringLiteral("round %1, shard %2: %3").arg(round).arg(task.shard).arg(run.error().message) };
            (*run)->setKeepsCheckpointState(false); // no dispute asks about a local run
            while (!(*run)->finished()) {
                if (auto status = (*run)->step(); !status)
                    return core::Error { {},
                        QStringLiteral("round %1, shard %2: %3").arg(round).arg(task.shard).arg(status.error().message) };
                if (observer.stepFinished)
                    observer.stepFinished(task, (*run)->completedSteps());
            }
            auto shard = (*run)->finish();
            for (double loss : shard.result.losses)
                lossSum += loss;
            lossCount += shard.result.losses.size();
            if (observer.shardFinished)
                observer.shardFinished(shard.result);
            updates.append({ task.shard, task.sampleEnd - task.sampleBegin, shard.weights, {} });
        }
        auto aggregated = aggregate(spec.aggregationOfRound(round), global.bytes, updates, outerState);
        if (!aggregated)
            return aggregated.error();
        global = aggregated->weights;
        outerState = aggregated->outerState;

        auto evaluation = evaluate(spec, global.bytes, environment, int(spec.training.threads));
        if (!evaluation)
            return evaluation.error();
        RoundReport report { round, *evaluation, lossCount ? lossSum / double(lossCount) : 0.0, timer.elapsed(),
            global.canonicalHash };
        output.rounds.append(report);
        if (observer.roundFinished)
            observer.roundFinished(report);
    }
    output.finalWeights = global;
    return output;
}

} // namespace tessera::compute
