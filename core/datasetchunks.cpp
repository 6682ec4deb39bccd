#include "datasetchunks.h"

#include "jsonreader.h"
#include "seeds.h"
#include "shardtask.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSet>

#include <algorithm>

namespace tessera::core {

namespace {

const std::array KindNames { "tokens", "samples" };

} // namespace

Result<DatasetManifest> DatasetManifest::fromJson(const QByteArray& bytes)
{
    if (bytes.size() > MaxManifestBytes)
        return Error { QStringLiteral("manifest"), QStringLiteral("is larger than 16 MiB") };
    auto object = parseJsonObject(bytes);
    if (!object)
        return Error { QStringLiteral("manifest"), object.error().message };
    JsonReader reader(*object);
    reader.allowOnly({ QStringLiteral("format"), QStringLiteral("version"), QStringLiteral("kind"), QStringLiteral("sampleShape"),
        QStringLiteral("classes"), QStringLiteral("chunks") });
    DatasetManifest manifest;
    if (reader.string(u"format") != QLatin1String(Format) && reader.ok())
        reader.fail(u"format", QStringLiteral("must be \"%1\"").arg(QLatin1String(Format)));
    reader.integer(u"version", 1, 1);
    const QString kind = reader.string(u"kind");
    if (kind == QLatin1String(KindNames[0]))
        manifest.kind = Kind::Tokens;
    else if (kind == QLatin1String(KindNames[1]))
        manifest.kind = Kind::Samples;
    else if (reader.ok())
        reader.fail(u"kind", QStringLiteral("'%1' is not a kind of chunk (choose tokens or samples)").arg(kind));
    manifest.sampleShape = reader.integerList(u"sampleShape", 1, std::int64_t(1) << 24, 8);
    if (reader.ok() && manifest.sampleShape.isEmpty())
        reader.fail(u"sampleShape", QStringLiteral("needs at least one dimension"));
    if (reader.ok() && manifest.kind == Kind::Tokens && manifest.sampleShape.size() != 1)
        reader.fail(u"sampleShape", QStringLiteral("a token window has one dimension, its length"));
    manifest.classes = reader.integer(u"classes", 1, std::int64_t(1) << 24);
    std::int64_t total = 0;
    QSet<Digest> seen;
    for (auto& item : reader.objectList(u"chunks", MaxChunks)) {
        item.allowOnly({ QStringLiteral("sha256"), QStringLiteral("samples"), QStringLiteral("bytes"), QStringLiteral("file") });
        Chunk chunk;
        chunk.sha256 = item.digest(u"sha256");
        chunk.samples = item.integer(u"samples", 1, std::int64_t(1) << 32);
        chunk.bytes = item.integer(u"bytes", 1, MaxChunkBytes);
        chunk.file = item.string(u"file", Presence::Optional);
        // A name in the manifest's own folder: whoever uploads a manifest uploads no other file.
        if (item.ok() && (chunk.file.contains(u'/') || chunk.file.contains(u'\\') || chunk.file == u"." || chunk.file == u".."))
            item.fail(u"file", QStringLiteral("must be the name of a file beside the manifest, not a path"));
        // Once each: a chunk listed twice would be loaded twice by a task that names it once.
        if (item.ok() && seen.contains(chunk.sha256))
            item.fail(u"sha256", QStringLiteral("is listed before: each chunk once"));
        seen.insert(chunk.sha256);
        total += chunk.samples;
        manifest.chunks.append(chunk);
    }
    if (reader.ok() && manifest.chunks.isEmpty())
        reader.fail(u"chunks", QStringLiteral("a dataset needs at least one chunk"));
    if (reader.ok() && total > (std::int64_t(1) << 40))
        reader.fail(u"chunks", QStringLiteral("hold more than 2^40 samples"));
    if (auto status = reader.status(); !status)
        return Error { QStringLiteral("manifest.") + status.error().field, status.error().message };
    return manifest;
}

QByteArray DatasetManifest::toJson() const
{
    QJsonArray list;
    for (const auto& chunk : chunks) {
        QJsonObject entry { { QStringLiteral("sha256"), chunk.sha256.toHex() },
            { QStringLiteral("samples"), qint64(chunk.samples) }, { QStringLiteral("bytes"), qint64(chunk.bytes) } };
        if (!chunk.file.isEmpty())
            entry.insert(QStringLiteral("file"), chunk.file);
        list.append(entry);
    }
    QJsonArray shape;
    for (const auto dimension : sampleShape)
        shape.append(qint64(dimension));
    const QJsonObject json { { QStringLiteral("format"), QLatin1String(Format) }, { QStringLiteral("version"), 1 },
        { QStringLiteral("kind"), QLatin1String(KindNames[kind == Kind::Tokens ? 0 : 1]) },
        { QStringLiteral("sampleShape"), shape }, { QStringLiteral("classes"), qint64(classes) },
        { QStringLiteral("chunks"), list } };
    return QJsonDocument(json).toJson(QJsonDocument::Indented);
}

std::int64_t DatasetManifest::sampleCount() const
{
    std::int64_t total = 0;
    for (const auto& chunk : chunks)
        total += chunk.samples;
    return total;
}

QList<std::int64_t> DatasetManifest::chunkSamples() const
{
    QList<std::int64_t> samples;
    for (const auto& chunk : chunks)
        samples.append(chunk.samples);
    return samples;
}

QList<Digest> DatasetManifest::digests() const
{
    QList<Digest> list;
    for (const auto& chunk : chunks)
        list.append(chunk.sha256);
    return list;
}

ChunkedOrder::ChunkedOrder(const ShardTask& task, const QList<std::int64_t>& chunkSamples)
    : m_seed(std::uint64_t(task.seed))
    , m_round(task.round)
    , m_shard(task.shard)
    , m_batch(std::max<std::int64_t>(1, task.batchSize))
    , m_length(std::max<std::int64_t>(0, task.sampleEnd - task.sampleBegin))
{
    const auto order = seededPermutation(
        chunkSamples.size(), deriveSeed(m_seed, { std::uint64_t(SeedPurpose::ChunkOrder), std::uint64_t(m_round) }));
    std::int64_t start = 0; // of the chunk in the round's stream
    for (const auto chunk : order) {
        const std::int64_t end = start + chunkSamples[chunk];
        const std::int64_t from = std::max(start, task.sampleBegin), to = std::min(end, task.sampleEnd);
        if (from < to)
            m_segments.append({ qsizetype(chunk), from - start, to - from, from - task.sampleBegin });
        start = end;
        if (start >= task.sampleEnd)
            break;
    }
    // A slice past the corpus's end (a task no node runs: prepare() refuses it) reads what there is.
    m_length = m_segments.isEmpty() ? 0 : m_segments.last().offset + m_segments.last().length;
}

const QList<std::int64_t>& ChunkedOrder::segmentOrder(std::int64_t pass, qsizetype segment)
{
    if (pass != m_cachedPass || segment != m_cachedSegment) {
        m_order = seededPermutation(m_segments[segment].length,
            deriveSeed(m_seed,
                { std::uint64_t(SeedPurpose::SegmentPass), std::uint64_t(m_round), std::uint64_t(m_shard), std::uint64_t(pass),
                    std::uint64_t(segment) }));
        m_cachedPass = pass;
        m_cachedSegment = segment;
    }
    return m_order;
}

QList<ChunkedOrder::Row> ChunkedOrder::rowsOfStep(std::int64_t step)
{
    QList<Row> rows;
    if (m_segments.isEmpty() || step < 0)
        return rows;
    rows.reserve(m_batch);
    for (std::int64_t position = step * m_batch; position < (step + 1) * m_batch; ++position) {
        const std::int64_t pass = position / m_length, offset = position % m_length;
        const auto after = std::upper_bound(m_segments.cbegin(), m_segments.cend(), offset,
            [](std::int64_t value, const Segment& segment) { return value < segment.offset; });
        const qsizetype g = qsizetype(after - m_segments.cbegin()) - 1;
        const auto& segment = m_segments[g];
        rows.append({ segment.chunk, segment.first + segmentOrder(pass, g)[offset - segment.offset] });
    }
    return rows;
}

QList<qsizetype> ChunkedOrder::chunksRead(std::int64_t steps) const
{
    const std::int64_t read = std::min(m_length, std::max<std::int64_t>(0, steps) * m_batch);
    QList<qsizetype> chunks;
    for (const auto& segment : m_segments) {
        if (segment.offset < read)
            chunks.append(segment.chunk);
    }
    std::sort(chunks.begin(), chunks.end());
    chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
    return chunks;
}

std::int64_t mostChunksRead(const DatasetManifest& manifest, std::int64_t positions)
{
    auto samples = manifest.chunkSamples();
    std::sort(samples.begin(), samples.end());
    std::int64_t chunks = 1, covered = 1;
    for (const auto count : samples) {
        if (covered >= positions || chunks >= samples.size())
            break;
        covered += count;
        ++chunks;
    }
    return chunks;
}

QList<Digest> chunksOfTask(const ShardTask& task, const DatasetManifest& manifest)
{
    QList<Digest> digests;
    for (const auto chunk : ChunkedOrder(task, manifest.chunkSamples()).chunksRead(task.localSteps))
        digests.append(manifest.chunks[chunk].sha256);
    return digests;
}

} // namespace tessera::core
