#pragma once

#include "jobspec.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

namespace tessera::core {

// What a shard holds in memory on a node beyond the runtime itself (LibTorch, Qt, the process),
// estimated before it is accepted and compared with Compute/MaxMemoryMiB (docs/NODE.md, "Memory").
// Both the node (from the round's weights it received) and the broker (from the job's parameter
// count, before it offers the shard) compute it with this function.
struct ShardMemory {
    std::int64_t dataset = 0; // the training and test data as held (Fashion-MNIST: uint8)
    std::int64_t model = 0; // weights, gradients, optimizer state, the round's weights, a kept state
    std::int64_t activations = 0; // one batch, forward and backward (zoo models; a guess otherwise)

    std::int64_t total() const { return dataset + model + activations; }
    std::int64_t totalMiB() const { return (total() + (1 << 20) - 1) >> 20; }
};

// The bytes of the built-in dataset as a node holds it (uint8 images and int64 labels), 0 for a
// name Tessera does not know.
std::int64_t builtinDatasetBytes(const QString& name);
// A job's data as held: the built-in dataset's bytes, or the sizes of its tensor files
// (fileSize: a file's bytes by its SHA-256, nothing when it is not at hand).
// A chunked dataset's chunks are not in it: what they take depends on their kind (the node adds them).
std::int64_t datasetBytes(const DatasetSpec& dataset, const std::function<std::optional<std::int64_t>(const Digest&)>& fileSize);

// modelBytes: the float32 weights (4 x parameters); datasetBytes: the data as held (tensor files:
// their sizes). The model counts 4 + 2 s times its bytes, with s the optimizer's state per
// parameter (0 for plain SGD, 1 with momentum, 2 for Adam): the weights, their gradients, the
// optimizer's state, the round's weights (start and upload) and the one training state kept for
// disputes (weights and optimizer state).
ShardMemory estimateShardMemory(const ModelSpec& model, const OptimizerSpec& optimizer, std::int64_t batchSize,
    std::int64_t modelBytes, std::int64_t datasetBytes);

// The zoo gpt's blocks of stage `stage` of `stages` (docs/DETERMINISM.md, "Pipeline stages"):
// [first, end), the earlier stages taking one block more when the blocks do not divide evenly
// (compute/portable/stages.h, stageBlocks, cuts the program the same way).
std::pair<std::int64_t, std::int64_t> stageBlocksOf(std::int64_t layers, std::int64_t stage, std::int64_t stages);

// What pipeline stage `stage` of a zoo gpt's shard holds (a stage task): the model term of its own
// parameters (its blocks; the token and position embeddings on the first stage, the last layer
// norm and the head on the last), but at least the whole model's weights, which the stage builds
// before it lets the others' go; with a carried optimizer state (carriesOptimizer) the whole
// shard's model term, since such a stage reads the round's weights whole. Its activations: its
// blocks' (and the last stage's logits) for the micro-batches it has in flight under 1F1B,
// min(S - s, M) of M. The data whole (each stage loads it).
ShardMemory estimateStageMemory(const ModelSpec& model, const OptimizerSpec& optimizer, std::int64_t batchSize,
    std::int64_t microBatches, std::int64_t stage, std::int64_t stages, bool carriesOptimizer, std::int64_t datasetBytes);
// The largest of a job's stages (what a broker offers a node that may be given any stage).
ShardMemory estimateLargestStage(const ModelSpec& model, const OptimizerSpec& optimizer, std::int64_t batchSize,
    std::int64_t microBatches, std::int64_t stages, bool carriesOptimizer, std::int64_t datasetBytes);

} // namespace tessera::core
