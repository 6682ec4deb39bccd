// libFuzzer target: the lines a node reveals for an inference shard (docs/DETERMINISM.md,
// "Inference"), which the broker reads from strangers: whatever the bytes, checking them against a
// task and a chain, summing them, adding text and comparing two of them neither crashes nor
// accepts lines that do not hash to the chain.

#include <core/decomposition.h>
#include <core/inference/outputs.h>
#include <core/shardtask.h>

#include <QByteArray>

#include <cstddef>
#include <cstdint>

using namespace tessera::core;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size < 2)
        return 0;
    const QByteArray blob(reinterpret_cast<const char*>(data) + 2, qsizetype(size - 2));
    ShardTask task;
    task.jobId = QStringLiteral("0123456789abcdef");
    InferenceSpec spec;
    spec.task = InferenceSpec::Task(data[0] % 3);
    spec.batchSize = spec.task == InferenceSpec::Task::Generate ? 1 : 1 + data[1] % 4;
    spec.maxTokens = 1 + data[1] % 7;
    spec.promptCount = 1000;
    task.inference = spec;
    task.batchSize = spec.batchSize;
    task.threads = 1;
    task.model.context = 8;
    task.sampleBegin = 0;
    auto lines = inference::linesOf(blob);
    task.sampleEnd = lines && !lines->isEmpty() ? lines->size() : 1;
    task.localSteps = (task.sampleEnd + task.batchSize - 1) / task.batchSize;
    task.checkpointInterval = 1;
    const auto chain = lines ? inference::chainOf({}, *lines, task.batchSize) : QList<Digest> {};
    const auto checked = inference::checkRevealed(task, blob, chain);
    // Lines that pass hash to the chain they were checked against, and sum up.
    if (checked && (!lines || inference::chainOf({}, *lines, task.batchSize) != chain))
        __builtin_trap();
    if (checked && !inference::summarize(spec.task, blob))
        __builtin_trap();
    (void)inference::withText(blob);
    if (lines && lines->size() >= 2) {
        (void)inference::agreeWithin(spec.task, (*lines)[0], (*lines)[1]);
        (void)inference::firstDifferingToken((*lines)[0], (*lines)[1]);
    }
    // A changed chain is never accepted.
    if (!chain.isEmpty() && chain.size() > 1) {
        auto other = chain;
        other.last() = Digest::ofBytes("not this batch");
        if (inference::checkRevealed(task, blob, other))
            __builtin_trap();
    }
    return 0;
}
