// make bench: an inference shard on a node against a bare LibTorch inference loop on the same
// model and inputs (docs/PERFORMANCE.md, "Inference"). Classify: the zoo mlp over the Fashion-MNIST
// test set in batches of 100, samples/s. Generate: the Fortunes GPT's size writing completions
// with a KV cache, tokens/s. Goal: the node at least 0.9 of the bare loop. The shard does what the
// loop does not: it writes and hashes a line per input, draws each token with its prompt's seed,
// checks its own lines, and keeps everything for its commitment.

#include "benchgpt.h"
#include "record.h"

#include <compute/engine/detail/datasets.h>
#include <compute/engine/detail/models.h>
#include <compute/engine/shardrun.h>
#include <compute/engine/weights.h>
#include <core/decomposition.h>
#include <core/smalljobs.h>

#include <torch/torch.h>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QJsonObject>
#include <QTemporaryDir>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

using namespace tessera;

namespace {

double best(const std::vector<double>& rates)
{
    return *std::max_element(rates.begin(), rates.end());
}

core::JobSpec inferenceJob(const core::JobSpec& trained, const QString& weightsFile, const core::InferenceSpec& inference)
{
    auto spec = core::inferenceJobOf(trained, weightsFile, inference);
    if (!spec)
        qFatal("not a valid inference job");
    return *spec;
}

// The job's first shard on the node's path (ShardRun, step by step, then finish): inputs/s.
double node(const core::ShardTask& task, const QByteArray& weights, std::int64_t unitsPerInput = 1)
{
    auto run = compute::ShardRun::start(task, weights, {});
    if (!run)
        qFatal("%s", qPrintable(run.error().toString()));
    QElapsedTimer timer;
    timer.start();
    while (!(*run)->finished()) {
        if (!(*run)->step())
            qFatal("step failed");
    }
    const auto output = (*run)->finish();
    const double seconds = double(timer.nsecsElapsed()) / 1e9;
    if (output.result.outcome != core::ShardResult::Outcome::Completed)
        qFatal("%s", qPrintable(output.result.failure));
    return double((task.sampleEnd - task.sampleBegin) * unitsPerInput) / seconds;
}

// The loop a LibTorch user writes: forward each batch, softmax, argmax.
double bareClassify(compute::detail::Model& model, const compute::detail::Dataset& data, std::int64_t batch)
{
    torch::NoGradGuard noGrad;
    QElapsedTimer timer;
    timer.start();
    std::int64_t sink = 0;
    for (std::int64_t begin = 0; begin < data.size(); begin += batch) {
        const auto p = torch::softmax(model.forward(data.slice(begin, std::min(begin + batch, data.size()))), 1);
        sink += p.argmax(1).sum().item<std::int64_t>();
    }
    const double seconds = double(timer.nsecsElapsed()) / 1e9;
    return sink >= 0 ? double(data.size()) / seconds : 0.0;
}

// Greedy decoding with the same module's KV cache, `tokens` tokens after "%\n", `prompts` times.
double bareGenerate(compute::detail::Model& model, std::int64_t prompts, std::int64_t tokens)
{
    torch::NoGradGuard noGrad;
    QElapsedTimer timer;
    timer.start();
    for (std::int64_t p = 0; p < prompts; ++p) {
        compute::detail::Model::KvCache cache;
        auto logits = model.decode(torch::tensor({ std::int64_t('%'), std::int64_t('\n') }).unsqueeze(0), 0, cache);
        for (std::int64_t t = 0; t < tokens; ++t) {
            const auto next = logits.argmax().item<std::int64_t>();
            logits = model.decode(torch::tensor({ next }).unsqueeze(0), 2 + t, cache);
        }
    }
    return double(prompts * tokens) / (double(timer.nsecsElapsed()) / 1e9);
}

// The same without the cache: a full forward over the whole sequence for each token.
double bareGenerateWithoutCache(compute::detail::Model& model, std::int64_t prompts, std::int64_t tokens)
{
    torch::NoGradGuard noGrad;
    QElapsedTimer timer;
    timer.start();
    for (std::int64_t p = 0; p < prompts; ++p) {
        std::vector<std::int64_t> sequence { '%', '\n' };
        for (std::int64_t t = 0; t < tokens; ++t) {
            const auto length = std::int64_t(sequence.size());
            const auto logits = model.forward(torch::tensor(sequence).unsqueeze(0))[0][length - 1];
            sequence.push_back(logits.argmax().item<std::int64_t>());
        }
    }
    return double(prompts * tokens) / (double(timer.nsecsElapsed()) / 1e9);
}

// One classifier over the Fashion-MNIST test set in batches of 100: the shard against the bare loop.
void classify(const QTemporaryDir& dir, const core::JobSpec& trained, const char* key, const char* label)
{
    auto initial = compute::initialWeights(trained, {});
    if (!initial)
        qFatal("%s", qPrintable(initial.error().toString()));
    const QString file = dir.filePath(trained.name + QStringLiteral(".pt"));
    QFile out(file);
    out.open(QIODevice::WriteOnly);
    out.write(initial->bytes);
    out.close();
    core::InferenceSpec inference;
    inference.task = core::InferenceSpec::Task::Classify;
    inference.batchSize = 100;
    inference.samplesPerShard = 10000;
    const auto spec = inferenceJob(trained, file, inference);
    const auto task = core::decomposeShard(QStringLiteral("0123456789abcdef"), spec, 0, 0, initial->canonicalHash);
    auto data = compute::detail::loadDataset(spec.dataset, {});
    auto model = compute::detail::buildModel(spec.model, data->test->sampleShape(), 10, 1, {});
    auto tensors = compute::detail::unpickleTensors(initial->bytes, QStringLiteral("weights"));
    (void)(*model)->loadState(compute::detail::modelPart(*tensors));
    (*model)->setTraining(false);
    at::set_num_threads(1);
    auto portableTask = task;
    portableTask.portable = true;
    portableTask.inference->determinism = core::InferenceSpec::Determinism::Portable;
    std::vector<double> ours, bare, portable;
    for (int i = 0; i < 5; ++i) {
        ours.push_back(node(task, initial->bytes));
        bare.push_back(bareClassify(**model, *data->test, 100));
        portable.push_back(node(portableTask, initial->bytes));
    }
    const double ratio = best(ours) / best(bare);
    std::printf("classify: %s over 10,000 test images, batch 100: node %.0f samples/s, bare %.0f, ratio %.3f; portable mode "
                "%.0f samples/s (%.2f of fast)\n",
        label, best(ours), best(bare), ratio, best(portable), best(portable) / best(ours));
    const std::string prefix = std::string("inference.") + key;
    bench::record((prefix + ".node").c_str(), best(ours));
    bench::record((prefix + ".bare").c_str(), best(bare));
    bench::record((prefix + ".ratio").c_str(), ratio);
    bench::record((prefix + ".portable").c_str(), best(portable));
    bench::record((prefix + ".portableRatio").c_str(), best(portable) / best(ours));
}

void generate(const QTemporaryDir& dir)
{
    const auto gpt = bench::fortunesSizedGpt(dir);
    const auto& trained = gpt.trained;
    const auto& initial = gpt.initial;
    const QString& file = gpt.file;
    constexpr std::int64_t Prompts = 8, Tokens = 120;
    core::InferenceSpec inference;
    inference.task = core::InferenceSpec::Task::Generate;
    inference.batchSize = 1;
    inference.samplesPerShard = Prompts;
    inference.promptText = "%\n";
    inference.promptCount = Prompts;
    inference.maxTokens = Tokens;
    inference.temperature = 0.0; // greedy, as the bare loop: no stop sequence, every completion full length
    const auto spec = inferenceJob(trained, file, inference);
    const auto task = core::decomposeShard(QStringLiteral("0123456789abcdef"), spec, 0, 0, initial.canonicalHash);
    auto model = compute::detail::buildModel(spec.model, { 128 }, 256, 1, {});
    auto tensors = compute::detail::unpickleTensors(initial.bytes, QStringLiteral("weights"));
    (void)(*model)->loadState(compute::detail::modelPart(*tensors));
    (*model)->setTraining(false);
    at::set_num_threads(1);
    auto portableTask = task;
    portableTask.portable = true;
    portableTask.inference->determinism = core::InferenceSpec::Determinism::Portable;
    std::vector<double> ours, bare, uncached, portable;
    for (int i = 0; i < 5; ++i) {
        ours.push_back(node(task, initial.bytes, Tokens));
        bare.push_back(bareGenerate(**model, Prompts, Tokens));
        uncached.push_back(bareGenerateWithoutCache(**model, Prompts, Tokens));
        portable.push_back(node(portableTask, initial.bytes, Tokens));
    }
    std::printf("generate: portable mode (its own decoder, keeping each position's row) %.0f tokens/s, %.2f of fast, %.2f "
                "of the bare loop without a cache\n",
        best(portable), best(portable) / best(ours), best(portable) / best(uncached));
    bench::record("inference.generate.portable", best(portable));
    bench::record("inference.generate.portableRatio", best(portable) / best(ours));
    bench::record("inference.generate.portableUncachedRatio", best(portable) / best(uncached));
    const double ratio = best(ours) / best(bare);
    std::printf("generate: the bare loop without a KV cache %.0f tokens/s (the cache: %.2fx)\n", best(uncached),
        best(bare) / best(uncached));
    bench::record("inference.generate.uncached", best(uncached));
    bench::record("inference.generate.cacheSpeedup", best(bare) / best(uncached));
    std::printf("generate: gpt 4 x 160, context 128, %lld prompts x %lld tokens with a KV cache: node %.0f tokens/s, bare %.0f, "
                "ratio %.3f\n",
        qlonglong(Prompts), qlonglong(Tokens), best(ours), best(bare), ratio);
    bench::record("inference.generate.node", best(ours));
    bench::record("inference.generate.bare", best(bare));
    bench::record("inference.generate.ratio", ratio);
}

} // namespace

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    QTemporaryDir dir;
    classify(dir, core::smallMlpJob(QStringLiteral("bench-mlp"), { 256, 128 }), "classify", "mlp 784-256-128-10");
    auto cnn = core::smallMlpJob(QStringLiteral("bench-cnn"), { 128 });
    cnn.model.zoo = QStringLiteral("cnn");
    cnn.model.channels = { 16, 32 };
    classify(dir, cnn, "classifyCnn", "cnn 16/32 channels");
    generate(dir);
    return 0;
}
