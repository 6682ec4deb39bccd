#include "logpublisher.h"

#include "../ledger/ledgerlog.h"
#include "../ledger/merkle.h"
#include "../storage/database.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QLoggingCategory>

namespace tessera::core::broker {

Q_LOGGING_CATEGORY(lcLogPublisher, "tessera.broker.log")

namespace {

Error outOfRange(const QString& field, const QString& what)
{
    return Error { field, what };
}

} // namespace

LogPublisher::LogPublisher(
    storage::Database& database, const SigningKeys& signing, const QString& network, const Clock& clock, std::int64_t intervalMs)
    : m_db(database)
    , m_signing(signing)
    , m_network(network)
    , m_clock(clock)
    , m_intervalMs(intervalMs)
{ }

Result<std::int64_t> LogPublisher::logSize() const
{
    return ledger::LedgerLog(m_db).count();
}

Status LogPublisher::signNew(std::int64_t size)
{
    ledger::LedgerLog log(m_db);
    auto root = ledger::merkle::root(log, size);
    if (!root)
        return root.error();
    m_head = ledger::LogHead::sign(m_network, size, *root, m_clock.nowMs(), m_signing);
    m_proofs.clear();
    return {};
}

void LogPublisher::tick()
{
    if (m_head && m_clock.nowMs() - m_head->at < m_intervalMs)
        return;
    auto size = logSize();
    if (!size) {
        qCWarning(lcLogPublisher).noquote() << "cannot read the ledger's log:" << size.error().toString();
        return;
    }
    if (m_head && *size == m_head->size)
        return;
    if (auto signedHead = signNew(*size); !signedHead)
        qCWarning(lcLogPublisher).noquote() << "cannot sign the ledger's log head:" << signedHead.error().toString();
}

Result<ledger::LogHead> LogPublisher::head(std::int64_t atLeast)
{
    if (!m_head || m_head->size < atLeast) {
        auto size = logSize();
        if (!size)
            return size.error();
        if (*size < atLeast)
            return outOfRange(
                QStringLiteral("from"), QStringLiteral("the log has %1 entries, fewer than %2").arg(*size).arg(atLeast));
        if (auto status = signNew(*size); !status)
            return status.error();
    }
    return *m_head;
}

Result<QList<Digest>> LogPublisher::consistency(std::int64_t from, std::int64_t to)
{
    const bool cacheable = m_head && to == m_head->size;
    if (cacheable) {
        if (auto cached = m_proofs.constFind(from); cached != m_proofs.cend())
            return *cached;
    }
    ledger::LedgerLog log(m_db);
    auto proof = ledger::merkle::consistencyProof(log, from, to);
    if (!proof)
        return proof.error();
    if (cacheable) {
        if (m_proofs.size() >= 1024)
            m_proofs.clear();
        m_proofs.insert(from, *proof);
    }
    return proof;
}

Result<QJsonObject> LogPublisher::headReply(std::optional<std::int64_t> from)
{
    if (from && *from < 0)
        return outOfRange(QStringLiteral("from"), QStringLiteral("a size is not negative"));
    auto newest = head(from.value_or(0));
    if (!newest)
        return newest.error();
    QJsonObject reply { { QStringLiteral("head"), newest->document } };
    if (from) {
        auto proof = consistency(*from, newest->size);
        if (!proof)
            return proof.error();
        reply.insert(QStringLiteral("consistency"), ledger::proofToJson(*proof));
    }
    return reply;
}

Result<QJsonObject> LogPublisher::proofReply(std::int64_t index, std::optional<std::int64_t> size)
{
    if (index < 0)
        return outOfRange(QStringLiteral("index"), QStringLiteral("a leaf's index is not negative"));
    std::optional<ledger::LogHead> newest;
    if (!size) {
        auto found = head(index + 1);
        if (!found)
            return Error { QStringLiteral("index"), QStringLiteral("the log has no entry %1").arg(index) };
        newest = *found;
    } else {
        auto logged = logSize();
        if (!logged)
            return logged.error();
        if (*size <= index || *size > *logged)
            return outOfRange(
                QStringLiteral("size"), QStringLiteral("not between %1 and the log's %2 entries").arg(index + 1).arg(*logged));
    }
    const std::int64_t treeSize = newest ? newest->size : *size;
    ledger::LedgerLog log(m_db);
    auto proof = ledger::merkle::inclusionProof(log, index, treeSize);
    if (!proof)
        return proof.error();
    auto leaves = log.leaves(index, 1);
    if (!leaves)
        return leaves.error();
    if (leaves->isEmpty())
        return Error { QStringLiteral("index"), QStringLiteral("the log has no entry %1").arg(index) };
    QJsonObject reply { { QStringLiteral("index"), qint64(index) }, { QStringLiteral("entry"), leaves->first() },
        { QStringLiteral("proof"), ledger::proofToJson(*proof) } };
    if (newest)
        reply.insert(QStringLiteral("head"), newest->document);
    else
        reply.insert(QStringLiteral("size"), qint64(treeSize));
    return reply;
}

Result<QJsonObject> LogPublisher::consistencyReply(std::int64_t from, std::int64_t to)
{
    auto logged = logSize();
    if (!logged)
        return logged.error();
    if (from < 0 || from > to)
        return outOfRange(QStringLiteral("from"), QStringLiteral("not between 0 and to"));
    if (to > *logged)
        return outOfRange(QStringLiteral("to"), QStringLiteral("the log has %1 entries").arg(*logged));
    auto proof = consistency(from, to);
    if (!proof)
        return proof.error();
    return QJsonObject { { QStringLiteral("from"), qint64(from) }, { QStringLiteral("to"), qint64(to) },
        { QStringLiteral("proof"), ledger::proofToJson(*proof) } };
}

Result<QJsonObject> LogPublisher::entriesReply(std::int64_t from, int limit)
{
    if (from < 0)
        return outOfRange(QStringLiteral("from"), QStringLiteral("an index is not negative"));
    if (limit < 1 || limit > MaxEntriesPerPage)
        return outOfRange(QStringLiteral("limit"), QStringLiteral("from 1 to %1").arg(MaxEntriesPerPage));
    ledger::LedgerLog log(m_db);
    auto size = log.count();
    if (!size)
        return size.error();
    auto leaves = log.leaves(from, limit);
    if (!leaves)
        return leaves.error();
    QJsonArray entries;
    qsizetype bytes = 0;
    for (const auto& leaf : *leaves) {
        bytes += QJsonDocument(QJsonArray { leaf }).toJson(QJsonDocument::Compact).size(); // as the header writes it
        if (!entries.isEmpty() && bytes > MaxEntryBytesPerPage)
            break;
        entries.append(leaf);
    }
    QJsonObject reply { { QStringLiteral("from"), qint64(from) }, { QStringLiteral("entries"), entries },
        { QStringLiteral("size"), qint64(*size) } };
    const std::int64_t next = from + entries.size();
    if (next < *size)
        reply.insert(QStringLiteral("next"), qint64(next));
    return reply;
}

Result<QJsonObject> LogPublisher::receiptLog(const QString& cause)
{
    auto index = ledger::LedgerLog(m_db).indexOf(cause);
    if (!index)
        return index.error();
    if (!index->has_value())
        return Error { QStringLiteral("cause"), QStringLiteral("no logged transfer has the cause '%1'").arg(cause) };
    return proofReply(**index, std::nullopt);
}

} // namespace tessera::core::broker
