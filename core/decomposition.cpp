#include "decomposition.h"

namespace tessera::core {

namespace {

// An inference shard: its range of inputs, in batches (docs/DETERMINISM.md, "Inference").
ShardTask inferenceShard(const QString& jobId, const JobSpec& spec, std::int64_t shard, const Digest& startWeights)
{
    const auto& inference = spec.inference;
    ShardTask task;
    task.jobId = jobId;
    task.shard = shard;
    // A served job's replica (shard: its number) answers requests: one "input" each time.
    task.sampleBegin = inference.serves() ? 0 : shard * inference.samplesPerShard;
    task.sampleEnd = std::min(spec.inferenceInputs(), task.sampleBegin + inference.samplesPerShard);
    task.batchSize = inference.batchSize;
    task.localSteps = (task.sampleEnd - task.sampleBegin + task.batchSize - 1) / task.batchSize;
    task.seed = inference.seed;
    task.threads = inference.threads;
    task.checkpointInterval = 1;
    task.model = spec.model;
    task.dataset = spec.dataset;
    task.optimizer = spec.optimizer;
    task.startWeights = startWeights;
    task.compression = Compression::None;
    task.inference = inference;
    task.portable = inference.portable();
    return task;
}

} // namespace

ShardTask decomposeShard(
    const QString& jobId, const JobSpec& spec, std::int64_t round, std::int64_t shard, const Digest& startWeights)
{
    if (spec.isInference())
        return inferenceShard(jobId, spec, shard, startWeights);
    const std::int64_t samples = spec.trainSamples();
    const std::int64_t shards = spec.training.shardsPerRound;
    ShardTask task;
    task.jobId = jobId;
    task.round = round;
    task.shard = shard;
    task.sampleBegin = shard * samples / shards;
    task.sampleEnd = (shard + 1) * samples / shards;
    task.localSteps = spec.training.localSteps;
    task.batchSize = spec.training.batchSize;
    task.seed = spec.training.seed;
    task.threads = spec.training.threads;
    task.checkpointInterval = spec.training.checkpointInterval;
    task.model = spec.model;
    task.dataset = spec.dataset;
    task.optimizer = spec.optimizer;
    task.startWeights = startWeights;
    task.compression = spec.aggregation.compression;
    task.carriesOptimizer = spec.aggregation.optimizerState == AggregationSpec::OptimizerState::Averaged;
    task.portable = spec.training.determinism == TrainingSpec::Determinism::Portable;
    task.microBatches = spec.training.pipeline.microBatches;
    task.int8StageTensors = spec.training.pipeline.int8Tensors; // its stage tasks' (stageTaskOf)
    return task;
}

QList<ShardTask> decomposeRound(const QString& jobId, const JobSpec& spec, std::int64_t round, const Digest& startWeights)
{
    QList<ShardTask> tasks;
    for (std::int64_t shard = 0; shard < spec.training.shardsPerRound; ++shard)
        tasks.append(decomposeShard(jobId, spec, round, shard, startWeights));
    return tasks;
}

ShardTask stageTaskOf(const ShardTask& shard, std::int64_t stage, std::int64_t stages)
{
    ShardTask task = shard;
    task.stage = stage;
    task.stages = stages;
    return task;
}

} // namespace tessera::core
