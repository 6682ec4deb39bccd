// libFuzzer target: a chunked dataset's manifest (JSON from job owners, read by brokers and nodes)
// and the data order over its chunks: a manifest that parses survives its own JSON, and every row
// a step takes lies inside a chunk of the slice.

#include <core/datasetchunks.h>
#include <core/shardtask.h>

#include <QByteArray>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size < 4)
        return 0;
    auto manifest
        = tessera::core::DatasetManifest::fromJson(QByteArray(reinterpret_cast<const char*>(data) + 4, qsizetype(size - 4)));
    if (!manifest)
        return 0;
    auto again = tessera::core::DatasetManifest::fromJson(manifest->toJson());
    if (!again || !(*again == *manifest))
        __builtin_trap();
    // The order over small corpora only: a segment's permutation is as long as the segment.
    const auto samples = manifest->chunkSamples();
    if (manifest->sampleCount() > 100'000)
        return 0;
    tessera::core::ShardTask task;
    task.jobId = QStringLiteral("j");
    task.seed = data[0];
    task.round = data[1] % 4;
    task.shard = data[2] % 3;
    task.batchSize = 1 + data[3] % 17;
    task.sampleBegin = std::int64_t(data[0]) * manifest->sampleCount() / 256;
    task.sampleEnd = std::min(manifest->sampleCount(), task.sampleBegin + 1 + data[1] * 3);
    task.localSteps = 1 + data[2] % 9;
    tessera::core::ChunkedOrder order(task, samples);
    const auto read = order.chunksRead(task.localSteps);
    for (std::int64_t step = 0; step < task.localSteps; ++step) {
        for (const auto& row : order.rowsOfStep(step)) {
            if (row.chunk < 0 || row.chunk >= samples.size() || row.index < 0 || row.index >= samples[row.chunk]
                || !read.contains(row.chunk))
                __builtin_trap();
        }
    }
    return 0;
}
