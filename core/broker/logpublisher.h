#pragma once

#include "../clock.h"
#include "../error.h"
#include "../ledger/loghead.h"
#include "../signing.h"

#include <QHash>
#include <QJsonObject>
#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::core::storage {
class Database;
}

namespace tessera::core::broker {

// What the broker says about the ledger's log (docs/LEDGER.md, "Asking for the log"): its signed
// heads, a new one every intervalMs while entries arrive, and the proofs, entries and receipts'
// `log` that the LOG-* messages and RECEIPT answer with.
class LogPublisher {
public:
    LogPublisher(storage::Database& database, const SigningKeys& signing, const QString& network, const Clock& clock,
        std::int64_t intervalMs);

    // Signs a new head when the log grew and the last head is intervalMs old (the broker's tick).
    void tick();
    // The newest head, signed anew when it is smaller than atLeast (a head the asker holds).
    Result<ledger::LogHead> head(std::int64_t atLeast = 0);

    // LOG-HEAD: `head`, and with `from` the consistency proof from the tree of `from` leaves.
    Result<QJsonObject> headReply(std::optional<std::int64_t> from);
    // LOG-PROOF: the entry at index and its inclusion proof, in the tree of `size` leaves or (none)
    // in the newest head's, which comes with it.
    Result<QJsonObject> proofReply(std::int64_t index, std::optional<std::int64_t> size);
    // LOG-CONSISTENCY.
    Result<QJsonObject> consistencyReply(std::int64_t from, std::int64_t to);
    // LOG-ENTRIES: up to `limit` leaves from `from`, fewer where the header would pass 48 KiB.
    Result<QJsonObject> entriesReply(std::int64_t from, int limit);
    // A receipt's `log`: the transfer's index, entry, inclusion proof and head.
    Result<QJsonObject> receiptLog(const QString& cause);

    std::int64_t intervalMs() const { return m_intervalMs; }

    static constexpr int MaxEntriesPerPage = 256;
    static constexpr qsizetype MaxEntryBytesPerPage = 48 * 1024;

private:
    Result<std::int64_t> logSize() const;
    Status signNew(std::int64_t size);
    Result<QList<Digest>> consistency(std::int64_t from, std::int64_t to);

    storage::Database& m_db;
    const SigningKeys& m_signing;
    QString m_network;
    const Clock& m_clock;
    std::int64_t m_intervalMs;
    std::optional<ledger::LogHead> m_head;
    // Consistency proofs to the newest head, by the size they start from (most askers hold the
    // head before it): one computed for all of them.
    QHash<std::int64_t, QList<Digest>> m_proofs;
};

} // namespace tessera::core::broker
