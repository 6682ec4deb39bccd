#pragma once

#include "../error.h"
#include "loghead.h"

#include <QJsonObject>
#include <QString>
#include <QStringList>

#include <cstdint>

namespace tessera::core::ledger {

// A node's portable record (docs/LEDGER.md, "Portable records"): the entries of a network's log
// that name it (its payments, stake and slashes, and the rulings of checks it was part of), each
// with its inclusion proof, under one signed head. Another network checks it offline against the
// first network's signing key.
struct RecordSummary {
    int entries = 0;
    int verified = 0; // rulings that found its result right
    int agreed = 0; // checks it re-executed and agreed with
    int disputesLost = 0; // rulings against it
    int slashes = 0;
    std::int64_t earnedMicro = 0; // paid for shards and checks
    std::int64_t slashedMicro = 0;

    QJsonObject toJson() const;
    QString earned() const;
};

inline constexpr char RecordKind[] = "tessera-record";

// Whether a log entry names the node (its accounts, or a check it was part of).
bool concerns(const QJsonObject& entry, const QString& node);
// The record of `node` from a whole log's leaves [0, head.size), which must hash to head.root.
Result<QJsonObject> makeRecord(const QString& node, const LogHead& head, const QStringList& leaves);
// A record checked offline: its head signed by `signer` (base64; empty: by the key it names), and
// every entry in the head's tree and naming the node. What it shows.
Result<RecordSummary> verifyRecord(const QJsonObject& record, const QString& signer);

} // namespace tessera::core::ledger
