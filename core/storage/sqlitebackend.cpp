// The SQLite engine of Database (database.h): one connection to one file, in WAL mode.

#include "backend.h"

#include <sqlite3.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessera::core::storage::detail {

namespace {

ErrorKind kindOf(int code)
{
    switch (code & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return ErrorKind::Busy;
    case SQLITE_FULL:
        return ErrorKind::Full;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return ErrorKind::Corrupt;
    case SQLITE_READONLY:
        return ErrorKind::ReadOnly;
    case SQLITE_CANTOPEN:
        return ErrorKind::CannotOpen;
    case SQLITE_CONSTRAINT:
        return ErrorKind::Constraint;
    case SQLITE_MISUSE:
        return ErrorKind::Misuse;
    default:
        return ErrorKind::Other;
    }
}

// The connection's last error (or `code`'s words where there is no connection).
DatabaseError errorOf(sqlite3* handle, const QString& path, int code, const QString& context)
{
    const int extended = handle ? sqlite3_extended_errcode(handle) : code;
    const auto kind = kindOf(extended ? extended : code);
    const QString message = handle ? QString::fromUtf8(sqlite3_errmsg(handle)) : QString::fromUtf8(sqlite3_errstr(code));
    return DatabaseError { kind, extended ? extended : code, describe(path, message, kind, context) };
}

// Prepared statements kept for their SQL's next use: a broker runs the same few dozen statements
// all day, and preparing one costs as much as running it (docs/PERFORMANCE.md, "The ledger's log").
// Shared by the connection and its statements, so a statement that outlives the connection
// finalizes itself.
struct StatementCache {
    static constexpr int MaxTexts = 512;
    static constexpr std::size_t MaxIdlePerText = 4;
    bool open = true;
    std::unordered_map<std::string, std::vector<sqlite3_stmt*>> idle;

    sqlite3_stmt* take(const std::string& sql)
    {
        auto found = idle.find(sql);
        if (found == idle.end() || found->second.empty())
            return nullptr;
        sqlite3_stmt* statement = found->second.back();
        found->second.pop_back();
        return statement;
    }
    void giveBack(const std::string& sql, sqlite3_stmt* statement)
    {
        if (!statement) // SQL of no statement (only a comment) prepares to none
            return;
        sqlite3_reset(statement);
        sqlite3_clear_bindings(statement);
        auto& kept = idle[sql];
        if (!open || kept.size() >= MaxIdlePerText || idle.size() > MaxTexts) {
            sqlite3_finalize(statement);
            return;
        }
        kept.push_back(statement);
    }
    void close()
    {
        open = false;
        for (auto& [sql, statements] : idle) {
            for (auto* statement : statements)
                sqlite3_finalize(statement);
        }
        idle.clear();
    }
};

class SqliteStatement final : public StatementBackend {
public:
    SqliteStatement(
        sqlite3* handle, QString path, sqlite3_stmt* statement, std::shared_ptr<StatementCache> cache, std::string sql)
        : m_handle(handle)
        , m_path(std::move(path))
        , m_statement(statement)
        , m_cache(std::move(cache))
        , m_sql(std::move(sql))
    { }
    ~SqliteStatement() override { m_cache->giveBack(m_sql, m_statement); }

    void bind(int index, std::int64_t value) override { sqlite3_bind_int64(m_statement, index, value); }
    void bind(int index, double value) override { sqlite3_bind_double(m_statement, index, value); }
    void bind(int index, const QString& value) override
    {
        const QByteArray utf8 = value.toUtf8();
        sqlite3_bind_text(m_statement, index, utf8.constData(), static_cast<int>(utf8.size()), SQLITE_TRANSIENT);
    }
    void bind(int index, const QByteArray& blob) override
    {
        sqlite3_bind_blob64(m_statement, index, blob.constData(), static_cast<sqlite3_uint64>(blob.size()), SQLITE_TRANSIENT);
    }
    void bindNull(int index) override { sqlite3_bind_null(m_statement, index); }

    DbResult<bool> step() override
    {
        const int code = sqlite3_step(m_statement);
        if (code == SQLITE_ROW)
            return true;
        if (code == SQLITE_DONE)
            return false;
        auto error = errorOf(m_handle, m_path, code, QString::fromUtf8(sqlite3_sql(m_statement)));
        sqlite3_reset(m_statement);
        return error;
    }
    void reset() override
    {
        sqlite3_reset(m_statement);
        sqlite3_clear_bindings(m_statement);
    }

    std::int64_t columnInt(int index) const override { return sqlite3_column_int64(m_statement, index); }
    double columnDouble(int index) const override { return sqlite3_column_double(m_statement, index); }
    QString columnText(int index) const override
    {
        const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(m_statement, index));
        return QString::fromUtf8(text, sqlite3_column_bytes(m_statement, index));
    }
    QByteArray columnBlob(int index) const override
    {
        const auto* data = static_cast<const char*>(sqlite3_column_blob(m_statement, index));
        return QByteArray(data, sqlite3_column_bytes(m_statement, index));
    }
    bool columnIsNull(int index) const override { return sqlite3_column_type(m_statement, index) == SQLITE_NULL; }

private:
    sqlite3* m_handle;
    QString m_path;
    sqlite3_stmt* m_statement;
    std::shared_ptr<StatementCache> m_cache;
    std::string m_sql;
};

class SqliteConnection final : public Connection {
public:
    SqliteConnection(QString path, sqlite3* handle)
        : m_path(std::move(path))
        , m_handle(handle)
    { }
    ~SqliteConnection() override
    {
        m_statements->close();
        sqlite3_close_v2(m_handle); // statements still out close it when they go
    }

    Engine engine() const override { return Engine::SQLite; }

    DbStatus execute(const QString& sql) override
    {
        char* errorText = nullptr;
        const int code = sqlite3_exec(m_handle, sql.toUtf8().constData(), nullptr, nullptr, &errorText);
        sqlite3_free(errorText);
        if (code != SQLITE_OK)
            return errorOf(m_handle, m_path, code, sql);
        return {};
    }

    DbResult<std::unique_ptr<StatementBackend>> prepare(const QString& sql) override
    {
        std::string utf8 = sql.toStdString();
        sqlite3_stmt* statement = m_statements->take(utf8);
        if (!statement) {
            const int code = sqlite3_prepare_v3(
                m_handle, utf8.c_str(), static_cast<int>(utf8.size()), SQLITE_PREPARE_PERSISTENT, &statement, nullptr);
            if (code != SQLITE_OK)
                return errorOf(m_handle, m_path, code, sql);
        }
        return std::unique_ptr<StatementBackend>(
            std::make_unique<SqliteStatement>(m_handle, m_path, statement, m_statements, std::move(utf8)));
    }

    // IMMEDIATE takes the write lock now, so a busy database fails here and not halfway through.
    QString beginSql() const override { return QStringLiteral("BEGIN IMMEDIATE"); }
    bool inTransaction() const override { return sqlite3_get_autocommit(m_handle) == 0; }
    std::int64_t lastInsertRowId() override { return sqlite3_last_insert_rowid(m_handle); }
    int changes() const override { return sqlite3_changes(m_handle); }

    DbResult<QString> journalMode() override
    {
        auto statement = prepare(QStringLiteral("PRAGMA journal_mode"));
        if (!statement)
            return statement.error();
        auto row = (*statement)->step();
        if (!row)
            return row.error();
        return (*statement)->columnText(0).toLower();
    }

    QString migrationSql(const QString& sql) const override { return sql; }

private:
    QString m_path;
    sqlite3* m_handle;
    std::shared_ptr<StatementCache> m_statements = std::make_shared<StatementCache>();
};

DbStatus configure(SqliteConnection& connection, const QString& path, const DatabaseOptions& options)
{
    // The first statement reads the header: a damaged or foreign file fails here, not later.
    auto mode = connection.journalMode();
    if (!mode)
        return mode.error();
    if (auto status = connection.execute(QStringLiteral("PRAGMA journal_mode=WAL")); !status)
        return status.error();
    mode = connection.journalMode();
    if (!mode)
        return mode.error();
    if (*mode != u"wal")
        return DatabaseError { ErrorKind::Other, 0,
            QStringLiteral("%1: cannot switch to WAL mode (journal mode is %2; is the folder on a network file system?)")
                .arg(path, *mode) };
    const QString synchronous = options.synchronous == DatabaseOptions::Synchronous::Full
        ? QStringLiteral("PRAGMA synchronous=FULL")
        : QStringLiteral("PRAGMA synchronous=NORMAL");
    for (const auto& pragma : { synchronous, QStringLiteral("PRAGMA foreign_keys=ON") }) {
        if (auto status = connection.execute(pragma); !status)
            return status.error();
    }
    return connection.execute(
        QStringLiteral("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, name TEXT NOT NULL, "
                       "applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now')))"));
}

} // namespace

DbResult<std::unique_ptr<Connection>> openSqlite(const QString& path, const DatabaseOptions& options)
{
    sqlite3* handle = nullptr;
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    const int code = sqlite3_open_v2(path.toUtf8().constData(), &handle, flags, nullptr);
    auto connection = std::make_unique<SqliteConnection>(path, handle);
    if (code != SQLITE_OK)
        return errorOf(handle, path, code, {});
    sqlite3_extended_result_codes(handle, 1);
    sqlite3_busy_timeout(handle, options.busyTimeoutMs);
    if (auto status = configure(*connection, path, options); !status)
        return status.error();
    return std::unique_ptr<Connection>(std::move(connection));
}

} // namespace tessera::core::storage::detail
