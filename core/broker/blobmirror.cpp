#include "blobmirror.h"

#include "../storage/database.h"

#include <QDir>
#include <QFile>
#include <QHash>
#include <QLoggingCategory>

namespace tessera::core::broker {

namespace {

Q_LOGGING_CATEGORY(lcMirror, "tessera.broker.blobs")

} // namespace

BlobMirror::BlobMirror(storage::Database& database, BlobStore& blobs)
    : m_db(database)
    , m_blobs(blobs)
{
    m_blobs.setMirror(this);
}

BlobMirror::~BlobMirror()
{
    m_blobs.setMirror(nullptr);
}

Result<bool> BlobMirror::has(const Digest& digest)
{
    auto row = storage::query(m_db, QStringLiteral("SELECT 1 FROM blob_copies WHERE blob = ? AND complete = 1"), digest.toHex());
    if (!row)
        return row.error();
    auto found = storage::fetch(*row);
    if (!found)
        return found.error();
    return *found;
}

Status BlobMirror::stored(const Digest& digest, const QString& file, std::int64_t size)
{
    auto present = has(digest);
    if (!present)
        return present.error();
    if (*present)
        return {};
    QFile in(file);
    if (!in.open(QIODevice::ReadOnly))
        return Error { QStringLiteral("blob"), QStringLiteral("cannot read %1 to copy it to the database").arg(file) };
    // Chunk by chunk, each its own statement (no transaction: the writer lock is not held for the
    // length of a large blob); the blob counts once `complete` is set, after its last chunk.
    const QString hex = digest.toHex();
    if (auto status = storage::execute(
            m_db, QStringLiteral("INSERT INTO blob_copies (blob, size) VALUES (?, ?) ON CONFLICT (blob) DO NOTHING"), hex, size);
        !status)
        return status;
    for (std::int64_t index = 0; index * ChunkBytes < size || (size == 0 && index == 0); ++index) {
        const QByteArray bytes = in.read(ChunkBytes);
        if (bytes.size() != std::min<std::int64_t>(ChunkBytes, size - index * ChunkBytes))
            return Error { QStringLiteral("blob"), QStringLiteral("%1 changed while it was copied").arg(file) };
        if (auto status = storage::execute(m_db,
                QStringLiteral("INSERT INTO blob_chunks (blob, idx, bytes) VALUES (?, ?, ?) ON CONFLICT (blob, idx) DO NOTHING"),
                hex, index, bytes);
            !status)
            return status;
        if (size == 0)
            break;
    }
    // Complete only with every byte there: a removal by another broker meanwhile, or chunks of an
    // earlier try of another size, leave it incomplete (and this store fails).
    auto completed = storage::execute(m_db,
        QStringLiteral("UPDATE blob_copies SET complete = 1 WHERE blob = ?1 AND size = ?2 "
                       "AND (SELECT COALESCE(SUM(length(bytes)), 0) FROM blob_chunks WHERE blob = ?1) = ?2"),
        hex, size);
    if (!completed)
        return completed;
    if (m_db.changes() != 1)
        return Error { QStringLiteral("blob"), QStringLiteral("the database's copy of %1 is not whole").arg(hex) };
    return {};
}

void BlobMirror::removed(const Digest& digest)
{
    const QString hex = digest.toHex();
    // The copy goes first, its chunks after: a crash between leaves chunks no copy names, which
    // the next removal of the same blob (or nothing) clears; never a copy without its chunks.
    auto status = storage::execute(m_db, QStringLiteral("DELETE FROM blob_copies WHERE blob = ?"), hex);
    if (status)
        status = storage::execute(m_db, QStringLiteral("DELETE FROM blob_chunks WHERE blob = ?"), hex);
    if (!status)
        qCWarning(lcMirror).noquote() << "the database keeps its copy of blob" << hex << ":" << status.error().toString();
}

Status BlobMirror::fetch(const Digest& digest, std::int64_t size)
{
    const QString staging = m_blobs.stagingDirectory();
    QDir().mkpath(staging);
    const QString part = staging + QStringLiteral("/mirror-") + digest.toHex() + QStringLiteral(".part");
    QFile out(part);
    if (!out.open(QIODevice::WriteOnly | QIODevice::Truncate))
        return Error { QStringLiteral("blob"), QStringLiteral("cannot write %1").arg(part) };
    // Chunk by chunk: one chunk in memory at a time, however large the blob.
    auto chunk = m_db.prepare(QStringLiteral("SELECT bytes FROM blob_chunks WHERE blob = ? AND idx = ?"));
    if (!chunk)
        return chunk.error().toError();
    Sha256 hasher;
    std::int64_t written = 0;
    for (std::int64_t index = 0; written < size; ++index) {
        chunk->bind(1, digest.toHex()).bind(2, index);
        auto row = chunk->step();
        if (!row)
            return row.error().toError();
        if (!*row)
            break;
        const QByteArray bytes = chunk->columnBlob(0);
        chunk->reset();
        if (bytes.isEmpty())
            break;
        hasher.addData(bytes);
        written += bytes.size();
        if (out.write(bytes) != bytes.size())
            return Error { QStringLiteral("blob"), QStringLiteral("cannot write %1").arg(part) };
    }
    out.close();
    if (written != size || hasher.result() != digest) {
        QFile::remove(part);
        return Error { QStringLiteral("blob"),
            QStringLiteral("the database's copy of blob %1 is not that blob (%2 of %3 bytes)")
                .arg(digest.toHex())
                .arg(written)
                .arg(size) };
    }
    m_blobs.setMirror(nullptr); // it is in the database already
    auto adopted = m_blobs.adopt(part, digest);
    m_blobs.setMirror(this);
    if (!adopted)
        return adopted.error();
    return {};
}

Result<QHash<Digest, std::int64_t>> BlobMirror::copies()
{
    auto rows = storage::query(m_db, QStringLiteral("SELECT blob, size FROM blob_copies WHERE complete = 1"));
    if (!rows)
        return rows.error();
    auto listed = storage::collect(*rows, [](storage::Statement& row) -> std::optional<std::pair<Digest, std::int64_t>> {
        const auto digest = Digest::fromHex(row.columnText(0));
        return digest ? std::optional(std::pair { *digest, row.columnInt(1) }) : std::nullopt;
    });
    if (!listed)
        return listed.error();
    QHash<Digest, std::int64_t> sizes;
    for (const auto& [digest, size] : *listed)
        sizes.insert(digest, size);
    return sizes;
}

Result<int> BlobMirror::fetchMissing()
{
    auto copied = copies();
    if (!copied)
        return copied.error();
    // A copy that is not its blob is skipped (and said): one bad copy must not keep the network
    // from being taken over; a job that needs it fails on its own.
    int fetched = 0;
    for (auto it = copied->cbegin(); it != copied->cend(); ++it) {
        if (m_blobs.contains(it.key()))
            continue;
        if (auto status = fetch(it.key(), it.value()); !status) {
            qCWarning(lcMirror).noquote() << "blob" << it.key().toHex() << "not fetched:" << status.error().toString();
            continue;
        }
        ++fetched;
    }
    return fetched;
}

Result<int> BlobMirror::storeMissing()
{
    auto copied = copies();
    if (!copied)
        return copied.error();
    int count = 0;
    for (const auto& digest : m_blobs.digests()) {
        if (copied->contains(digest))
            continue;
        const auto file = m_blobs.storedFile(digest);
        const auto size = m_blobs.sizeOf(digest);
        if (!file || !size)
            continue;
        if (auto status = stored(digest, *file, *size); !status)
            return status.error();
        ++count;
    }
    return count;
}

} // namespace tessera::core::broker
