#pragma once

#include "../blobstore.h"
#include "../error.h"

#include <QHash>

#include <cstdint>

namespace tessera::core::storage {
class Database;
}

namespace tessera::core::broker {

// The copy of a broker's blobs in a database that several brokers share (docs/STORE.md, "Blobs"):
// every blob the store takes in is written here in chunks before it counts as stored, every blob
// it removes goes here too, and a broker that takes the network over fetches what its own folder
// lacks. Only on PostgreSQL (a broker on SQLite is the only one of its network).
class BlobMirror final : public BlobStore::Mirror {
public:
    BlobMirror(storage::Database& database, BlobStore& blobs);
    ~BlobMirror() override;

    Status stored(const Digest& digest, const QString& file, std::int64_t size) override;
    void removed(const Digest& digest) override;

    // Copies every blob of the database the local store lacks into it (a takeover, a broker
    // whose data folder is new); how many.
    Result<int> fetchMissing();
    // Copies every local blob the database lacks (blobs stored before the broker ran on it).
    Result<int> storeMissing();

    static constexpr std::int64_t ChunkBytes = 1 << 20;

private:
    Result<bool> has(const Digest& digest);
    // The database's whole copies: each blob's size.
    Result<QHash<Digest, std::int64_t>> copies();
    Status fetch(const Digest& digest, std::int64_t size);

    storage::Database& m_db;
    BlobStore& m_blobs;
};

} // namespace tessera::core::broker
