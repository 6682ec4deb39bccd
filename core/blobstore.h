#pragma once

#include "error.h"
#include "hash.h"

#include <QByteArray>
#include <QHash>
#include <QString>

#include <cstdint>
#include <memory>
#include <optional>

namespace tessera::core {

// Content-addressed files: blob <sha256> lives at DIR/<first two hex digits>/<sha256>. The broker
// keeps every blob its jobs need; a node's cache has a size limit and drops the least recently
// used blobs first. Writes are atomic (a temporary file renamed into place) and every blob is
// checked against its name before it is stored, so a crash or a lying peer never leaves a wrong
// file under a right name.
//
// Not thread-safe: one owner thread.
class BlobStore {
public:
    // sizeLimit 0: no limit.
    static Result<std::unique_ptr<BlobStore>> open(const QString& directory, std::int64_t sizeLimit = 0);

    bool contains(const Digest& digest) const;
    std::optional<std::int64_t> sizeOf(const Digest& digest) const;
    // The file of a blob, marked as just used.
    std::optional<QString> path(const Digest& digest);
    // The file of a stored blob, from any thread: it looks at the disk only (a blob's file exists
    // once it is whole), not at the store's books, and does not count as a use.
    std::optional<QString> storedFile(const Digest& digest) const;
    Result<QByteArray> read(const Digest& digest);
    Result<QByteArray> readRange(const Digest& digest, std::int64_t offset, std::int64_t length);
    // Stores bytes under their own SHA-256 and returns it.
    Result<Digest> put(const QByteArray& bytes);
    // Stores bytes under the SHA-256 the caller computed for them (on another thread, so that this
    // one does not hash them again; a null digest: hashed here): for this process's own results
    // only, never a peer's bytes.
    Result<Digest> put(const QByteArray& bytes, const Digest& computed);

    // A folder on the store's file system where any thread may write a file (named *.part: one a
    // crash leaves is removed when the store opens) for adopt() to take in without copying it.
    QString stagingDirectory() const;
    // Takes in a file this process wrote in stagingDirectory() under the SHA-256 the caller computed
    // for its bytes (its own results only, as put(bytes, computed)): renamed into place, so the
    // owner thread does no work in proportion to the file. The file is gone afterwards either way.
    Result<Digest> adopt(const QString& file, const Digest& computed);

    // Chunked upload: ranges must arrive in order, each is written and hashed as it comes, and the
    // last one checks the SHA-256 (so no call does work in proportion to the whole blob). An upload is
    // its uploader's own (keyed by uploader and digest: a stranger's half-upload of the same file
    // changes nothing for anyone else); one that starts again at offset 0 starts over. Uploads
    // idle for UploadIdleMs are dropped; an uploader has at most MaxUploadsPerUploader in progress
    // and MaxUploadBytesPerUploader declared. `now`: milliseconds, for the idle rule.
    static constexpr int MaxUploadsPerUploader = 8;
    static constexpr std::int64_t MaxUploadBytesPerUploader = 2LL * 1024 * 1024 * 1024;
    static constexpr std::int64_t UploadIdleMs = 10 * 60 * 1000;
    // A blob the store has already is, by default, complete at once (a cache filling itself). With
    // Stored::MustProve, the uploader proves it has the bytes: every range is sent and hashed as for a
    // new blob, but nothing is written, and only bytes that hash to the digest (of the stored size)
    // complete it (for a peer to whom completing grants reading the blob: a hash is no key to it).
    enum class UploadState { Incomplete, Complete };
    enum class Stored { IsComplete, MustProve };
    Result<UploadState> putRange(const Digest& digest, std::int64_t offset, std::int64_t totalSize, const QByteArray& bytes,
        const QString& uploader = {}, std::int64_t now = 0, Stored stored = Stored::IsComplete);
    std::int64_t uploadedBytes(const Digest& digest, const QString& uploader = {}) const;
    // Drops an upload in progress and its partial file (nothing when there is none).
    void abandonUpload(const Digest& digest, const QString& uploader = {});

    std::int64_t totalSize() const { return m_total; }
    std::int64_t sizeLimit() const { return m_limit; }
    // Deletes a stored blob; false when it is not here or is pinned.
    bool remove(const Digest& digest);
    // Blobs that eviction must not remove (in use by a running shard).
    void pin(const Digest& digest);
    void unpin(const Digest& digest);

    static constexpr std::int64_t MaxBlobBytes = std::int64_t(1) << 30;

    // What this store holds.
    QList<Digest> digests() const { return m_entries.keys(); }

    // Told of every blob stored and removed: a broker on a shared database keeps a copy of its
    // blobs there (broker::BlobMirror). A blob whose copy fails is not stored here either (the
    // write fails as a full disk would), so what the store holds, the copy holds.
    class Mirror {
    public:
        virtual ~Mirror() = default;
        virtual Status stored(const Digest& digest, const QString& file, std::int64_t size) = 0;
        virtual void removed(const Digest& digest) = 0;
    };
    void setMirror(Mirror* mirror) { m_mirror = mirror; }

private:
    BlobStore(QString directory, std::int64_t limit);
    QString fileOf(const Digest& digest) const;
    void touch(const Digest& digest);
    void evict();

    struct Entry {
        std::int64_t size = 0;
        std::int64_t lastUsed = 0;
        std::int64_t touchedAt = 0; // when the file's time was last set, in seconds
    };
    struct Upload {
        QString tempPath;
        std::int64_t received = 0;
        std::int64_t total = 0;
        QString uploader;
        std::int64_t touched = 0;
        std::shared_ptr<Sha256> hasher; // of the ranges so far
        bool proofOnly = false; // of a blob the store has: hashed, not written
    };
    static QString uploadKey(const QString& uploader, const Digest& digest);
    Status admitUpload(const QString& uploader, std::int64_t totalSize, std::int64_t now);
    void dropUpload(const QString& key);
    Result<UploadState> completeUpload(const Digest& digest, const Upload& upload);
    // A blob just taken in is copied to the mirror, or taken out again when it cannot be.
    Status mirrorStored(const Digest& digest, std::int64_t size);
    Mirror* m_mirror = nullptr;
    QString m_directory;
    std::int64_t m_limit = 0;
    std::int64_t m_total = 0;
    std::int64_t m_clock = 0;
    QHash<Digest, Entry> m_entries;
    QHash<QString, Upload> m_uploads; // by uploadKey
    QHash<Digest, int> m_pins;
};

} // namespace tessera::core
