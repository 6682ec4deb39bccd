// The SQLite engine of Database (database.h): one connection to one file, in WAL mode.

#include "backend.h"

#include <sqlite3.h>

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

class SqliteStatement final : public StatementBackend {
public:
    SqliteStatement(sqlite3* handle, QString path, sqlite3_stmt* statement)
        : m_handle(handle)
        , m_path(std::move(path))
        , m_statement(statement)
    { }
    ~SqliteStatement() override { sqlite3_finalize(m_statement); }

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
};

class SqliteConnection final : public Connection {
public:
    SqliteConnection(QString path, sqlite3* handle)
        : m_path(std::move(path))
        , m_handle(handle)
    { }
    ~SqliteConnection() override { sqlite3_close_v2(m_handle); }

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
        sqlite3_stmt* statement = nullptr;
        const QByteArray utf8 = sql.toUtf8();
        const int code = sqlite3_prepare_v3(
            m_handle, utf8.constData(), static_cast<int>(utf8.size()), SQLITE_PREPARE_PERSISTENT, &statement, nullptr);
        if (code != SQLITE_OK)
            return errorOf(m_handle, m_path, code, sql);
        return std::unique_ptr<StatementBackend>(std::make_unique<SqliteStatement>(m_handle, m_path, statement));
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
