#include "datamanifests.h"

#include "../decomposition.h"

namespace tessera::core::broker {

Result<std::shared_ptr<const DatasetManifest>> DataManifests::of(const Digest& manifest)
{
    {
        const std::lock_guard lock(m_mutex);
        if (auto it = m_read.constFind(manifest); it != m_read.constEnd())
            return *it;
    }
    const auto size = m_blobs.sizeOf(manifest);
    if (!size)
        return Error { QStringLiteral("dataset.chunks.manifestSha256"), QStringLiteral("upload the manifest before submitting") };
    if (*size > DatasetManifest::MaxManifestBytes)
        return Error { QStringLiteral("dataset.chunks.manifestSha256"), QStringLiteral("the manifest is larger than 16 MiB") };
    auto bytes = m_blobs.read(manifest);
    if (!bytes)
        return bytes.error();
    auto parsed = DatasetManifest::fromJson(*bytes);
    if (!parsed)
        return Error { QStringLiteral("dataset.chunks.manifestSha256"), parsed.error().toString() };
    auto shared = std::make_shared<const DatasetManifest>(std::move(*parsed));
    const std::lock_guard lock(m_mutex);
    if (m_read.size() >= MaxKept) // quotes of manifests no job names must not grow it for ever
        m_read.clear();
    m_read.insert(manifest, shared);
    return shared;
}

Result<ShardTask> DataManifests::shardTask(
    const QString& jobId, const JobSpec& spec, std::int64_t round, std::int64_t unit, const Digest& startWeights)
{
    const auto stages = spec.stagesPerShard();
    auto task = decomposeShard(jobId, spec, round, unit / stages, startWeights);
    if (stages > 1)
        task = stageTaskOf(task, unit % stages, stages);
    if (spec.dataset.source != DatasetSpec::Source::Chunks)
        return task;
    auto manifest = of(spec.dataset.manifestSha256);
    if (!manifest)
        return manifest.error();
    task.dataChunks = chunksOfTask(task, **manifest);
    return task;
}

Status DataManifests::checkSubmittable(const DatasetSpec& dataset, std::int64_t reads)
{
    if (dataset.source != DatasetSpec::Source::Chunks)
        return {};
    if (!m_blobs.contains(dataset.testSha256))
        return Error { QStringLiteral("dataset.chunks.testSha256"), QStringLiteral("upload the test tensors before submitting") };
    auto manifest = of(dataset.manifestSha256);
    if (!manifest)
        return manifest.error();
    if (const auto most = mostChunksRead(**manifest, reads); most > MaxTaskChunks)
        return Error { QStringLiteral("dataset.chunks.manifestSha256"),
            QStringLiteral("a shard could read %1 chunks, more than the %2 a task may name: make the chunks larger")
                .arg(most)
                .arg(MaxTaskChunks) };
    if ((*manifest)->sampleCount() != dataset.trainSamples)
        return Error { QStringLiteral("dataset.chunks.trainSamples"),
            QStringLiteral("the job says %1 training samples but the manifest's chunks hold %2")
                .arg(dataset.trainSamples)
                .arg((*manifest)->sampleCount()) };
    for (qsizetype i = 0; i < (*manifest)->chunks.size(); ++i) {
        const auto& chunk = (*manifest)->chunks[i];
        const auto size = m_blobs.sizeOf(chunk.sha256);
        if (!size)
            return Error { QStringLiteral("dataset.chunks.manifestSha256"),
                QStringLiteral("chunk %1 (%2) is not uploaded").arg(i).arg(chunk.sha256.toHex()) };
        if (*size != chunk.bytes)
            return Error { QStringLiteral("dataset.chunks.manifestSha256"),
                QStringLiteral("chunk %1 is %2 bytes, not the %3 the manifest says").arg(i).arg(*size).arg(chunk.bytes) };
    }
    return {};
}

} // namespace tessera::core::broker
