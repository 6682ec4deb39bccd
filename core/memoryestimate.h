#pragma once

#include "jobspec.h"

#include <cstdint>
#include <functional>
#include <optional>

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

// A pipeline stage task's share of a shard's memory (task.stages > 1): the model's and the
// activations' part split evenly over the stages (the blocks are; the embedding and the head are
// about a block's worth each), the data whole (each stage loads it). The activations are an upper
// bound: under 1F1B a stage holds its layers' activations of at most S of the M micro-batches.
ShardMemory stageShareOf(const ShardMemory& whole, std::int64_t stages);

} // namespace tessera::core
