#pragma once

#include "error.h"
#include "hash.h"
#include "jobspec.h"

#include <QJsonObject>
#include <QList>
#include <QMetaType>
#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::core {

// One unit of work: H local optimizer steps of a job's model, starting from the round's global
// weights, over a slice of the round's seeded permutation of the training set. Everything that
// determines the result bit for bit is in here (model, data, optimizer, seed, thread count).
struct ShardTask {
    QString jobId;
    std::int64_t round = 0;
    std::int64_t shard = 0;
    std::int64_t sampleBegin = 0; // [sampleBegin, sampleEnd) of the round's permutation
    std::int64_t sampleEnd = 0;
    std::int64_t localSteps = 1;
    std::int64_t batchSize = 1;
    std::int64_t seed = 0;
    std::int64_t threads = 1;
    std::int64_t checkpointInterval = 1;
    ModelSpec model;
    DatasetSpec dataset;
    OptimizerSpec optimizer;
    Digest startWeights; // W_r; null for round 0 of a zoo model (seeded init)
    Compression compression = Compression::None; // what the node reveals: its weights, or an int8 update
    // The round's weights hold the optimizer's state too ("optimizer/..."), the shard starts from it
    // and reveals its own final state with its weights (aggregation.optimizerState averaged).
    bool carriesOptimizer = false;
    // Trained with the portable kernels (training.determinism portable): the result's runtime
    // profile is PortableProfile, which every node can re-execute.
    bool portable = false;
    // Each step's batch as this many equal micro-batches whose gradients are averaged
    // (training.pipeline.microBatches; docs/DETERMINISM.md, "Micro-batches"); portable only.
    std::int64_t microBatches = 1;
    // A stage task (docs/PROTOCOL.md, "Stage tasks"): stage `stage` of the `stages` that train this
    // shard together, each its own blocks of the zoo gpt (training.pipeline.stages; 1: the whole
    // model, an ordinary shard). It trades tensors with stages stage - 1 and stage + 1 every step and
    // reveals its own part of the training state.
    std::int64_t stage = 0;
    std::int64_t stages = 1;
    bool isStage() const { return stages > 1; }
    // A stage task re-executed (a check, docs/VERIFICATION.md, "Pipeline stages"): the blob of what
    // the stage received (core::StageInputs), which it reads instead of trading with live stages.
    // Null: a stage that trains with its partners.
    Digest stageInputs;
    bool isLiveStage() const { return isStage() && stageInputs.isNull(); }
    // What the stages trade is int8 (training.pipeline.tensors; docs/DETERMINISM.md, "Pipeline
    // stages"): JSON "stageTensors": "int8" in a stage task, absent for float32. A shard task of
    // such a job carries it for its stage tasks (core::stageTaskOf); a whole-model task ignores it.
    bool int8StageTensors = false;
    // A chunked dataset: the chunks of its manifest that the task's steps read (core/datasetchunks.h),
    // which is what a node fetches of the corpus.
    QList<Digest> dataChunks;
    // An inference task (docs/PROTOCOL.md, "ShardTask"): [sampleBegin, sampleEnd) are inputs,
    // localSteps the batches (generate: the prompts), and the chain one hash per input.
    std::optional<InferenceSpec> inference;

    bool isInference() const { return inference.has_value(); }
    static Result<ShardTask> fromJson(const QJsonObject& json);
    QJsonObject toJson() const;
    Status validate() const;
    Status validateInference() const;
    // Checkpoints at step 0, c, 2c, ..., H: the length of a valid hash chain.
    std::int64_t checkpointCount() const;
    // The one interior checkpoint whose training state a node keeps for disputes (the middle one,
    // so that any other is re-created by re-running at most half the shard), 0 when there is no
    // interior checkpoint. Memory and disk per result: one state, whatever the checkpoint count.
    std::int64_t keptStateCheckpoint() const;
    // The blobs the task reads besides its start weights: a TorchScript model, tensor files, a
    // chunked dataset's manifest, test file and the chunks the task reads.
    QList<Digest> inputBlobs() const;

    bool operator==(const ShardTask&) const = default;
};

} // namespace tessera::core

Q_DECLARE_METATYPE(tessera::core::ShardTask)
