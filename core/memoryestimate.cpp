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

std::pair<std::int64_t, std::int64_t> stageBlocksOf(std::int64_t layers, std::int64_t stage, std::int64_t stages)
{
    if (stages < 1 || stage < 0 || stage >= stages)
        return { 0, 0 };
    return { layers - ((stages - stage) * layers) / stages, layers - ((stages - stage - 1) * layers) / stages };
}

namespace {

// A gpt's parameters by part: a block (two layer norms, attention's qkv and projection, the MLP's
// two linear layers, with biases), the embeddings, the last layer norm and the untied head.
// With the vocabulary they are of (the built-in text's 256 when the model names none).
struct GptParameters {
    double block = 0, embeddings = 0, head = 0, vocabulary = 0;
};
GptParameters gptParameters(const ModelSpec& model)
{
    const double width = double(model.width), vocabulary = model.vocabulary > 0 ? double(model.vocabulary) : 256.0;
    return { 12.0 * width * width + 13.0 * width, (vocabulary + double(model.context)) * width,
        2.0 * width + (model.tied ? 0.0 : vocabulary * width), vocabulary };
}

} // namespace

ShardMemory estimateStageMemory(const ModelSpec& model, const OptimizerSpec& optimizer, std::int64_t batchSize,
    std::int64_t microBatches, std::int64_t stage, std::int64_t stages, bool carriesOptimizer, std::int64_t datasetBytes)
{
    constexpr double Largest = 9.0e18;
    const auto parts = gptParameters(model);
    const double all = double(model.layers) * parts.block + parts.embeddings + parts.head;
    const auto whole = estimateShardMemory(model, optimizer, batchSize, std::int64_t(std::min(Largest, 4.0 * all)), datasetBytes);
    if (stages <= 1 || model.source != ModelSpec::Source::Zoo || model.zoo != u"gpt")
        return whole;
    const auto [first, end] = stageBlocksOf(model.layers, stage, stages);
    const bool last = stage == stages - 1;
    const double own = double(end - first) * parts.block + (stage == 0 ? parts.embeddings : 0.0) + (last ? parts.head : 0.0);
    const int stateSlots = optimizer.isAdam() ? 2 : optimizer.momentum > 0.0 ? 1 : 0;
    ShardMemory memory;
    memory.dataset = whole.dataset;
    memory.model = carriesOptimizer ? whole.model
                                    : std::int64_t(std::min(Largest, std::max(4.0 * own * (4.0 + 2.0 * stateSlots), 4.0 * all)));
    const double length = double(model.context), c = double(model.width);
    const double perToken
        = double(end - first) * (16.0 * c + 2.0 * double(model.heads) * length) + (last ? 2.0 * parts.vocabulary : 0.0);
    const auto m = std::max<std::int64_t>(1, microBatches);
    const double inFlight = double(std::min(stages - stage, m));
    memory.activations = std::int64_t(
        std::min(Largest, 2.0 * 4.0 * double(std::max<std::int64_t>(1, batchSize)) / double(m) * inFlight * length * perToken));
    return memory;
}

ShardMemory estimateLargestStage(const ModelSpec& model, const OptimizerSpec& optimizer, std::int64_t batchSize,
    std::int64_t microBatches, std::int64_t stages, bool carriesOptimizer, std::int64_t datasetBytes)
{
    ShardMemory largest;
    for (std::int64_t s = 0; s < std::max<std::int64_t>(stages, 1); ++s) {
        const auto memory
            = estimateStageMemory(model, optimizer, batchSize, microBatches, s, stages, carriesOptimizer, datasetBytes);
        if (memory.total() > largest.total())
            largest = memory;
    }
    return largest;
}

} // namespace tessera::core
