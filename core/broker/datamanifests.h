#pragma once

#include "../blobstore.h"
#include "../datasetchunks.h"
#include "../jobspec.h"
#include "../shardtask.h"

#include <QHash>

#include <memory>
#include <mutex>

namespace tessera::core::broker {

// The manifests of the chunked datasets the broker's jobs train on, read from the blob store once
// (a manifest is content-addressed, so what was read stays true), and the shard tasks that name
// the chunks they read: every place the broker makes a task makes the same one as the node got.
class DataManifests {
public:
    explicit DataManifests(BlobStore& blobs)
        : m_blobs(blobs)
    { }

    Result<std::shared_ptr<const DatasetManifest>> of(const Digest& manifest);
    // decomposeShard(), with the dataChunks of a chunked dataset. `unit` is the shard, or of a
    // pipeline job (JobSpec::stagesPerShard) the stage task: stage unit % S of shard unit / S.
    Result<ShardTask> shardTask(
        const QString& jobId, const JobSpec& spec, std::int64_t round, std::int64_t unit, const Digest& startWeights);
    // Whether a job may train on its manifest: it is stored and says what the job says, and every
    // chunk it lists is stored with the size it says, and no shard that reads `reads` samples
    // could read more than MaxTaskChunks of them. Errors name the job's field.
    Status checkSubmittable(const DatasetSpec& dataset, std::int64_t reads);

private:
    static constexpr qsizetype MaxKept = 64;
    BlobStore& m_blobs;
    std::mutex m_mutex;
    QHash<Digest, std::shared_ptr<const DatasetManifest>> m_read;
};

} // namespace tessera::core::broker
