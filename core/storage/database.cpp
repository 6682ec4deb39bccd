#include "database.h"

#include <QDir>
#include <QFile>
#include <QRegularExpression>

#include <sqlite3.h>

#include <algorithm>

namespace tessera::core::storage {

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

QString adviceFor(ErrorKind kind)
{
    switch (kind) {
    case ErrorKind::Busy:
        return QStringLiteral(" (another process holds the database; is a second copy running?)");
    case ErrorKind::Full:
        return QStringLiteral(" (the disk is full; nothing was written)");
    case ErrorKind::Corrupt:
        return QStringLiteral(" (the file is damaged or is not a Tessera database)");
    case ErrorKind::ReadOnly:
        return QStringLiteral(" (the file or its folder is read-only)");
    case ErrorKind::CannotOpen:
        return QStringLiteral(" (check that the folder exists and is writable)");
    default:
        return {};
    }
}

} // namespace

DbResult<QList<Migration>> loadMigrations(const QString& directory)
{
    static const QRegularExpression fileName(QStringLiteral("^(\\d{4})_([A-Za-z0-9_\\-]+)\\.sql$"));
    const QDir dir(directory);
    if (!dir.exists())
        return DatabaseError { ErrorKind::CannotOpen, 0, QStringLiteral("no migrations folder %1").arg(directory) };

    QList<Migration> migrations;
    for (const auto& entry : dir.entryList({ QStringLiteral("*.sql") }, QDir::Files, QDir::Name)) {
        const auto match = fileName.match(entry);
        if (!match.hasMatch())
            return DatabaseError { ErrorKind::Other, 0,
                QStringLiteral("migration file %1 is not named NNNN_name.sql").arg(entry) };
        QFile file(dir.filePath(entry));
        if (!file.open(QIODevice::ReadOnly))
            return DatabaseError { ErrorKind::CannotOpen, 0, QStringLiteral("cannot read %1").arg(file.fileName()) };
        migrations.append({ match.captured(1).toInt(), match.captured(2), QString::fromUtf8(file.readAll()) });
    }
    for (qsizetype i = 0; i < migrations.size(); ++i) {
        if (migrations[i].version != i + 1)
            return DatabaseError { ErrorKind::Other, 0,
                QStringLiteral("migrations in %1 must be numbered 1, 2, 3, ... without gaps; found %2 at position %3")
                    .arg(directory, QString::number(migrations[i].version), QString::number(i + 1)) };
    }
    return migrations;
}

// --- Statement ---------------------------------------------------------------------------------

Statement::Statement(Database* database, sqlite3_stmt* statement)
    : m_database(database)
    , m_statement(statement)
{ }

Statement::Statement(Statement&& other) noexcept
    : m_database(std::exchange(other.m_database, nullptr))
    , m_statement(std::exchange(other.m_statement, nullptr))
{ }

Statement& Statement::operator=(Statement&& other) noexcept
{
    if (this != &other) {
        sqlite3_finalize(m_statement);
        m_database = std::exchange(other.m_database, nullptr);
        m_statement = std::exchange(other.m_statement, nullptr);
    }
    return *this;
}

Statement::~Statement()
{
    sqlite3_finalize(m_statement);
}

Statement& Statement::bind(int index, std::int64_t value)
{
    sqlite3_bind_int64(m_statement, index, value);
    return *this;
}

Statement& Statement::bind(int index, double value)
{
    sqlite3_bind_double(m_statement, index, value);
    return *this;
}

Statement& Statement::bind(int index, const QString& value)
{
    const QByteArray utf8 = value.toUtf8();
    sqlite3_bind_text(m_statement, index, utf8.constData(), static_cast<int>(utf8.size()), SQLITE_TRANSIENT);
    return *this;
}

Statement& Statement::bind(int index, const QByteArray& blob)
{
    sqlite3_bind_blob64(m_statement, index, blob.constData(), static_cast<sqlite3_uint64>(blob.size()), SQLITE_TRANSIENT);
    return *this;
}

Statement& Statement::bindNull(int index)
{
    sqlite3_bind_null(m_statement, index);
    return *this;
}

DbResult<bool> Statement::step()
{
    m_database->assertOwningThread();
    const int code = sqlite3_step(m_statement);
    if (code == SQLITE_ROW)
        return true;
    if (code == SQLITE_DONE)
        return false;
    auto error = m_database->lastError(code, QString::fromUtf8(sqlite3_sql(m_statement)));
    sqlite3_reset(m_statement);
    return error;
}

DbStatus Statement::run()
{
    for (;;) {
        auto row = step();
        if (!row)
            return row.error();
        if (!*row)
            break;
    }
    reset();
    return {};
}

void Statement::reset()
{
    sqlite3_reset(m_statement);
    sqlite3_clear_bindings(m_statement);
}

std::int64_t Statement::columnInt(int index) const
{
    return sqlite3_column_int64(m_statement, index);
}

double Statement::columnDouble(int index) const
{
    return sqlite3_column_double(m_statement, index);
}

QString Statement::columnText(int index) const
{
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(m_statement, index));
    return QString::fromUtf8(text, sqlite3_column_bytes(m_statement, index));
}

QByteArray Statement::columnBlob(int index) const
{
    const auto* data = static_cast<const char*>(sqlite3_column_blob(m_statement, index));
    return QByteArray(data, sqlite3_column_bytes(m_statement, index));
}

bool Statement::columnIsNull(int index) const
{
    return sqlite3_column_type(m_statement, index) == SQLITE_NULL;
}

// --- Transaction -------------------------------------------------------------------------------

Transaction::Transaction(Database* database)
    : m_database(database)
{ }

Transaction::Transaction(Transaction&& other) noexcept
    : m_database(std::exchange(other.m_database, nullptr))
{ }

Transaction::~Transaction()
{
    if (m_database)
        m_database->execute(QStringLiteral("ROLLBACK"));
}

DbStatus Transaction::commit()
{
    if (!m_database)
        return DatabaseError { ErrorKind::Misuse, SQLITE_MISUSE, QStringLiteral("the transaction has already ended") };
    auto status = m_database->execute(QStringLiteral("COMMIT"));
    if (status)
        m_database = nullptr; // on failure the destructor rolls back
    return status;
}

// --- Database ----------------------------------------------------------------------------------

Database::Database(QString path, sqlite3* handle)
    : m_path(std::move(path))
    , m_handle(handle)
    , m_owner(std::this_thread::get_id())
{ }

Database::~Database()
{
    sqlite3_close_v2(m_handle);
}

void Database::assertOwningThread() const
{
    Q_ASSERT_X(std::this_thread::get_id() == m_owner, "Database",
        "a SQLite connection is used only by the thread that opened it; open one per thread");
}

DatabaseError Database::lastError(int code, const QString& context) const
{
    const int extended = m_handle ? sqlite3_extended_errcode(m_handle) : code;
    const auto kind = kindOf(extended ? extended : code);
    QString message = m_handle ? QString::fromUtf8(sqlite3_errmsg(m_handle)) : QString::fromUtf8(sqlite3_errstr(code));
    message = QStringLiteral("%1: %2%3").arg(m_path, message, adviceFor(kind));
    if (!context.isEmpty())
        message += QStringLiteral(" [while running: %1]").arg(context.simplified().left(120));
    return DatabaseError { kind, extended ? extended : code, message };
}

DbResult<std::unique_ptr<Database>> Database::open(const QString& path, DatabaseOptions options)
{
    sqlite3* handle = nullptr;
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    const int code = sqlite3_open_v2(path.toUtf8().constData(), &handle, flags, nullptr);
    std::unique_ptr<Database> database(new Database(path, handle));
    if (code != SQLITE_OK)
        return database->lastError(code, {});
    sqlite3_extended_result_codes(handle, 1);
    sqlite3_busy_timeout(handle, options.busyTimeoutMs);

    // The first statement reads the header: a damaged or foreign file fails here, not later.
    auto mode = database->journalMode();
    if (!mode)
        return mode.error();
    if (auto status = database->execute(QStringLiteral("PRAGMA journal_mode=WAL")); !status)
        return status.error();
    mode = database->journalMode();
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
        if (auto status = database->execute(pragma); !status)
            return status.error();
    }
    auto status = database->execute(
        QStringLiteral("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, name TEXT NOT NULL, "
                       "applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now')))"));
    if (!status)
        return status.error();
    return database;
}

DbStatus Database::execute(const QString& sql)
{
    assertOwningThread();
    char* errorText = nullptr;
    const int code = sqlite3_exec(m_handle, sql.toUtf8().constData(), nullptr, nullptr, &errorText);
    sqlite3_free(errorText);
    if (code != SQLITE_OK)
        return lastError(code, sql);
    return {};
}

DbResult<Statement> Database::prepare(const QString& sql)
{
    assertOwningThread();
    sqlite3_stmt* statement = nullptr;
    const QByteArray utf8 = sql.toUtf8();
    const int code = sqlite3_prepare_v3(
        m_handle, utf8.constData(), static_cast<int>(utf8.size()), SQLITE_PREPARE_PERSISTENT, &statement, nullptr);
    if (code != SQLITE_OK)
        return lastError(code, sql);
    return Statement(this, statement);
}

DbResult<Transaction> Database::begin()
{
    // IMMEDIATE takes the write lock now, so a busy database fails here and not halfway through.
    if (auto status = execute(QStringLiteral("BEGIN IMMEDIATE")); !status)
        return status.error();
    return Transaction(this);
}

DbResult<int> Database::schemaVersion()
{
    auto statement = prepare(QStringLiteral("SELECT COALESCE(MAX(version), 0) FROM schema_version"));
    if (!statement)
        return statement.error();
    auto row = statement->step();
    if (!row)
        return row.error();
    return static_cast<int>(statement->columnInt(0));
}

DbResult<QString> Database::journalMode()
{
    auto statement = prepare(QStringLiteral("PRAGMA journal_mode"));
    if (!statement)
        return statement.error();
    auto row = statement->step();
    if (!row)
        return row.error();
    return statement->columnText(0).toLower();
}

DbStatus Database::migrate(const QList<Migration>& migrations)
{
    auto current = schemaVersion();
    if (!current)
        return current.error();
    const int latest = migrations.isEmpty()
        ? 0
        : std::max_element(migrations.begin(), migrations.end(), [](const Migration& a, const Migration& b) {
              return a.version < b.version;
          })->version;
    if (*current > latest)
        return DatabaseError { ErrorKind::Other, 0,
            QStringLiteral("%1: the schema is version %2, newer than this Tessera knows (%3); use a newer Tessera")
                .arg(m_path, QString::number(*current), QString::number(latest)) };

    for (const auto& migration : migrations) {
        if (migration.version <= *current)
            continue;
        auto transaction = begin();
        if (!transaction)
            return transaction.error();
        if (auto status = execute(migration.sql); !status)
            return DatabaseError {
                status.error().kind, status.error().sqliteCode,
                QStringLiteral("migration %1 (%2) failed: %3").arg(migration.version).arg(migration.name, status.error().message)
            };
        auto record = prepare(QStringLiteral("INSERT INTO schema_version (version, name) VALUES (?, ?)"));
        if (!record)
            return record.error();
        record->bind(1, std::int64_t(migration.version)).bind(2, migration.name);
        if (auto status = record->run(); !status)
            return status.error();
        if (auto status = transaction->commit(); !status)
            return status.error();
    }
    return {};
}

Result<std::unique_ptr<Database>> openMigrated(const QString& path, const QString& migrationsDirectory, DatabaseOptions options)
{
    auto database = Database::open(path, options);
    if (!database)
        return database.error().toError();
    auto migrations = loadMigrations(migrationsDirectory);
    if (!migrations)
        return migrations.error().toError();
    if (auto status = (*database)->migrate(*migrations); !status)
        return status.error().toError();
    return std::move(database).value();
}

std::int64_t Database::lastInsertRowId() const
{
    return sqlite3_last_insert_rowid(m_handle);
}

int Database::changes() const
{
    return sqlite3_changes(m_handle);
}

} // namespace tessera::core::storage
