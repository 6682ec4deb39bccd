#include "memoryestimate.h"

#include <algorithm>
#include <cmath>

namespace tessera::core {

namespace {

constexpr double Pixels = 28.0 * 28.0;

// Floats a zoo model keeps per sample for its backward pass: every layer's output (and, with
// ReLU and dropout, about as much again).
double activationFloatsPerSample(const ModelSpec& model)
{
    if (model.source != ModelSpec::Source::Zoo)
        return 16.0 * Pixels; // unknown layers: a generous guess for a model of 28x28 inputs
    if (model.zoo == u"gpt") {
        // Per token and layer: the block's inputs and outputs, q, k, v, the MLP's 4 x width twice,
        // and the attention weights (heads x L, twice: softmax and dropout); the logits.
        const double length = double(model.context), c = double(model.width);
        const double perLayer = 16.0 * c + 2.0 * double(model.heads) * length;
        return length * (double(model.layers) * perLayer + 2.0 * (model.vocabulary > 0 ? double(model.vocabulary) : 256.0));
    }
    double floats = Pixels;
    if (model.zoo == u"cnn") {
        const double c1 = model.channels.value(0, 16), c2 = model.channels.value(1, 32);
        floats += c1 * Pixels + c1 * Pixels / 4 + c2 * Pixels / 4 + c2 * Pixels / 16 + model.hidden.value(0, 128);
    } else {
        for (const auto width : model.hidden)
            floats += double(width);
    }
    return 3.0 * (floats + 10.0);
}

} // namespace

std::int64_t builtinDatasetBytes(const QString& name)
{
    if (name == u"fashion-mnist")
        return 70'000LL * (28 * 28 + 8);
    if (name == u"fortunes") // int64 inputs and targets of every token, train and test
        return 2'576'676LL * 2 * 8;
    return 0;
}

std::int64_t datasetBytes(const DatasetSpec& dataset, const std::function<std::optional<std::int64_t>(const Digest&)>& fileSize)
{
    if (dataset.source == DatasetSpec::Source::Builtin)
        return builtinDatasetBytes(dataset.builtin);
    std::int64_t total = 0;
    for (const auto& digest : { dataset.trainSha256, dataset.testSha256 })
        total += digest.isNull() ? 0 : fileSize(digest).value_or(0);
    return total;
}

ShardMemory estimateShardMemory(const ModelSpec& model, const OptimizerSpec& optimizer, std::int64_t batchSize,
    std::int64_t modelBytes, std::int64_t datasetBytes)
{
    const int stateSlots = optimizer.isAdam() ? 2 : optimizer.momentum > 0.0 ? 1 : 0;
    constexpr double Largest = 9.0e18;
    ShardMemory memory;
    memory.dataset = std::max<std::int64_t>(0, datasetBytes);
    memory.model = std::int64_t(std::min(Largest, double(std::max<std::int64_t>(0, modelBytes)) * (4.0 + 2.0 * stateSlots)));
    memory.activations = std::int64_t(
        std::min(Largest, 2.0 * 4.0 * double(std::max<std::int64_t>(1, batchSize)) * activationFloatsPerSample(model)));
    return memory;
}

ShardMemory stageShareOf(const ShardMemory& whole, std::int64_t stages)
{
    if (stages <= 1)
        return whole;
    ShardMemory share = whole;
    share.model = whole.model / stages;
    share.activations = whole.activations / stages;
    return share;
}

} // namespace tessera::core
