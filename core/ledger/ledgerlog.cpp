#include "ledgerlog.h"

#include "../storage/database.h"

#include <QJsonDocument>

namespace tessera::core::ledger {

using storage::Statement;

namespace {

// The root of a perfect subtree from its 2^k hashes of one level (k >= 0).
Digest hashUp(QList<Digest> row)
{
    while (row.size() > 1) {
        QList<Digest> up;
        for (qsizetype i = 0; i + 1 < row.size(); i += 2)
            up.append(merkle::nodeHash(row[i], row[i + 1]));
        row = up;
    }
    return row.first();
}

} // namespace

LedgerLog::LedgerLog(storage::Database& database)
    : m_db(database)
{ }

QByteArray LedgerLog::leafBytes(const QJsonObject& entry)
{
    return QJsonDocument(entry).toJson(QJsonDocument::Compact);
}

QJsonObject LedgerLog::transferEntry(
    const QString& debit, const QString& credit, std::int64_t amount, const QString& cause, const QString& memo, std::int64_t at)
{
    return { { QStringLiteral("kind"), QStringLiteral("transfer") }, { QStringLiteral("debit"), debit },
        { QStringLiteral("credit"), credit }, { QStringLiteral("amount"), QString::number(amount) },
        { QStringLiteral("cause"), cause }, { QStringLiteral("memo"), memo }, { QStringLiteral("at"), qint64(at) } };
}

Result<std::int64_t> LedgerLog::backfill()
{
    // Asked first without the writer lock: at every start but the first, the log has begun.
    auto begun = count();
    if (!begun)
        return begun.error();
    if (*begun > 0) {
        if (auto linked = linkTransfers(); !linked)
            return linked.error();
        return std::int64_t(0);
    }
    auto transaction = m_db.begin();
    if (!transaction)
        return transaction.error().toError();
    auto logged = count();
    if (!logged)
        return logged.error();
    if (*logged > 0)
        return std::int64_t(0);
    auto rows = storage::query(
        m_db, QStringLiteral("SELECT debit, credit, amount, cause, memo, at, id FROM ledger_transfers ORDER BY id"));
    if (!rows)
        return rows.error();
    auto transfers = storage::collect(*rows, [](Statement& row) {
        return std::pair { transferEntry(row.columnText(0), row.columnText(1), row.columnInt(2), row.columnText(3),
                               row.columnText(4), row.columnInt(5)),
            row.columnInt(6) };
    });
    if (!transfers)
        return transfers.error();
    for (const auto& [entry, id] : *transfers) {
        auto appended = append(entry);
        if (!appended)
            return appended.error();
        if (auto linked
            = storage::execute(m_db, QStringLiteral("UPDATE ledger_transfers SET log_idx = ? WHERE id = ?"), *appended, id);
            !linked)
            return linked.error();
    }
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    return std::int64_t(transfers->size());
}

Status LedgerLog::linkTransfers()
{
    // Transfers logged before ledger_transfers.log_idx existed (migration 19): found by their
    // cause in the log's entries, once.
    auto unlinked = storage::query(
        m_db, QStringLiteral("SELECT COUNT(*) FROM (SELECT id FROM ledger_transfers WHERE log_idx IS NULL LIMIT 1) AS unlogged"));
    if (!unlinked)
        return unlinked.error();
    auto found = storage::fetch(*unlinked);
    if (!found)
        return found.error();
    const bool none = !*found || unlinked->columnInt(0) == 0;
    unlinked->reset();
    if (none)
        return {};
    auto transaction = m_db.begin();
    if (!transaction)
        return transaction.error().toError();
    auto rows = storage::query(m_db, QStringLiteral("SELECT idx, entry FROM ledger_log ORDER BY idx"));
    if (!rows)
        return rows.error();
    auto logged = storage::collect(*rows, [](Statement& row) {
        return std::pair { row.columnInt(0), QJsonDocument::fromJson(row.columnText(1).toUtf8()).object() };
    });
    if (!logged)
        return logged.error();
    for (const auto& [index, entry] : *logged) {
        if (entry.value(QStringLiteral("kind")).toString() != u"transfer")
            continue;
        if (auto status = storage::execute(m_db,
                QStringLiteral("UPDATE ledger_transfers SET log_idx = ? WHERE cause = ? AND log_idx IS NULL"), index,
                entry.value(QStringLiteral("cause")).toString());
            !status)
            return status;
    }
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    return {};
}

Result<std::optional<std::int64_t>> LedgerLog::indexOf(const QString& cause) const
{
    auto rows = storage::query(m_db, QStringLiteral("SELECT log_idx FROM ledger_transfers WHERE cause = ?"), cause);
    if (!rows)
        return rows.error();
    auto found = storage::fetch(*rows);
    if (!found)
        return found.error();
    std::optional<std::int64_t> index;
    if (*found && !rows->columnIsNull(0))
        index = rows->columnInt(0);
    rows->reset();
    return index;
}

Result<QStringList> LedgerLog::leaves(std::int64_t from, int limit) const
{
    auto rows = storage::query(
        m_db, QStringLiteral("SELECT entry FROM ledger_log WHERE idx >= ? ORDER BY idx LIMIT ?"), from, std::int64_t(limit));
    if (!rows)
        return rows.error();
    return storage::collect(*rows, [](Statement& row) { return row.columnText(0); });
}

namespace {

// Whether Qt writes the string into compact JSON as it is, between quotes: printable ASCII but
// the quote and the backslash.
bool plainJsonString(const QString& text)
{
    for (const QChar c : text) {
        if (c.unicode() < 0x20 || c.unicode() > 0x7e || c == u'"' || c == u'\\')
            return false;
    }
    return true;
}

} // namespace

QByteArray LedgerLog::transferLeaf(
    const QString& debit, const QString& credit, std::int64_t amount, const QString& cause, const QString& memo, std::int64_t at)
{
    // A transfer's leaf is written at every payment: written directly where Qt would write its
    // strings as they are (account names, causes and memos almost always are), the same bytes as
    // leafBytes(transferEntry(...)) (tst_ledger compares them).
    if (!plainJsonString(debit) || !plainJsonString(credit) || !plainJsonString(cause) || !plainJsonString(memo))
        return leafBytes(transferEntry(debit, credit, amount, cause, memo, at));
    QByteArray bytes;
    bytes.reserve(96 + debit.size() + credit.size() + cause.size() + memo.size());
    bytes.append("{\"amount\":\"").append(QByteArray::number(qint64(amount))).append("\",\"at\":");
    bytes.append(QByteArray::number(qint64(at))).append(",\"cause\":\"").append(cause.toLatin1());
    bytes.append("\",\"credit\":\"").append(credit.toLatin1()).append("\",\"debit\":\"").append(debit.toLatin1());
    bytes.append("\",\"kind\":\"transfer\",\"memo\":\"").append(memo.toLatin1()).append("\"}");
    return bytes;
}

Result<std::int64_t> LedgerLog::append(const QJsonObject& entry)
{
    return appendLeaf(leafBytes(entry));
}

Result<std::int64_t> LedgerLog::appendLeaf(const QByteArray& bytes)
{
    if (!m_db.inTransaction())
        return Error { QStringLiteral("log"), QStringLiteral("an entry is appended inside the transaction of what it records") };
    // Its index: one more than the last, read under the writer lock the transaction holds.
    auto last = count();
    if (!last)
        return last.error();
    const std::int64_t index = *last;
    if (auto status = storage::execute(m_db, QStringLiteral("INSERT INTO ledger_log (idx, entry, leaf_hash) VALUES (?, ?, ?)"),
            index, QString::fromUtf8(bytes), merkle::leafHash(bytes).toHex());
        !status)
        return status.error();
    if (auto status = storeFilledTiles(index); !status)
        return status.error();
    return index;
}

Status LedgerLog::storeFilledTiles(std::int64_t index)
{
    // Leaf `index` completes a tile of level L (a perfect subtree of 2^L leaves) where index + 1
    // is a multiple of 2^L; made from the 256 hashes of the stored level below it.
    for (int level = TileLevels; level < 63 && ((index + 1) & ((std::int64_t(1) << level) - 1)) == 0; level += TileLevels) {
        const std::int64_t tile = (index + 1) >> level; // tiles of this level so far
        const std::int64_t below = (index + 1) >> (level - TileLevels);
        auto hashes = stored(level - TileLevels, below - (std::int64_t(1) << TileLevels), below);
        if (!hashes)
            return hashes.error();
        if (auto status
            = storage::execute(m_db, QStringLiteral("INSERT INTO ledger_log_tiles (level, idx, hash) VALUES (?, ?, ?)"),
                std::int64_t(level), tile - 1, hashUp(*hashes).toHex());
            !status)
            return status;
    }
    return {};
}

Result<std::int64_t> LedgerLog::count() const
{
    auto rows = storage::query(m_db, QStringLiteral("SELECT COALESCE(MAX(idx) + 1, 0) FROM ledger_log"));
    if (!rows)
        return rows.error();
    auto found = storage::fetch(*rows);
    if (!found)
        return found.error();
    const std::int64_t size = *found ? rows->columnInt(0) : 0;
    rows->reset();
    return size;
}

std::int64_t LedgerLog::size() const
{
    return count().value_or(0);
}

Result<QList<Digest>> LedgerLog::stored(int level, std::int64_t from, std::int64_t to) const
{
    auto rows = level == 0
        ? storage::query(
            m_db, QStringLiteral("SELECT leaf_hash FROM ledger_log WHERE idx >= ? AND idx < ? ORDER BY idx"), from, to)
        : storage::query(m_db,
            QStringLiteral("SELECT hash FROM ledger_log_tiles WHERE level = ? AND idx >= ? AND idx < ? ORDER BY idx"),
            std::int64_t(level), from, to);
    if (!rows)
        return rows.error();
    auto hashes = storage::collect(*rows, [](Statement& row) { return Digest::fromHex(row.columnText(0)); });
    if (!hashes)
        return hashes.error();
    QList<Digest> digests;
    for (const auto& hash : *hashes) {
        if (!hash)
            return Error { QStringLiteral("log"), QStringLiteral("a stored hash is not one: %1").arg(hash.error().message) };
        digests.append(*hash);
    }
    if (digests.size() != to - from)
        return Error {
            QStringLiteral("log"),
            QStringLiteral("%1 hashes of level %2 stored from %3, not %4").arg(digests.size()).arg(level).arg(from).arg(to - from)
        };
    return digests;
}

Result<Digest> LedgerLog::subtree(int level, std::int64_t index) const
{
    if (level < 0 || level >= 63 || index < 0)
        return Error { QStringLiteral("subtree"), QStringLiteral("no subtree %1 at level %2").arg(index).arg(level) };
    // From the stored level at or below it: at most 2^(TileLevels - 1) hashes, hashed up.
    const int base = level / TileLevels * TileLevels;
    const std::int64_t width = std::int64_t(1) << (level - base);
    auto hashes = stored(base, index * width, (index + 1) * width);
    if (!hashes)
        return hashes.error();
    return hashUp(*hashes);
}

Result<QList<QJsonObject>> LedgerLog::entries(std::int64_t from, int limit) const
{
    auto rows = storage::query(
        m_db, QStringLiteral("SELECT entry FROM ledger_log WHERE idx >= ? ORDER BY idx LIMIT ?"), from, std::int64_t(limit));
    if (!rows)
        return rows.error();
    return storage::collect(*rows, [](Statement& row) { return QJsonDocument::fromJson(row.columnText(0).toUtf8()).object(); });
}

} // namespace tessera::core::ledger
