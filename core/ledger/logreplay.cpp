#include "logreplay.h"

#include "ledger.h"
#include "merkle.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>

#include <limits>

namespace tessera::core::ledger {

void Frontier::append(const Digest& leaf)
{
    // Adding a leaf merges the equal-sized subtrees at the right end, as binary addition carries.
    Digest carry = leaf;
    for (std::int64_t n = m_size; n & 1; n >>= 1) {
        carry = merkle::nodeHash(m_subtrees.back(), carry);
        m_subtrees.pop_back();
    }
    m_subtrees.push_back(carry);
    ++m_size;
}

Digest Frontier::root() const
{
    if (m_subtrees.empty())
        return merkle::emptyRoot();
    // MTH splits at the largest power of two: the largest subtree, then the root of the rest.
    Digest root = m_subtrees.back();
    for (auto it = m_subtrees.rbegin() + 1; it != m_subtrees.rend(); ++it)
        root = merkle::nodeHash(*it, root);
    return root;
}

void LogReplay::add(const QString& leaf)
{
    const std::int64_t index = m_frontier.size();
    const QByteArray bytes = leaf.toUtf8();
    m_frontier.append(merkle::leafHash(bytes));
    QJsonParseError error;
    const QJsonDocument document = QJsonDocument::fromJson(bytes, &error);
    const QJsonObject entry = document.object();
    if (error.error != QJsonParseError::NoError || !document.isObject()
        || QJsonDocument(entry).toJson(QJsonDocument::Compact) != bytes) {
        m_problems << QStringLiteral("entry %1 is not an entry's compact JSON").arg(index);
        return;
    }
    const QString kind = entry.value(QStringLiteral("kind")).toString();
    if (kind == u"transfer")
        addTransfer(index, entry);
    else if (kind == u"verdict")
        addVerdict(entry);
    else
        m_problems << QStringLiteral("entry %1 is of an unknown kind '%2'").arg(index).arg(kind);
}

void LogReplay::addTransfer(std::int64_t index, const QJsonObject& entry)
{
    ++m_transfers;
    const QString debit = entry.value(QStringLiteral("debit")).toString();
    const QString credit = entry.value(QStringLiteral("credit")).toString();
    const QString cause = entry.value(QStringLiteral("cause")).toString();
    bool ok = false;
    const std::int64_t amount = entry.value(QStringLiteral("amount")).toString().toLongLong(&ok);
    if (!ok || amount <= 0 || debit.isEmpty() || credit.isEmpty() || debit == credit || cause.isEmpty()) {
        m_problems << QStringLiteral("entry %1 is not a transfer that can be made").arg(index);
        return;
    }
    if (m_causes.contains(cause)) {
        m_problems << QStringLiteral("entry %1 repeats the cause '%2' (a cause pays once)").arg(index).arg(cause);
        return;
    }
    m_causes.insert(cause);
    // Read, then written one at a time: a reference into the hash would dangle once it grows.
    const std::int64_t from = m_balances.value(debit, 0);
    const std::int64_t to = m_balances.value(credit, 0);
    if (debit != accounts::Mint && from < amount)
        m_problems << QStringLiteral("entry %1 takes %2 below zero").arg(index).arg(debit);
    if (from < std::numeric_limits<std::int64_t>::min() + amount || to > std::numeric_limits<std::int64_t>::max() - amount) {
        m_problems << QStringLiteral("entry %1 overflows an account").arg(index);
        return;
    }
    m_balances[debit] = from - amount;
    m_balances[credit] = to + amount;
    checkSlash(index, debit, cause);
}

void LogReplay::checkSlash(std::int64_t index, const QString& debit, const QString& cause)
{
    // A slash for a check (Stakes::slash: slash:CHECK:NODE[:unbonding]:honest|burned) takes from
    // that node's stake (or unbonding stake), and waits for the check's ruling against the node.
    static const QRegularExpression CheckSlash(QStringLiteral("^slash:(v[0-9a-f]{16}):(.+?)(:unbonding)?:(honest|burned)$"));
    if (!cause.startsWith(u"slash:v"))
        return;
    const auto match = CheckSlash.match(cause);
    if (!match.hasMatch()) {
        m_problems << QStringLiteral("entry %1 (%2) is a slash for a check in no form the broker writes").arg(index).arg(cause);
        return;
    }
    const QString node = match.captured(2);
    const QString account = match.captured(3).isEmpty() ? accounts::stake(node) : accounts::unbonding(node);
    if (debit != account)
        m_problems << QStringLiteral("entry %1 (%2) takes from %3, not from %4").arg(index).arg(cause, debit, account);
    m_unruledSlashes[match.captured(1)].insert(cause, { node, index });
}

void LogReplay::addVerdict(const QJsonObject& entry)
{
    ++m_verdicts;
    const QString check = entry.value(QStringLiteral("check")).toString();
    const QString loser = entry.value(QStringLiteral("loser")).toString();
    auto slashes = m_unruledSlashes.find(check);
    if (slashes == m_unruledSlashes.end())
        return;
    QStringList losers;
    if (loser == u"accused" || loser == u"both")
        losers << entry.value(QStringLiteral("accused")).toString();
    if (loser == u"verifier" || loser == u"both")
        losers << entry.value(QStringLiteral("verifier")).toString();
    slashes->removeIf([&](const auto& slash) { return losers.contains(slash.value().first); });
    if (slashes->isEmpty())
        m_unruledSlashes.erase(slashes);
}

QStringList LogReplay::problems() const
{
    QStringList all = m_problems;
    for (const auto& slashes : m_unruledSlashes) {
        for (auto it = slashes.cbegin(); it != slashes.cend(); ++it)
            all << QStringLiteral("entry %1 (%2) slashes for a check whose ruling does not name the node")
                       .arg(it.value().second)
                       .arg(it.key());
    }
    return all;
}

} // namespace tessera::core::ledger
