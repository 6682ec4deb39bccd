#pragma once

#include "error.h"
#include "hash.h"

#include <QByteArray>
#include <QList>
#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::core {

struct ShardTask;

// A dataset too large for one file: content-addressed chunks, each a torch.save file of the same
// kind as a tensors dataset ({"x", "y"} or {"tokens"}), listed in a manifest that is itself a blob
// (docs/JOBS.md, "Chunked datasets"). The manifest says what every chunk holds, so that a shard
// fetches only the chunks its batches read and nobody needs the corpus to know its shape.
struct DatasetManifest {
    enum class Kind { Tokens, Samples };
    struct Chunk {
        Digest sha256;
        std::int64_t samples = 0;
        std::int64_t bytes = 0;
        QString file; // where the chunk is beside the manifest, for whoever uploads it; may be empty
        bool operator==(const Chunk&) const = default;
    };

    static constexpr const char* Format = "tessera-dataset-chunks";
    static constexpr qsizetype MaxChunks = 65536;
    static constexpr std::int64_t MaxChunkBytes = std::int64_t(1) << 30; // a chunk is a job's file
    static constexpr std::int64_t MaxManifestBytes = std::int64_t(16) << 20;

    Kind kind = Kind::Samples;
    // One sample's shape: [L] for tokens (windows of L inputs, L + 1 tokens stored), [C, H, W] or
    // [F] for samples; and the classes (the vocabulary for tokens): every label is below it.
    QList<std::int64_t> sampleShape;
    std::int64_t classes = 0;
    QList<Chunk> chunks;

    // An error names the field ("chunks[3].sha256") and says why.
    static Result<DatasetManifest> fromJson(const QByteArray& bytes);
    QByteArray toJson() const; // indented, so that a job owner can read it
    std::int64_t sampleCount() const;
    QList<std::int64_t> chunkSamples() const;
    QList<Digest> digests() const;
    bool operator==(const DatasetManifest&) const = default;
};

// The data order of a chunked dataset (docs/DETERMINISM.md, "Data order of a chunked dataset"):
// round r orders the chunks, P = perm(C, derive(seed, ChunkOrder, r)), and the round's stream is
// their samples one chunk after the other; shard k's slice is the stream's [sampleBegin,
// sampleEnd), cut into segments where chunks end; a pass visits the segments in order and each
// segment g in the order perm(m_g, derive(seed, SegmentPass, r, k, pass, g)). Step s takes stream
// positions [s*B, (s+1)*B) of the passes. So the first steps read the first segments: a shard
// reads about H*B / (samples per chunk) + 1 chunks, whatever the corpus's size.
class ChunkedOrder {
public:
    ChunkedOrder(const ShardTask& task, const QList<std::int64_t>& chunkSamples);

    struct Row {
        qsizetype chunk = 0; // index into the manifest's chunks
        std::int64_t index = 0; // sample within the chunk
        bool operator==(const Row&) const = default;
    };
    QList<Row> rowsOfStep(std::int64_t step);
    // The chunks that steps [0, steps) read, ascending by manifest index.
    QList<qsizetype> chunksRead(std::int64_t steps) const;

private:
    struct Segment {
        qsizetype chunk = 0;
        std::int64_t first = 0; // first sample of the chunk in the slice
        std::int64_t length = 0;
        std::int64_t offset = 0; // where it starts in the slice
    };
    const QList<std::int64_t>& segmentOrder(std::int64_t pass, qsizetype segment);

    std::uint64_t m_seed = 0;
    std::int64_t m_round = 0;
    std::int64_t m_shard = 0;
    std::int64_t m_batch = 1;
    std::int64_t m_length = 0;
    QList<Segment> m_segments;
    std::int64_t m_cachedPass = -1;
    qsizetype m_cachedSegment = -1;
    QList<std::int64_t> m_order;
};

// The chunks of `manifest` that the task's steps read, as the task's dataChunks name them.
QList<Digest> chunksOfTask(const ShardTask& task, const DatasetManifest& manifest);
// The most chunks any shard can read that reads `positions` samples of its slice: the first segment
// may hold one sample, the others whole chunks, the smallest first. A job whose tasks could name
// more than MaxTaskChunks is refused (a TASK's header is bounded).
std::int64_t mostChunksRead(const DatasetManifest& manifest, std::int64_t positions);
inline constexpr std::int64_t MaxTaskChunks = 256;

} // namespace tessera::core
