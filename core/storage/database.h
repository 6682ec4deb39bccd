#pragma once

#include "../error.h"
#include "databasetypes.h"

#include <QByteArray>
#include <QList>
#include <QString>

#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>

namespace tessera::core::storage {

namespace detail {
class Connection;
class StatementBackend;
} // namespace detail

template<typename T> struct IsOptional : std::false_type { };
template<typename T> struct IsOptional<std::optional<T>> : std::true_type { };

// Whether a Broker/Database value names a PostgreSQL database (postgresql:// or postgres://)
// rather than a SQLite file.
bool isPostgresUri(const QString& location);

// A numbered schema change, applied once, in order, in its own transaction.
struct Migration {
    int version = 0;
    QString name;
    QString sql;
};

// Reads migrations from files named NNNN_name.sql in a folder (a Qt resource folder works too),
// as `engine` runs them: on PostgreSQL, postgresql/NNNN_name.sql replaces the one it names.
DbResult<QList<Migration>> loadMigrations(const QString& directory, Engine engine = Engine::SQLite);

class Database;

// A prepared statement. Bind parameters by 1-based index, step through rows, read columns.
class Statement {
public:
    Statement(Statement&& other) noexcept;
    Statement& operator=(Statement&& other) noexcept;
    ~Statement();

    Statement& bind(int index, std::int64_t value);
    Statement& bind(int index, double value);
    Statement& bind(int index, const QString& value);
    Statement& bind(int index, const QByteArray& blob);
    Statement& bindNull(int index);

    // true: a row is ready; false: done. Errors come back as DatabaseError.
    DbResult<bool> step();
    // Runs to completion, ignoring rows.
    DbStatus run();
    void reset();

    std::int64_t columnInt(int index) const;
    double columnDouble(int index) const;
    QString columnText(int index) const;
    QByteArray columnBlob(int index) const;
    bool columnIsNull(int index) const;

private:
    friend class Database;
    Statement(Database* database, std::unique_ptr<detail::StatementBackend> backend);

    Database* m_database = nullptr;
    std::unique_ptr<detail::StatementBackend> m_backend;
};

// A transaction that rolls back unless commit() is called: leaving a scope early (an error, a
// return) can never half-apply a change.
class Transaction {
public:
    Transaction(Transaction&& other) noexcept;
    Transaction& operator=(Transaction&&) = delete;
    ~Transaction();

    DbStatus commit();

private:
    friend class Database;
    explicit Transaction(Database* database);
    Database* m_database = nullptr;
};

// One connection, owned by one thread: open a Database per thread. `path` is a SQLite file (opened
// in WAL mode) or a postgresql:// URI. SQL is SQLite's and PostgreSQL's common part, with `?` for
// parameters (docs/STORE.md, "One SQL for both").
class Database {
public:
    static DbResult<std::unique_ptr<Database>> open(const QString& path, DatabaseOptions options = {});
    ~Database();
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;

    QString path() const { return m_path; } // a PostgreSQL URI without its password
    Engine engine() const;

    DbStatus execute(const QString& sql);
    DbResult<Statement> prepare(const QString& sql);
    DbResult<Transaction> begin();
    // Whether a transaction (begin(), or a BEGIN run by hand) is open.
    bool inTransaction() const;
    // The SQL that reads the text at `key` of a JSON object held in a TEXT column, where the two
    // engines' SQL differ (docs/STORE.md, "One SQL for both"): json_extract on SQLite, ->> on a
    // jsonb cast on PostgreSQL. `column` and `key` are the caller's constants, never input.
    QString jsonText(const QString& column, const QString& key) const;

    // Applies the migrations above the current schema_version in order, each in a transaction;
    // a failing one leaves the schema at the version before it.
    DbStatus migrate(const QList<Migration>& migrations);
    DbResult<int> schemaVersion();
    // SQLite's journal mode ("wal"); "postgresql" for a PostgreSQL connection.
    DbResult<QString> journalMode();

    std::int64_t lastInsertRowId() const;
    int changes() const;

private:
    Database(QString path, std::unique_ptr<detail::Connection> connection);
    void assertOwningThread() const;

    friend class Statement;
    friend class Transaction;

    QString m_path;
    std::unique_ptr<detail::Connection> m_connection;
    std::thread::id m_owner;
};

// Opens the database at path and brings its schema up to date with the migrations in a folder
// (":/migrations/node", ":/migrations/broker"): what every store does first.
Result<std::unique_ptr<Database>> openMigrated(const QString& path, const QString& migrations, DatabaseOptions options = {});

// Prepares sql and binds the arguments in order (int64, double, QString, QByteArray): the short
// form that stores use for one-off statements.
template<typename... Args> Result<Statement> query(Database& database, const QString& sql, const Args&... args)
{
    auto statement = database.prepare(sql);
    if (!statement)
        return statement.error().toError();
    int index = 0;
    (statement->bind(++index, args), ...);
    return std::move(statement).value();
}

// Runs a statement made by query() to completion.
template<typename... Args> Status execute(Database& database, const QString& sql, const Args&... args)
{
    auto statement = query(database, sql, args...);
    if (!statement)
        return statement.error();
    if (auto status = statement->run(); !status)
        return status.error().toError();
    return {};
}

// Steps a statement made by query() once: true when it produced a row.
inline Result<bool> fetch(Statement& statement)
{
    auto row = statement.step();
    if (!row)
        return row.error().toError();
    return *row;
}

// Steps a statement to its end and returns what read(statement) makes of each row; a row that
// read turns into std::nullopt is skipped.
template<typename Read> auto collect(Statement& statement, Read read)
{
    using Value = std::invoke_result_t<Read, Statement&>;
    using Item = typename std::conditional_t<IsOptional<Value>::value, Value, std::optional<Value>>::value_type;
    Result<QList<Item>> list = QList<Item> {};
    for (;;) {
        auto next = fetch(statement);
        if (!next)
            return Result<QList<Item>>(next.error());
        if (!*next)
            return list;
        if constexpr (IsOptional<Value>::value) {
            if (auto item = read(statement))
                list->append(std::move(*item));
        } else {
            list->append(read(statement));
        }
    }
}

} // namespace tessera::core::storage
