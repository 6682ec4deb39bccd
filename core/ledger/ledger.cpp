#include "ledger.h"

#include "ledgerlog.h"

namespace tessera::core::ledger {

Ledger::Ledger(storage::Database& database)
    : m_db(database)
{ }

namespace {

Error databaseError(const storage::DatabaseError& error)
{
    return error.toError();
}

} // namespace

Result<bool> Ledger::hasCause(const QString& cause)
{
    auto statement = storage::query(m_db, QStringLiteral("SELECT 1 FROM ledger_transfers WHERE cause = ?"), cause);
    if (!statement)
        return statement.error();
    return storage::fetch(*statement);
}

Result<std::optional<Transfer>> Ledger::transferByCause(const QString& cause)
{
    auto statement = storage::query(
        m_db, QStringLiteral("SELECT id, debit, credit, amount, cause, memo, at FROM ledger_transfers WHERE cause = ?"), cause);
    if (!statement)
        return statement.error();
    auto row = storage::fetch(*statement);
    if (!row)
        return row.error();
    if (!*row)
        return std::optional<Transfer> {};
    return std::optional<Transfer>(Transfer { statement->columnInt(0), statement->columnText(1), statement->columnText(2),
        Credits::fromMicro(statement->columnInt(3)), statement->columnText(4), statement->columnText(5),
        statement->columnInt(6) });
}

Result<Credits> Ledger::balance(const QString& account)
{
    auto statement = storage::query(m_db, QStringLiteral("SELECT balance FROM ledger_accounts WHERE name = ?"), account);
    if (!statement)
        return statement.error();
    auto row = storage::fetch(*statement);
    if (!row)
        return row.error();
    return *row ? Credits::fromMicro(statement->columnInt(0)) : Credits {};
}

Result<Applied> Ledger::mint(const QString& credit, Credits amount, const QString& cause, std::int64_t atMs)
{
    return transfer(accounts::Mint, credit, amount, cause, QStringLiteral("minted"), atMs);
}

Result<Applied> Ledger::transfer(
    const QString& debit, const QString& credit, Credits amount, const QString& cause, const QString& memo, std::int64_t atMs)
{
    if (amount.micro() <= 0)
        return Error { QStringLiteral("amount"),
            QStringLiteral("a transfer moves a positive amount, not %1").arg(amount.toString()) };
    if (debit == credit)
        return Error { QStringLiteral("credit"), QStringLiteral("a transfer needs two different accounts") };
    if (cause.isEmpty())
        return Error { QStringLiteral("cause"), QStringLiteral("every transfer names its cause") };
    if (memo.size() > MaxMemoLength) // its log entry travels in one message's header (docs/LEDGER.md)
        return transfer(debit, credit, amount, cause, memo.left(MaxMemoLength - 3) + QStringLiteral("..."), atMs);
    if (m_db.inTransaction())
        return apply(debit, credit, amount, cause, memo, atMs);
    // A transaction of its own: what it reads (an earlier transfer, a balance) stays true until it
    // commits, whichever process shares the database.
    auto transaction = m_db.begin();
    if (!transaction)
        return databaseError(transaction.error());
    auto applied = apply(debit, credit, amount, cause, memo, atMs);
    if (!applied)
        return applied;
    if (auto status = transaction->commit(); !status)
        return databaseError(status.error());
    return applied;
}

Result<Applied> Ledger::apply(
    const QString& debit, const QString& credit, Credits amount, const QString& cause, const QString& memo, std::int64_t atMs)
{
    // An earlier transfer with this cause: the same one again is a harmless retry.
    auto earlier = m_db.prepare(QStringLiteral("SELECT debit, credit, amount FROM ledger_transfers WHERE cause = ?"));
    if (!earlier)
        return databaseError(earlier.error());
    earlier->bind(1, cause);
    auto found = earlier->step();
    if (!found)
        return databaseError(found.error());
    if (*found) {
        if (earlier->columnText(0) != debit || earlier->columnText(1) != credit || earlier->columnInt(2) != amount.micro())
            return Error { QStringLiteral("cause"), QStringLiteral("'%1' already paid something else").arg(cause) };
        return Applied::Before;
    }

    auto current = balance(debit);
    if (!current)
        return current.error();
    if (debit != accounts::Mint && *current < amount)
        return Error { QStringLiteral("amount"),
            QStringLiteral("%1 holds %2 credits, less than the %3 to move").arg(debit, current->toString(), amount.toString()) };
    auto creditBalance = balance(credit);
    if (!creditBalance)
        return creditBalance.error();
    if (!creditBalance->checkedAdd(amount) || !current->checkedSubtract(amount))
        return Error { QStringLiteral("amount"), QStringLiteral("the transfer would overflow an account") };

    if (auto status = m_db.execute(QStringLiteral("SAVEPOINT ledger_transfer")); !status)
        return databaseError(status.error());
    auto rollback = [&](const storage::DatabaseError& error) -> Result<Applied> {
        (void)m_db.execute(QStringLiteral("ROLLBACK TO ledger_transfer"));
        (void)m_db.execute(QStringLiteral("RELEASE ledger_transfer"));
        return databaseError(error);
    };
    for (const auto& account : { debit, credit }) {
        auto ensure
            = m_db.prepare(QStringLiteral("INSERT INTO ledger_accounts (name, balance) VALUES (?, 0) ON CONFLICT DO NOTHING"));
        if (!ensure)
            return rollback(ensure.error());
        ensure->bind(1, account);
        if (auto status = ensure->run(); !status)
            return rollback(status.error());
    }
    // The log's leaf (docs/LEDGER.md, "Entries"), in the same savepoint: the log and the books
    // never disagree.
    auto logged = LedgerLog(m_db).appendLeaf(LedgerLog::transferLeaf(debit, credit, amount.micro(), cause, memo, atMs));
    if (!logged) {
        (void)m_db.execute(QStringLiteral("ROLLBACK TO ledger_transfer"));
        (void)m_db.execute(QStringLiteral("RELEASE ledger_transfer"));
        return logged.error();
    }
    auto insert = m_db.prepare(QStringLiteral(
        "INSERT INTO ledger_transfers (debit, credit, amount, cause, memo, at, log_idx) VALUES (?, ?, ?, ?, ?, ?, ?)"));
    if (!insert)
        return rollback(insert.error());
    insert->bind(1, debit).bind(2, credit).bind(3, amount.micro()).bind(4, cause).bind(5, memo).bind(6, atMs).bind(7, *logged);
    if (auto status = insert->run(); !status)
        return rollback(status.error());
    for (const auto& [account, delta] : { std::pair { debit, -amount.micro() }, std::pair { credit, amount.micro() } }) {
        auto update = m_db.prepare(QStringLiteral("UPDATE ledger_accounts SET balance = balance + ? WHERE name = ?"));
        if (!update)
            return rollback(update.error());
        update->bind(1, delta).bind(2, account);
        if (auto status = update->run(); !status)
            return rollback(status.error());
    }
    if (auto status = m_db.execute(QStringLiteral("RELEASE ledger_transfer")); !status)
        return rollback(status.error());
    return Applied::Now;
}

Result<QList<Transfer>> Ledger::history(const QString& account)
{
    auto statement = m_db.prepare(QStringLiteral(
        "SELECT id, debit, credit, amount, cause, memo, at FROM ledger_transfers WHERE debit = ? OR credit = ? ORDER BY id"));
    if (!statement)
        return databaseError(statement.error());
    statement->bind(1, account).bind(2, account);
    QList<Transfer> transfers;
    for (;;) {
        auto row = statement->step();
        if (!row)
            return databaseError(row.error());
        if (!*row)
            break;
        transfers.append({ statement->columnInt(0), statement->columnText(1), statement->columnText(2),
            Credits::fromMicro(statement->columnInt(3)), statement->columnText(4), statement->columnText(5),
            statement->columnInt(6) });
    }
    return transfers;
}

Status Ledger::checkInvariants()
{
    auto sum = m_db.prepare(
        QStringLiteral("SELECT COALESCE(SUM(balance), 0), COALESCE(MIN(CASE WHEN name <> 'mint' THEN balance END), 0) "
                       "FROM ledger_accounts"));
    if (!sum)
        return databaseError(sum.error());
    if (auto row = sum->step(); !row)
        return databaseError(row.error());
    if (sum->columnInt(0) != 0)
        return Error { QStringLiteral("ledger"),
            QStringLiteral("the balances sum to %1 micro-credits, not 0").arg(sum->columnInt(0)) };
    if (sum->columnInt(1) < 0)
        return Error { QStringLiteral("ledger"), QStringLiteral("an account other than the mint is negative") };
    auto mismatch
        = m_db.prepare(QStringLiteral("SELECT a.name FROM ledger_accounts a WHERE a.balance <> "
                                      "COALESCE((SELECT SUM(amount) FROM ledger_transfers WHERE credit = a.name), 0) - "
                                      "COALESCE((SELECT SUM(amount) FROM ledger_transfers WHERE debit = a.name), 0) LIMIT 1"));
    if (!mismatch)
        return databaseError(mismatch.error());
    auto row = mismatch->step();
    if (!row)
        return databaseError(row.error());
    if (*row)
        return Error { QStringLiteral("ledger"),
            QStringLiteral("the balance of %1 does not match its transfers").arg(mismatch->columnText(0)) };
    return {};
}

} // namespace tessera::core::ledger
