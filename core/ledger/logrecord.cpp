#include "logrecord.h"

#include "ledger.h"
#include "merkle.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QSet>

namespace tessera::core::ledger {

namespace {

QString text(const QJsonObject& object, const char* key)
{
    return object.value(QLatin1String(key)).toString();
}

bool ownAccount(const QString& account, const QString& node)
{
    return account == accounts::balance(node) || account == accounts::stake(node) || account == accounts::unbonding(node);
}

// What one entry adds to the summary.
void count(const QJsonObject& entry, const QString& node, RecordSummary& summary)
{
    ++summary.entries;
    if (text(entry, "kind") == u"verdict") {
        const QString loser = text(entry, "loser");
        const bool accused = text(entry, "accused") == node;
        const bool verifier = text(entry, "verifier") == node;
        if ((accused && (loser == u"accused" || loser == u"both")) || (verifier && (loser == u"verifier" || loser == u"both")))
            ++summary.disputesLost;
        else if (accused && text(entry, "state") == u"verified")
            ++summary.verified;
        else if (verifier && loser == u"none")
            ++summary.agreed;
        return;
    }
    const std::int64_t amount = text(entry, "amount").toLongLong();
    const QString cause = text(entry, "cause");
    if (text(entry, "credit") == accounts::balance(node) && (cause.startsWith(u"pay:") || cause.startsWith(u"verify:")))
        summary.earnedMicro += amount;
    if (ownAccount(text(entry, "debit"), node) && cause.startsWith(u"slash:")) {
        ++summary.slashes;
        summary.slashedMicro += amount;
    }
}

Error recordError(const QString& what)
{
    return Error { QStringLiteral("record"), what };
}

} // namespace

QJsonObject RecordSummary::toJson() const
{
    return { { QStringLiteral("entries"), entries }, { QStringLiteral("verified"), verified },
        { QStringLiteral("agreed"), agreed }, { QStringLiteral("disputesLost"), disputesLost },
        { QStringLiteral("slashes"), slashes }, { QStringLiteral("earned"), Credits::fromMicro(earnedMicro).toString() },
        { QStringLiteral("slashed"), Credits::fromMicro(slashedMicro).toString() } };
}

QString RecordSummary::earned() const
{
    return Credits::fromMicro(earnedMicro).toString();
}

bool concerns(const QJsonObject& entry, const QString& node)
{
    if (text(entry, "kind") == u"verdict")
        return text(entry, "accused") == node || text(entry, "verifier") == node;
    return ownAccount(text(entry, "debit"), node) || ownAccount(text(entry, "credit"), node);
}

Result<QJsonObject> makeRecord(const QString& node, const LogHead& head, const QStringList& leaves)
{
    if (leaves.size() != head.size)
        return recordError(QStringLiteral("%1 entries for a head of %2").arg(leaves.size()).arg(head.size));
    merkle::MemoryTree tree;
    for (const auto& leaf : leaves)
        tree.append(merkle::leafHash(leaf.toUtf8()));
    if (*merkle::root(tree, head.size) != head.root)
        return recordError(QStringLiteral("the log's entries do not hash to the head's root"));
    QJsonArray entries;
    for (qsizetype index = 0; index < leaves.size(); ++index) {
        if (!concerns(QJsonDocument::fromJson(leaves[index].toUtf8()).object(), node))
            continue;
        auto proof = merkle::inclusionProof(tree, index, head.size);
        if (!proof)
            return proof.error();
        entries.append(QJsonObject { { QStringLiteral("index"), qint64(index) }, { QStringLiteral("entry"), leaves[index] },
            { QStringLiteral("proof"), proofToJson(*proof) } });
    }
    return QJsonObject { { QStringLiteral("kind"), QLatin1String(RecordKind) }, { QStringLiteral("version"), 1 },
        { QStringLiteral("node"), node }, { QStringLiteral("head"), head.document }, { QStringLiteral("entries"), entries } };
}

Result<RecordSummary> verifyRecord(const QJsonObject& record, const QString& signer)
{
    if (text(record, "kind") != QLatin1String(RecordKind) || record.value(QStringLiteral("version")).toInt() != 1)
        return recordError(QStringLiteral("not a %1 of version 1").arg(QLatin1String(RecordKind)));
    const QString node = text(record, "node");
    if (node.isEmpty())
        return recordError(QStringLiteral("it names no node"));
    auto head = LogHead::read(record.value(QStringLiteral("head")).toObject());
    if (!head)
        return head.error();
    if (!signer.isEmpty() && head->signer != signer)
        return recordError(QStringLiteral("its head is signed by %1, not by the network's key %2").arg(head->signer, signer));
    RecordSummary summary;
    QSet<std::int64_t> seen;
    for (const auto& value : record.value(QStringLiteral("entries")).toArray()) {
        const QJsonObject item = value.toObject();
        const QJsonValue index = item.value(QStringLiteral("index"));
        if (!index.isDouble() || index.toDouble() != double(index.toInteger()) || seen.contains(index.toInteger()))
            return recordError(QStringLiteral("an entry's index is missing, not an integer or repeated"));
        seen.insert(index.toInteger());
        const QByteArray bytes = item.value(QStringLiteral("entry")).toString().toUtf8();
        auto proof = proofFromJson(item.value(QStringLiteral("proof")));
        if (!proof)
            return proof.error();
        if (!merkle::verifyInclusion(merkle::leafHash(bytes), index.toInteger(), head->size, *proof, head->root))
            return recordError(QStringLiteral("entry %1 is not in the head's tree").arg(index.toInteger()));
        const QJsonObject entry = QJsonDocument::fromJson(bytes).object();
        if (!concerns(entry, node))
            return recordError(QStringLiteral("entry %1 does not name the node").arg(index.toInteger()));
        count(entry, node, summary);
    }
    return summary;
}

} // namespace tessera::core::ledger
