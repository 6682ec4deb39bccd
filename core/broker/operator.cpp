#include "operator.h"

#include "../ledger/ledger.h"
#include "../storage/database.h"

#include <QDir>
#include <QFile>

namespace tessera::core::broker {

namespace {

Result<std::unique_ptr<storage::Database>> openBooks(const QString& store)
{
    const bool shared = storage::isPostgresUri(store);
    const QString path = shared ? store : QDir(store).filePath(QStringLiteral("broker.sqlite"));
    if (!shared && !QFile::exists(path))
        return Error { QStringLiteral("data"),
            QStringLiteral("no broker database in %1 (--data or Broker/DataDirectory)").arg(store) };
    auto database = storage::openMigrated(path, QStringLiteral(":/migrations/broker"),
        storage::DatabaseOptions { 10'000, storage::DatabaseOptions::Synchronous::Full });
    if (!database)
        return database.error();
    return std::move(*database);
}

Status checkAccount(const QString& account)
{
    if (account.isEmpty() || account.size() > 200 || account.contains(u' '))
        return Error { QStringLiteral("account"),
            QStringLiteral("an account is a client's or node's key (tessera-job whoami prints it), not '%1'").arg(account) };
    return {};
}

} // namespace

Result<Credited> creditAccount(
    const QString& store, const QString& account, Credits amount, const QString& memo, std::int64_t atMs)
{
    if (auto status = checkAccount(account); !status)
        return status.error();
    if (amount.micro() <= 0)
        return Error { QStringLiteral("amount"), QStringLiteral("must be a positive number of credits") };
    auto database = openBooks(store);
    if (!database)
        return database.error();
    auto& db = **database;
    ledger::Ledger books(db);
    auto transaction = db.begin();
    if (!transaction)
        return transaction.error().toError();
    auto row
        = storage::query(db, QStringLiteral("INSERT INTO credits (account, amount, memo, at) VALUES (?, ?, ?, ?) RETURNING id"),
            account, amount.micro(), memo, atMs);
    if (!row)
        return row.error();
    if (auto found = storage::fetch(*row); !found || !*found)
        return Error { QStringLiteral("credits"), QStringLiteral("the credit was not recorded") };
    const QString cause = QStringLiteral("credit:%1").arg(row->columnInt(0));
    row->reset(); // the INSERT ... RETURNING ends here, before the transaction does
    auto moved = books.transfer(ledger::accounts::Mint, ledger::accounts::balance(account), amount, cause,
        memo.isEmpty() ? QStringLiteral("credited by the operator") : memo, atMs);
    if (!moved)
        return moved.error();
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    auto balance = books.balance(ledger::accounts::balance(account));
    if (!balance)
        return balance.error();
    return Credited { cause, *balance };
}

Result<QJsonObject> accountIn(const QString& store, const QString& account)
{
    if (auto status = checkAccount(account); !status)
        return status.error();
    auto database = openBooks(store);
    if (!database)
        return database.error();
    ledger::Ledger books(**database);
    QJsonObject held { { QStringLiteral("account"), account } };
    for (const auto& [name, ledgerAccount] : { std::pair { QStringLiteral("balance"), ledger::accounts::balance(account) },
             std::pair { QStringLiteral("stake"), ledger::accounts::stake(account) },
             std::pair { QStringLiteral("unbonding"), ledger::accounts::unbonding(account) } }) {
        auto amount = books.balance(ledgerAccount);
        if (!amount)
            return amount.error();
        held.insert(name, amount->toString());
    }
    return held;
}

} // namespace tessera::core::broker
