#include "loghead.h"

#include "../credits.h"
#include "ledgerlog.h"
#include "merkle.h"

#include <QDateTime>
#include <QJsonDocument>

namespace tessera::core::ledger {

namespace {

Error headError(const QString& what)
{
    return Error { QStringLiteral("head"), what };
}

QString text(const QJsonObject& object, const char* key)
{
    return object.value(QLatin1String(key)).toString();
}

} // namespace

LogHead LogHead::sign(const QString& network, std::int64_t size, const Digest& root, std::int64_t at, const SigningKeys& keys)
{
    LogHead head;
    head.network = network;
    head.size = size;
    head.root = root;
    head.at = at;
    head.document = signDocument(
        QJsonObject {
            { QStringLiteral("kind"), QLatin1String(Kind) },
            { QStringLiteral("network"), network },
            { QStringLiteral("size"), qint64(size) },
            { QStringLiteral("root"), root.toHex() },
            { QStringLiteral("at"), qint64(at) },
        },
        keys);
    head.signer = text(head.document, "signer");
    return head;
}

Result<LogHead> LogHead::read(const QJsonObject& document)
{
    if (text(document, "kind") != QLatin1String(Kind))
        return headError(QStringLiteral("not a %1").arg(QLatin1String(Kind)));
    const QJsonValue size = document.value(QStringLiteral("size"));
    const QJsonValue at = document.value(QStringLiteral("at"));
    if (!size.isDouble() || size.toDouble() < 0 || size.toDouble() > 9e15 || size.toDouble() != double(size.toInteger()))
        return headError(QStringLiteral("size is not a count"));
    if (!at.isDouble() || at.toDouble() != double(at.toInteger()))
        return headError(QStringLiteral("at is not a time in milliseconds"));
    auto root = Digest::fromHex(text(document, "root"));
    if (!root || text(document, "root") != root->toHex())
        return headError(QStringLiteral("root is not 64 lowercase hex digits"));
    if (text(document, "network").isEmpty())
        return headError(QStringLiteral("it names no network"));
    if (document.size() != 7)
        return headError(QStringLiteral("it has fields other than kind, network, size, root, at, signer and signature"));
    if (auto signature = verifyDocument(document); !signature)
        return headError(QStringLiteral("its signature does not hold: %1").arg(signature.error().message));
    LogHead head;
    head.network = text(document, "network");
    head.size = size.toInteger();
    head.root = *root;
    head.at = at.toInteger();
    head.signer = text(document, "signer");
    head.document = document;
    return head;
}

bool LogHead::conflicts(const LogHead& other) const
{
    return network == other.network && size == other.size && root != other.root;
}

QJsonArray proofToJson(const QList<Digest>& proof)
{
    QJsonArray array;
    for (const auto& hash : proof)
        array.append(hash.toHex());
    return array;
}

Result<QList<Digest>> proofFromJson(const QJsonValue& value)
{
    if (!value.isArray() || value.toArray().size() > 128)
        return Error { QStringLiteral("proof"), QStringLiteral("not an array of at most 128 hashes") };
    QList<Digest> proof;
    for (const auto& item : value.toArray()) {
        auto hash = Digest::fromHex(item.toString());
        if (!hash || item.toString() != hash->toHex())
            return Error { QStringLiteral("proof"), QStringLiteral("a hash is not 64 lowercase hex digits") };
        proof.append(*hash);
    }
    return proof;
}

Status checkExtends(const LogHead& kept, const LogHead& next, const QList<Digest>& proof)
{
    if (next.network != kept.network)
        return headError(QStringLiteral("of network %1, not %2").arg(next.network, kept.network));
    if (next.size < kept.size)
        return headError(QStringLiteral("the log shrank from %1 entries to %2").arg(kept.size).arg(next.size));
    if (next.size == kept.size && next.root != kept.root)
        return headError(QStringLiteral("two heads of %1 entries with different roots (a split view)").arg(next.size));
    if (!merkle::verifyConsistency(kept.size, next.size, kept.root, next.root, proof))
        return headError(QStringLiteral("the tree of %1 entries does not extend the tree of %2 that was signed before")
                             .arg(next.size)
                             .arg(kept.size));
    return {};
}

Result<LogHead> checkReceiptLog(const QJsonObject& receipt, const QJsonObject& log)
{
    auto head = LogHead::read(log.value(QStringLiteral("head")).toObject());
    if (!head)
        return head.error();
    if (head->signer != text(receipt, "signer"))
        return headError(QStringLiteral("signed by %1, not by the receipt's signer").arg(head->signer));
    const QString entryText = log.value(QStringLiteral("entry")).toString();
    const QByteArray entryBytes = entryText.toUtf8();
    const QJsonObject entry = QJsonDocument::fromJson(entryBytes).object();
    auto amount = Credits::parse(text(receipt, "amount"));
    const QDateTime at = QDateTime::fromString(text(receipt, "at"), Qt::ISODateWithMs);
    if (!amount || !at.isValid())
        return Error { QStringLiteral("receipt"), QStringLiteral("its amount or time does not read") };
    const QJsonObject expected = LedgerLog::transferEntry(text(receipt, "debit"), text(receipt, "credit"), amount->micro(),
        text(receipt, "cause"), text(receipt, "memo"), at.toMSecsSinceEpoch());
    if (entry != expected || LedgerLog::leafBytes(expected) != entryBytes)
        return Error { QStringLiteral("entry"), QStringLiteral("the log's entry is not the receipt's transfer") };
    const QJsonValue index = log.value(QStringLiteral("index"));
    if (!index.isDouble() || index.toDouble() != double(index.toInteger()) || index.toInteger() < 0)
        return Error { QStringLiteral("index"), QStringLiteral("not a leaf's index") };
    auto proof = proofFromJson(log.value(QStringLiteral("proof")));
    if (!proof)
        return proof.error();
    if (!merkle::verifyInclusion(merkle::leafHash(entryBytes), index.toInteger(), head->size, *proof, head->root))
        return Error { QStringLiteral("proof"),
            QStringLiteral("entry %1 is not in the tree of the head's %2 entries").arg(index.toInteger()).arg(head->size) };
    return head;
}

} // namespace tessera::core::ledger
