#include "database.h"

#include "backend.h"

#include <QDir>
#include <QFile>
#include <QRegularExpression>

#include <algorithm>

namespace tessera::core::storage {

namespace {

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

QString detail::describe(const QString& where, const QString& message, ErrorKind kind, const QString& context)
{
    QString text = QStringLiteral("%1: %2%3").arg(where, message.trimmed(), adviceFor(kind));
    if (!context.isEmpty())
        text += QStringLiteral(" [while running: %1]").arg(context.simplified().left(120));
    return text;
}

bool isPostgresUri(const QString& location)
{
    return location.startsWith(u"postgresql://") || location.startsWith(u"postgres://");
}

DbResult<QList<Migration>> loadMigrations(const QString& directory, Engine engine)
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
    // The few migrations SQLite's functions make engine-only have a PostgreSQL form beside them, in
    // postgresql/ under the same name (docs/STORE.md, "One SQL for both").
    if (engine == Engine::PostgreSQL) {
        for (auto& migration : migrations) {
            QFile own(QStringLiteral("%1/postgresql/%2_%3.sql")
                          .arg(directory)
                          .arg(migration.version, 4, 10, QLatin1Char('0'))
                          .arg(migration.name));
            if (own.exists() && !own.open(QIODevice::ReadOnly))
                return DatabaseError { ErrorKind::CannotOpen, 0, QStringLiteral("cannot read %1").arg(own.fileName()) };
            if (own.isOpen())
                migration.sql = QString::fromUtf8(own.readAll());
        }
    }
    return migrations;
}

// --- Statement ---------------------------------------------------------------------------------

Statement::Statement(Database* database, std::unique_ptr<detail::StatementBackend> backend)
    : m_database(database)
    , m_backend(std::move(backend))
{ }

Statement::Statement(Statement&& other) noexcept = default;
Statement& Statement::operator=(Statement&& other) noexcept = default;
Statement::~Statement() = default;

Statement& Statement::bind(int index, std::int64_t value)
{
    m_backend->bind(index, value);
    return *this;
}

Statement& Statement::bind(int index, double value)
{
    m_backend->bind(index, value);
    return *this;
}

Statement& Statement::bind(int index, const QString& value)
{
    m_backend->bind(index, value);
    return *this;
}

Statement& Statement::bind(int index, const QByteArray& blob)
{
    m_backend->bind(index, blob);
    return *this;
}

Statement& Statement::bindNull(int index)
{
    m_backend->bindNull(index);
    return *this;
}

DbResult<bool> Statement::step()
{
    m_database->assertOwningThread();
    return m_backend->step();
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
    m_backend->reset();
}

std::int64_t Statement::columnInt(int index) const
{
    return m_backend->columnInt(index);
}

double Statement::columnDouble(int index) const
{
    return m_backend->columnDouble(index);
}

QString Statement::columnText(int index) const
{
    return m_backend->columnText(index);
}

QByteArray Statement::columnBlob(int index) const
{
    return m_backend->columnBlob(index);
}

bool Statement::columnIsNull(int index) const
{
    return m_backend->columnIsNull(index);
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
        return DatabaseError { ErrorKind::Misuse, 0, QStringLiteral("the transaction has already ended") };
    auto status = m_database->execute(QStringLiteral("COMMIT"));
    if (status)
        m_database = nullptr; // on failure the destructor rolls back
    return status;
}

// --- Database ----------------------------------------------------------------------------------

Database::Database(QString path, std::unique_ptr<detail::Connection> connection)
    : m_path(std::move(path))
    , m_connection(std::move(connection))
    , m_owner(std::this_thread::get_id())
{ }

Database::~Database() = default;

void Database::assertOwningThread() const
{
    Q_ASSERT_X(std::this_thread::get_id() == m_owner, "Database",
        "a database connection is used only by the thread that opened it; open one per thread");
}

DbResult<std::unique_ptr<Database>> Database::open(const QString& path, DatabaseOptions options)
{
    auto connection = isPostgresUri(path) ? detail::openPostgres(path, options) : detail::openSqlite(path, options);
    if (!connection)
        return connection.error();
    const QString shown = isPostgresUri(path) ? detail::shownLocation(path) : path; // never a password in a message
    return std::unique_ptr<Database>(new Database(shown, std::move(connection).value()));
}

Engine Database::engine() const
{
    return m_connection->engine();
}

DbStatus Database::execute(const QString& sql)
{
    assertOwningThread();
    return m_connection->execute(sql);
}

DbResult<Statement> Database::prepare(const QString& sql)
{
    assertOwningThread();
    auto backend = m_connection->prepare(sql);
    if (!backend)
        return backend.error();
    return Statement(this, std::move(backend).value());
}

DbResult<Transaction> Database::begin()
{
    if (auto status = execute(m_connection->beginSql()); !status)
        return status.error();
    return Transaction(this);
}

bool Database::inTransaction() const
{
    return m_connection->inTransaction();
}

QString Database::jsonText(const QString& column, const QString& key) const
{
    if (engine() == Engine::PostgreSQL)
        return QStringLiteral("(CAST(%1 AS JSONB) ->> '%2')").arg(column, key);
    return QStringLiteral("json_extract(%1, '$.%2')").arg(column, key);
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
    assertOwningThread();
    return m_connection->journalMode();
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
        // Read again inside the transaction: another process sharing the database (a second
        // broker on PostgreSQL) may have applied it meanwhile.
        current = schemaVersion();
        if (!current)
            return current.error();
        if (migration.version <= *current)
            continue;
        if (auto status = execute(m_connection->migrationSql(migration.sql)); !status)
            return DatabaseError { status.error().kind, status.error().sqliteCode,
                QStringLiteral("migration %1 (%2) failed: %3").arg(migration.version).arg(migration.name, status.error().message),
                status.error().sqlState };
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
    auto migrations = loadMigrations(migrationsDirectory, (*database)->engine());
    if (!migrations)
        return migrations.error().toError();
    if (auto status = (*database)->migrate(*migrations); !status)
        return status.error().toError();
    return std::move(database).value();
}

std::int64_t Database::lastInsertRowId() const
{
    return m_connection->lastInsertRowId();
}

int Database::changes() const
{
    return m_connection->changes();
}

} // namespace tessera::core::storage
