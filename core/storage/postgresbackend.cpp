// The PostgreSQL engine of Database (database.h), on libpq: one connection to a server named by a
// postgresql:// URI. The SQL it is given is the part SQLite and PostgreSQL share, with `?` for
// parameters; migrations, written for SQLite, are translated (docs/STORE.md, "One SQL for both").

#include "backend.h"

#include <QList>
#include <QRegularExpression>
#include <QUrl>

#include <libpq-fe.h>

#include <vector>

namespace tessera::core::storage::detail {

namespace {

constexpr Oid ByteaOid = 17; // pg_type.h: bytea

ErrorKind kindOfState(const QString& state)
{
    if (state.startsWith(u"23"))
        return ErrorKind::Constraint; // integrity constraint violation
    if (state == u"40001" || state == u"40P01" || state == u"55P03")
        return ErrorKind::Busy; // serialization failure, deadlock, lock not available: try again
    if (state == u"53100")
        return ErrorKind::Full; // disk full
    if (state == u"25006")
        return ErrorKind::ReadOnly; // a read-only transaction (a standby)
    if (state.startsWith(u"08") || state == u"57P01" || state == u"57P02" || state == u"57P03")
        return ErrorKind::CannotOpen; // the connection, or the server going away
    if (state.startsWith(u"XX"))
        return ErrorKind::Corrupt; // data corrupted, index corrupted
    return ErrorKind::Other;
}

// The URI without its password, for messages.
QString shown(const QString& uri)
{
    QUrl url(uri);
    if (!url.password().isEmpty())
        url.setPassword(QStringLiteral("*"));
    return url.toString();
}

// `?` parameters numbered $1, $2, ... as PostgreSQL wants them; `?` inside quotes is left alone.
QString numbered(const QString& sql)
{
    QString out;
    out.reserve(sql.size() + 16);
    int n = 0;
    QChar quote;
    for (const QChar c : sql) {
        if (!quote.isNull()) {
            if (c == quote)
                quote = QChar();
        } else if (c == u'\'' || c == u'"') {
            quote = c;
        } else if (c == u'?') {
            out += u'$' + QString::number(++n);
            continue;
        }
        out += c;
    }
    return out;
}

struct PgResult {
    PGresult* result = nullptr;
    PgResult() = default;
    explicit PgResult(PGresult* r)
        : result(r)
    { }
    PgResult(PgResult&& other) noexcept
        : result(std::exchange(other.result, nullptr))
    { }
    PgResult& operator=(PgResult&& other) noexcept
    {
        std::swap(result, other.result);
        return *this;
    }
    ~PgResult() { PQclear(result); }
};

class PostgresConnection;

class PostgresStatement final : public StatementBackend {
public:
    PostgresStatement(PostgresConnection& connection, QString sql, QString original)
        : m_connection(connection)
        , m_sql(std::move(sql))
        , m_original(std::move(original))
    { }

    void bind(int index, std::int64_t value) override { set(index, QByteArray::number(qlonglong(value)), 0); }
    void bind(int index, double value) override { set(index, QByteArray::number(value, 'g', 17), 0); }
    void bind(int index, const QString& value) override { set(index, value.toUtf8(), 0); }
    void bind(int index, const QByteArray& blob) override { set(index, blob, ByteaOid, true); }
    void bindNull(int index) override { set(index, {}, 0, false, true); }

    DbResult<bool> step() override;
    void reset() override
    {
        m_rows = PgResult();
        m_row = -1;
        m_values.clear();
    }

    std::int64_t columnInt(int index) const override
    {
        const char* text = value(index);
        if (text[0] == 't' && text[1] == 0)
            return 1; // a boolean
        return QByteArray(text).toLongLong();
    }
    double columnDouble(int index) const override { return QByteArray(value(index)).toDouble(); }
    QString columnText(int index) const override { return QString::fromUtf8(value(index)); }
    QByteArray columnBlob(int index) const override
    {
        if (PQfformat(m_rows.result, index) == 1)
            return QByteArray(value(index), PQgetlength(m_rows.result, m_row, index));
        size_t length = 0;
        unsigned char* bytes = PQunescapeBytea(reinterpret_cast<const unsigned char*>(value(index)), &length);
        const QByteArray blob(reinterpret_cast<const char*>(bytes), qsizetype(length));
        PQfreemem(bytes);
        return blob;
    }
    bool columnIsNull(int index) const override
    {
        return !m_rows.result || index >= PQnfields(m_rows.result) || PQgetisnull(m_rows.result, m_row, index);
    }

private:
    struct Value {
        QByteArray bytes;
        Oid type = 0; // 0: PostgreSQL infers it from where the parameter stands
        bool binary = false;
        bool null = true;
    };

    void set(int index, QByteArray bytes, Oid type, bool binary = false, bool null = false)
    {
        if (index < 1)
            return;
        if (m_values.size() < size_t(index))
            m_values.resize(size_t(index));
        m_values[size_t(index) - 1] = { std::move(bytes), type, binary, null };
    }
    const char* value(int index) const
    {
        if (!m_rows.result || m_row < 0 || index >= PQnfields(m_rows.result))
            return "";
        return PQgetvalue(m_rows.result, m_row, index);
    }

    PostgresConnection& m_connection;
    QString m_sql; // with $n
    QString m_original; // as given, for messages
    std::vector<Value> m_values;
    PgResult m_rows; // the rows of the last run, read one at a time by step()
    int m_row = -1;
};

class PostgresConnection final : public Connection {
public:
    PostgresConnection(QString uri, PGconn* handle)
        : m_uri(shown(uri))
        , m_handle(handle)
    { }
    ~PostgresConnection() override { PQfinish(m_handle); }

    Engine engine() const override { return Engine::PostgreSQL; }

    DbStatus execute(const QString& sql) override
    {
        PgResult result(PQexec(m_handle, sql.toUtf8().constData()));
        return check(result, sql);
    }

    DbResult<std::unique_ptr<StatementBackend>> prepare(const QString& sql) override
    {
        return std::unique_ptr<StatementBackend>(std::make_unique<PostgresStatement>(*this, numbered(sql), sql));
    }

    // PostgreSQL's default isolation (read committed) with row locks where the broker needs them;
    // a write that conflicts waits for the other transaction.
    QString beginSql() const override { return QStringLiteral("BEGIN"); }

    // The identity the last INSERT took in this session; 0 when none did (as SQLite says). Inside a
    // transaction behind a savepoint: a failed lastval() must not fail the transaction.
    std::int64_t lastInsertRowId() override
    {
        const bool inside = PQtransactionStatus(m_handle) == PQTRANS_INTRANS;
        if (inside)
            PgResult(PQexec(m_handle, "SAVEPOINT tessera_lastval"));
        PgResult result(PQexec(m_handle, "SELECT lastval()"));
        const bool ok = PQresultStatus(result.result) == PGRES_TUPLES_OK && PQntuples(result.result) == 1;
        if (inside)
            PgResult(PQexec(m_handle, ok ? "RELEASE SAVEPOINT tessera_lastval" : "ROLLBACK TO SAVEPOINT tessera_lastval"));
        return ok ? QByteArray(PQgetvalue(result.result, 0, 0)).toLongLong() : 0;
    }
    int changes() const override { return m_changes; }
    DbResult<QString> journalMode() override { return QStringLiteral("postgresql"); }

    // SQLite's types and the rowid as PostgreSQL has them: 64-bit integers, bytea, identity keys.
    QString migrationSql(const QString& sql) const override
    {
        static const QList<std::pair<QRegularExpression, QString>> rules {
            { QRegularExpression(
                  QStringLiteral("\\bINTEGER\\s+PRIMARY\\s+KEY(\\s+AUTOINCREMENT)?"), QRegularExpression::CaseInsensitiveOption),
                QStringLiteral("BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY") },
            { QRegularExpression(QStringLiteral("\\bINTEGER\\b"), QRegularExpression::CaseInsensitiveOption),
                QStringLiteral("BIGINT") },
            { QRegularExpression(QStringLiteral("\\bREAL\\b"), QRegularExpression::CaseInsensitiveOption),
                QStringLiteral("DOUBLE PRECISION") },
            { QRegularExpression(QStringLiteral("\\bBLOB\\b"), QRegularExpression::CaseInsensitiveOption),
                QStringLiteral("BYTEA") },
            { QRegularExpression(QStringLiteral("\\)\\s*WITHOUT\\s+ROWID"), QRegularExpression::CaseInsensitiveOption),
                QStringLiteral(")") },
        };
        QString out = sql;
        for (const auto& [pattern, replacement] : rules)
            out.replace(pattern, replacement);
        return out;
    }

    // The rows of one run of a statement, or why it failed (the transaction, if any, then fails
    // as a whole: PostgreSQL refuses every statement after an error until ROLLBACK).
    DbResult<PgResult> run(const QString& sql, const QString& original, const std::vector<const char*>& values,
        const std::vector<int>& lengths, const std::vector<int>& formats, const std::vector<Oid>& types)
    {
        PgResult result(PQexecParams(m_handle, sql.toUtf8().constData(), int(values.size()), types.data(), values.data(),
            lengths.data(), formats.data(), 0));
        if (auto status = check(result, original); !status)
            return status.error();
        return result;
    }

    DbStatus check(const PgResult& result, const QString& sql)
    {
        const auto status = PQresultStatus(result.result);
        if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
            m_changes = QByteArray(PQcmdTuples(result.result)).toInt();
            return {};
        }
        const QString state = QString::fromLatin1(PQresultErrorField(result.result, PG_DIAG_SQLSTATE));
        const auto kind = result.result && !state.isEmpty() ? kindOfState(state)
            : PQstatus(m_handle) != CONNECTION_OK           ? ErrorKind::CannotOpen
                                                            : ErrorKind::Other;
        const QString message = result.result ? QString::fromUtf8(PQresultErrorMessage(result.result))
                                              : QString::fromUtf8(PQerrorMessage(m_handle));
        return DatabaseError { kind, 0, describe(m_uri, message, kind, sql), state };
    }

    PGconn* handle() const { return m_handle; }

private:
    QString m_uri;
    PGconn* m_handle;
    int m_changes = 0;
};

DbResult<bool> PostgresStatement::step()
{
    if (!m_rows.result) {
        std::vector<const char*> values;
        std::vector<int> lengths;
        std::vector<int> formats;
        std::vector<Oid> types;
        for (const auto& value : m_values) {
            values.push_back(value.null ? nullptr : value.bytes.constData());
            lengths.push_back(int(value.bytes.size()));
            formats.push_back(value.binary ? 1 : 0);
            types.push_back(value.type);
        }
        auto rows = m_connection.run(m_sql, m_original, values, lengths, formats, types);
        if (!rows)
            return rows.error();
        m_rows = std::move(rows).value();
        m_row = -1;
    }
    if (m_row + 1 < PQntuples(m_rows.result)) {
        ++m_row;
        return true;
    }
    return false;
}

} // namespace

DbResult<std::unique_ptr<Connection>> openPostgres(const QString& uri, const DatabaseOptions& options)
{
    PGconn* handle = PQconnectdb(uri.toUtf8().constData());
    auto connection = std::make_unique<PostgresConnection>(uri, handle);
    if (!handle || PQstatus(handle) != CONNECTION_OK) {
        const QString why = handle ? QString::fromUtf8(PQerrorMessage(handle)) : QStringLiteral("out of memory");
        return DatabaseError { ErrorKind::CannotOpen, 0,
            describe(shown(uri), QStringLiteral("cannot connect: %1").arg(why), ErrorKind::Other, {}) };
    }
    // Notices (a table that exists already) are not errors; a statement waits for a lock at most
    // as long as SQLite's busy timeout would.
    const QString setup = QStringLiteral("SET client_min_messages = warning; SET lock_timeout = %1; "
                                         "SET synchronous_commit = %2")
                              .arg(options.busyTimeoutMs)
                              .arg(options.synchronous == DatabaseOptions::Synchronous::Full ? u"on" : u"off");
    if (auto status = connection->execute(setup); !status)
        return status.error();
    if (auto status = connection->execute(
            QStringLiteral("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL, name TEXT NOT NULL, "
                           "applied_at TEXT NOT NULL DEFAULT to_char(now() AT TIME ZONE 'UTC', "
                           "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'))"));
        !status)
        return status.error();
    return std::unique_ptr<Connection>(std::move(connection));
}

} // namespace tessera::core::storage::detail
