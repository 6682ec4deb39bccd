#pragma once

#include "../credits.h"
#include "../error.h"

#include <QJsonObject>
#include <QString>

namespace tessera::core::broker {

// What a broker's operator does to its books from the broker's machine (tessera-broker credit and
// balance), also while the broker runs: its database is SQLite in WAL mode, which takes a second
// writer, and the broker reads balances from it on every request. A network without a faucet
// gets its money this way: the operator credits the accounts of the owners it serves (for what
// they paid it, outside Tessera), and nodes earn theirs.
struct Credited {
    QString cause; // credit:N, the ledger's cause: RECEIPT fetches its signed receipt
    Credits balance; // the account's balance after it
};

// `store` is the broker's data folder (its broker.sqlite), or the postgresql:// URI of
// Broker/Database.
//
// New credits from the mint for an account (a client's or node's CURVE key, in Z85; or what a
// plaintext client names), with a memo that says why.
Result<Credited> creditAccount(
    const QString& store, const QString& account, Credits amount, const QString& memo, std::int64_t atMs);

// An account's balance, stake and unbonding stake: {account, balance, stake, unbonding}.
Result<QJsonObject> accountIn(const QString& store, const QString& account);

} // namespace tessera::core::broker
