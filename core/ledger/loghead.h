#pragma once

#include "../error.h"
#include "../hash.h"
#include "../signing.h"

#include <QJsonArray>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <cstdint>

namespace tessera::core::ledger {

// A signed head of the ledger's log (docs/LEDGER.md, "Heads"): the size and root of its tree, at a
// time, for one network, signed by a broker with signDocument.
struct LogHead {
    QString network;
    std::int64_t size = 0;
    Digest root;
    std::int64_t at = 0; // ms since the epoch
    QString signer; // base64 Ed25519 public key
    QJsonObject document; // the signed document itself

    static constexpr char Kind[] = "tessera-log-head";

    static LogHead sign(const QString& network, std::int64_t size, const Digest& root, std::int64_t at, const SigningKeys& keys);
    // A head from its document: the kind, every field and the signature checked; the error says
    // what is wrong.
    static Result<LogHead> read(const QJsonObject& document);
    // Two heads of one network that no history can join: the same size with two roots.
    bool conflicts(const LogHead& other) const;
};

// Proofs travel as arrays of hex hashes, nearest the leaf first.
QJsonArray proofToJson(const QList<Digest>& proof);
Result<QList<Digest>> proofFromJson(const QJsonValue& value);

// Whether `next` extends `kept` by `proof` (RFC 9162's consistency check; of one network, no
// smaller, and of the kept root where the size is the same). The error says what broke.
Status checkExtends(const LogHead& kept, const LogHead& next, const QList<Digest>& proof);

// A receipt's `log` (docs/LEDGER.md, "Receipts"): its entry is the receipt's transfer, its head is
// signed by the receipt's signer, and its proof puts the entry in the head's tree. The receipt's
// own signature is checked elsewhere (verifyDocument without `log`). Returns the head.
Result<LogHead> checkReceiptLog(const QJsonObject& receipt, const QJsonObject& log);

} // namespace tessera::core::ledger
