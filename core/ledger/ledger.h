#pragma once

#include "../credits.h"
#include "../error.h"
#include "../storage/database.h"

#include <QList>
#include <QString>

namespace tessera::core::ledger {

// Account names. Everything that holds credits is one of these.
namespace accounts {
inline const QString Mint = QStringLiteral("mint"); // the only account that goes negative: minus all ever minted
// Slashed stake that goes to nobody: the part no winner of a dispute receives. Never debited, so
// that nobody (a job's owner least of all) can profit from a slash it might cause.
inline const QString Burned = QStringLiteral("burned");
inline QString escrow(const QString& jobId)
{
    return QStringLiteral("escrow:") + jobId;
}
inline QString balance(const QString& owner)
{
    return QStringLiteral("balance:") + owner;
}
inline QString stake(const QString& nodeId)
{
    return QStringLiteral("stake:") + nodeId;
}
inline QString unbonding(const QString& nodeId)
{
    return QStringLiteral("unbonding:") + nodeId;
}
} // namespace accounts

struct Transfer {
    std::int64_t id = 0;
    QString debit;
    QString credit;
    Credits amount;
    QString cause;
    QString memo;
    std::int64_t at = 0;
};

enum class Applied { Now, Before }; // Before: the cause had paid already; nothing moved

// The broker's money, in its SQLite database (resources/migrations/broker/0002_ledger.sql).
// Transfers run inside the caller's transaction when there is one (a SAVEPOINT), so a payment
// commits or rolls back together with what caused it.
class Ledger {
public:
    explicit Ledger(storage::Database& database);

    // Moves amount from debit to credit. Idempotent per cause: a second call with the same cause
    // moves nothing and answers Before (and an error if it differs from the first). Refuses to
    // leave any account but the mint negative.
    Result<Applied> transfer(const QString& debit, const QString& credit, Credits amount, const QString& cause,
        const QString& memo, std::int64_t atMs);
    // A memo (a slash's reason may quote a job owner's words) is cut to this many characters.
    static constexpr qsizetype MaxMemoLength = 500;
    // New credits, from the mint (faucets, local and demo brokers).
    Result<Applied> mint(const QString& credit, Credits amount, const QString& cause, std::int64_t atMs);

    Result<Credits> balance(const QString& account);
    Result<QList<Transfer>> history(const QString& account);
    Result<bool> hasCause(const QString& cause);
    Result<std::optional<Transfer>> transferByCause(const QString& cause);

    // Sum of all balances is zero; no account but the mint is negative; each cached balance equals
    // its transfers. An error says which rule broke.
    Status checkInvariants();

private:
    // transfer() inside a transaction: checks and writes, behind a savepoint.
    Result<Applied> apply(const QString& debit, const QString& credit, Credits amount, const QString& cause, const QString& memo,
        std::int64_t atMs);

    storage::Database& m_db;
};

} // namespace tessera::core::ledger
