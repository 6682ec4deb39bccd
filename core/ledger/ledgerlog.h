#pragma once

#include "../error.h"
#include "../hash.h"
#include "merkle.h"

#include <QJsonObject>
#include <QList>
#include <QStringList>

#include <optional>

#include <cstdint>

namespace tessera::core::storage {
class Database;
}

namespace tessera::core::ledger {

// The ledger's log in the broker's database (docs/LEDGER.md): entries appended inside the caller's
// transaction (the transfer's), each a leaf of the log's Merkle tree, and the tree's hashes for
// roots and proofs: leaves, and the perfect subtrees of every eighth level (256, 65,536, ...
// leaves) stored as they fill, so a proof reads few hashes however long the log.
class LedgerLog final : public merkle::Subtrees {
public:
    explicit LedgerLog(storage::Database& database);

    // Appends an entry (its compact JSON is the leaf); inside the caller's transaction, whose
    // writer lock orders the entries of every broker of the database. Its index.
    Result<std::int64_t> append(const QJsonObject& entry);
    // The same for an entry's leaf bytes (compact JSON, keys sorted).
    Result<std::int64_t> appendLeaf(const QByteArray& bytes);
    // The leaf's bytes for an entry (compact JSON, keys sorted).
    static QByteArray leafBytes(const QJsonObject& entry);
    // leafBytes(transferEntry(...)), made faster.
    static QByteArray transferLeaf(const QString& debit, const QString& credit, std::int64_t amount, const QString& cause,
        const QString& memo, std::int64_t at);
    // A transfer's entry (docs/LEDGER.md, "Entries"); amount in micro-credits.
    static QJsonObject transferEntry(const QString& debit, const QString& credit, std::int64_t amount, const QString& cause,
        const QString& memo, std::int64_t at);
    // A ledger kept before its log existed: its transfers become the log's first entries, in the
    // order they were made, once (only while the log is empty; under the writer lock, so one broker
    // of several does it). How many.
    Result<std::int64_t> backfill();

    std::int64_t size() const override; // entries (0 where the database cannot be read)
    Result<std::int64_t> count() const;
    Result<Digest> subtree(int level, std::int64_t index) const override;
    // Entries [from, from + limit), in order.
    Result<QList<QJsonObject>> entries(std::int64_t from, int limit) const;
    // Their leaves' exact bytes (UTF-8), as the log's messages carry them.
    Result<QStringList> leaves(std::int64_t from, int limit) const;
    // The leaf of the transfer with this cause; none where no transfer has it.
    Result<std::optional<std::int64_t>> indexOf(const QString& cause) const;

    static constexpr int TileLevels = 8; // a stored level every 8 (a tile of 256 hashes)

private:
    // Transfers logged before they kept their leaf's index learn it (once, at the broker's start).
    Status linkTransfers();
    // The stored hashes of `level` (0: leaves; else a multiple of TileLevels), [from, to).
    Result<QList<Digest>> stored(int level, std::int64_t from, std::int64_t to) const;
    // After leaf `index`: the tiles it completed.
    Status storeFilledTiles(std::int64_t index);

    storage::Database& m_db;
};

} // namespace tessera::core::ledger
