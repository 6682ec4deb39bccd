// The PostgreSQL engine of Database (database.h), on libpq: one connection to a server named by a
// postgresql:// URI. The SQL it is given is the part SQLite and PostgreSQL share, with `?` for
// parameters; migrations, written for SQLite, are translated (docs/STORE.md, "One SQL for both").

#include "backend.h"

#include <QHash>
#include <QList>
#include <QRegularExpression>
#include <QUrl>

#include <libpq-fe.h>

#include <algorithm>
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
    if (state == u"08P01")
        return ErrorKind::Misuse; // protocol violation: parameters that do not fit the statement
    if (state.startsWith(u"08") || state == u"57P01" || state == u"57P02" || state == u"57P03")
        return ErrorKind::CannotOpen; // the connection, or the server going away
    if (state == u"XX001" || state == u"XX002")
        return ErrorKind::Corrupt; // data corrupted, index corrupted
    return ErrorKind::Other;
}

// Where the connection goes, for messages: the URI's parts but its password, wherever it was given
// (user:password@, ?password=).
QString shown(const QString& uri)
{
    char* error = nullptr;
    PQconninfoOption* options = PQconninfoParse(uri.toUtf8().constData(), &error);
    PQfreemem(error);
    if (!options)
        return QStringLiteral("a PostgreSQL database (its address does not parse)");
    QStringList parts;
    for (const PQconninfoOption* option = options; option->keyword; ++option) {
        const QString keyword = QString::fromLatin1(option->keyword);
        if (option->val && *option->val && keyword != u"password")
            parts.append(keyword + u'=' + QString::fromUtf8(option->val));
    }
    PQconninfoFree(options);
    return QStringLiteral("PostgreSQL (%1)").arg(parts.join(u' '));
}

// SQLite's parameters as PostgreSQL's: `?NNN` is $NNN, a bare `?` is one more than the highest
// number so far (SQLite's rule); a `?` in a quoted literal or identifier, or in a comment, is text.
// `count` is the highest number used.
QString numbered(const QString& sql, int& count)
{
    QString out;
    out.reserve(sql.size() + 16);
    count = 0;
    for (qsizetype i = 0; i < sql.size(); ++i) {
        const QChar c = sql[i];
        qsizetype end = i; // the last character of what is copied as it stands
        if (c == u'\'' || c == u'"') {
            end = sql.indexOf(c, i + 1);
        } else if (c == u'-' && sql.mid(i, 2) == u"--") {
            end = sql.indexOf(u'\n', i);
        } else if (c == u'/' && sql.mid(i, 2) == u"/*") {
            end = sql.indexOf(u"*/", i + 2);
            end = end < 0 ? end : end + 1;
        } else if (c == u'?') {
            qsizetype digits = i + 1;
            while (digits < sql.size() && sql[digits].isDigit())
                ++digits;
            const int number = digits > i + 1 ? sql.mid(i + 1, digits - i - 1).toInt() : count + 1;
            count = std::max(count, number);
            out += u'$' + QString::number(number);
            i = digits - 1;
            continue;
        }
        end = end < 0 ? sql.size() - 1 : end;
        out += sql.mid(i, end - i + 1);
        i = end;
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
    PostgresStatement(PostgresConnection& connection, QString sql, QString original, int parameters)
        : m_connection(connection)
        , m_sql(std::move(sql))
        , m_original(std::move(original))
        , m_values(size_t(parameters))
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
        m_done = false;
        for (auto& value : m_values)
            value = {};
    }

    std::int64_t columnInt(int index) const override
    {
        const QByteArray text(value(index));
        if (text == "t" || text == "f")
            return text == "t"; // a boolean
        bool whole = false;
        const auto number = text.toLongLong(&whole);
        return whole ? number : std::int64_t(text.toDouble()); // a numeric (SUM, AVG) or a real
    }
    double columnDouble(int index) const override
    {
        const QByteArray text(value(index));
        return text == "t" ? 1.0 : text.toDouble();
    }
    QString columnText(int index) const override { return QString::fromUtf8(value(index)); }
    QByteArray columnBlob(int index) const override
    {
        if (!m_rows.result || m_row < 0 || index >= PQnfields(m_rows.result))
            return {};
        if (PQfformat(m_rows.result, index) == 1 || PQftype(m_rows.result, index) != ByteaOid)
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

    // A binding changes what the next step() runs: as SQLite, it starts over.
    void set(int index, QByteArray bytes, Oid type, bool binary = false, bool null = false)
    {
        m_rows = PgResult();
        m_row = -1;
        m_done = false;
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
    bool m_done = false; // the last step() said there were no more rows: the next one runs it again
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
        reconnectIfLost();
        // PostgreSQL only warns at a BEGIN inside a transaction, and the inner COMMIT would end the
        // outer one: refused, as SQLite refuses it.
        if (sql == beginSql() && PQtransactionStatus(m_handle) != PQTRANS_IDLE)
            return DatabaseError { ErrorKind::Misuse, 0,
                describe(m_uri, QStringLiteral("a transaction is already open on this connection"), ErrorKind::Misuse, sql) };
        if (sql == beginSql())
            return beginWithWriterLock();
        PgResult result(PQexec(m_handle, sql.toUtf8().constData()));
        return check(result, sql);
    }

    DbResult<std::unique_ptr<StatementBackend>> prepare(const QString& sql) override
    {
        int parameters = 0;
        const QString withNumbers = numbered(sql, parameters);
        return std::unique_ptr<StatementBackend>(std::make_unique<PostgresStatement>(*this, withNumbers, sql, parameters));
    }

    // PostgreSQL's default isolation (read committed), and every transaction holds the writer
    // lock (below) until it ends.
    QString beginSql() const override { return QStringLiteral("BEGIN"); }
    bool inTransaction() const override { return PQtransactionStatus(m_handle) != PQTRANS_IDLE; }

    // The writer lock: one transaction-scoped advisory lock that every transaction of every
    // connection to the database takes first, so transactions apply one at a time, as SQLite's
    // BEGIN IMMEDIATE makes them. What a transaction read (a balance, a shard's state) cannot change
    // under it before it commits, whichever broker runs it (docs/STORE.md, "Several brokers").
    // Waiting longer than lock_timeout fails as Busy, and the transaction is rolled back. Every
    // transaction commits durably (synchronous_commit on), whatever the session says for single
    // statements (openPostgres). One round trip: the three statements go as one query string.
    DbStatus beginWithWriterLock()
    {
        const QString sql
            = QStringLiteral("BEGIN; SET LOCAL synchronous_commit = on; SELECT pg_advisory_xact_lock(%1)").arg(WriterLockKey);
        PgResult result(PQexec(m_handle, sql.toUtf8().constData()));
        auto status = check(result, sql);
        if (!status && PQtransactionStatus(m_handle) != PQTRANS_IDLE)
            PgResult(PQexec(m_handle, "ROLLBACK"));
        return status;
    }
    static constexpr std::int64_t WriterLockKey = 0x7465737365726101; // "tesser" 1 1

    // The identity the last INSERT took in this session; 0 when none did (as SQLite says). Inside a
    // transaction behind a savepoint: a failed lastval() must not fail the transaction.
    std::int64_t lastInsertRowId() override
    {
        const bool inside = PQtransactionStatus(m_handle) == PQTRANS_INTRANS;
        if (inside)
            PgResult(PQexec(m_handle, "SAVEPOINT tessera_lastval"));
        PgResult result(PQexec(m_handle, "SELECT lastval()"));
        const bool ok = PQresultStatus(result.result) == PGRES_TUPLES_OK && PQntuples(result.result) == 1;
        if (inside && !ok)
            PgResult(PQexec(m_handle, "ROLLBACK TO SAVEPOINT tessera_lastval"));
        if (inside)
            PgResult(PQexec(m_handle, "RELEASE SAVEPOINT tessera_lastval"));
        return ok ? QByteArray(PQgetvalue(result.result, 0, 0)).toLongLong() : 0;
    }
    int changes() const override { return m_changes; }
    DbResult<QString> journalMode() override { return QStringLiteral("postgresql"); }

    // SQLite's types and the rowid as PostgreSQL has them: 64-bit integers, bytea, identity keys.
    // SQLite's types and the rowid as PostgreSQL has them: 64-bit integers, bytea, identity keys.
    // The migrations write types in capitals and names in small letters (a column may be called
    // `blob`), so the rules match capitals only.
    QString migrationSql(const QString& sql) const override
    {
        static const QList<std::pair<QRegularExpression, QString>> rules {
            { QRegularExpression(QStringLiteral("\\bINTEGER\\s+PRIMARY\\s+KEY(\\s+AUTOINCREMENT)?\\b")),
                QStringLiteral("BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY") },
            { QRegularExpression(QStringLiteral("\\bINTEGER\\b")), QStringLiteral("BIGINT") },
            { QRegularExpression(QStringLiteral("\\bREAL\\b")), QStringLiteral("DOUBLE PRECISION") },
            { QRegularExpression(QStringLiteral("\\bBLOB\\b")), QStringLiteral("BYTEA") },
            { QRegularExpression(QStringLiteral("\\)\\s*WITHOUT\\s+ROWID")), QStringLiteral(")") },
        };
        QString out = sql;
        for (const auto& [pattern, replacement] : rules)
            out.replace(pattern, replacement);
        return out;
    }

    // The rows of one run of a statement, or why it failed (the transaction, if any, then fails
    // as a whole: PostgreSQL refuses every statement after an error until ROLLBACK).
    //
    // Each statement is prepared once per connection (by its text and its parameters' types) and
    // run as a prepared statement after: the server parses and plans it once, as SQLite's
    // persistent statements are (docs/STORE.md, "Prepared statements"). A statement that cannot be
    // prepared now (a failed transaction, an error in it) runs unprepared, which reports why.
    DbResult<PgResult> run(const QString& sql, const QString& original, const std::vector<const char*>& values,
        const std::vector<int>& lengths, const std::vector<int>& formats, const std::vector<Oid>& types)
    {
        reconnectIfLost();
        const QByteArray text = sql.toUtf8();
        const QByteArray name = preparedName(text, types);
        if (!name.isEmpty()) {
            PgResult result(
                PQexecPrepared(m_handle, name.constData(), int(values.size()), values.data(), lengths.data(), formats.data(), 0));
            const bool replanned = PQresultStatus(result.result) == PGRES_FATAL_ERROR
                && QByteArray(PQresultErrorField(result.result, PG_DIAG_SQLSTATE)) == "0A000"; // the table changed
            if (!replanned) {
                if (auto status = check(result, original); !status)
                    return status.error();
                return result;
            }
            forgetPrepared();
        }
        PgResult result(PQexecParams(
            m_handle, text.constData(), int(values.size()), types.data(), values.data(), lengths.data(), formats.data(), 0));
        if (auto status = check(result, original); !status)
            return status.error();
        return result;
    }

    // The name of the statement prepared for this text and these types; empty when it cannot be
    // prepared now.
    QByteArray preparedName(const QByteArray& text, const std::vector<Oid>& types)
    {
        QByteArray key = text;
        for (const Oid type : types)
            key += ',' + QByteArray::number(type);
        if (const auto found = m_prepared.constFind(key); found != m_prepared.cend())
            return *found;
        if (PQtransactionStatus(m_handle) == PQTRANS_INERROR)
            return {};
        if (m_prepared.size() >= MaxPrepared)
            forgetPrepared();
        const QByteArray name = "tessera_" + QByteArray::number(++m_preparedCount);
        PgResult prepared(PQprepare(m_handle, name.constData(), text.constData(), int(types.size()), types.data()));
        if (PQresultStatus(prepared.result) != PGRES_COMMAND_OK)
            return {};
        m_prepared.insert(key, name);
        return name;
    }

    // Every prepared statement goes (too many, or a table changed under one); outside a failed
    // transaction, where the server would refuse.
    void forgetPrepared()
    {
        if (PQtransactionStatus(m_handle) == PQTRANS_INERROR)
            return;
        PgResult(PQexec(m_handle, "DEALLOCATE ALL"));
        m_prepared.clear();
    }
    static constexpr qsizetype MaxPrepared = 500;

    // The session's settings (openPostgres), run again after a reconnect.
    DbStatus configure(const QString& setup)
    {
        m_setup = setup;
        PgResult result(PQexec(m_handle, setup.toUtf8().constData()));
        return check(result, setup);
    }

    // A connection the server or the network dropped (a restart of the server, a failover to its
    // replica) is opened again before the next statement; what was in flight on it failed with
    // the connection (CannotOpen), and a transaction it held is gone, rolled back by the server.
    void reconnectIfLost()
    {
        if (PQstatus(m_handle) != CONNECTION_BAD)
            return;
        PQreset(m_handle);
        if (PQstatus(m_handle) != CONNECTION_OK)
            return; // the statement fails, saying why
        m_prepared.clear();
        PgResult(PQexec(m_handle, m_setup.toUtf8().constData()));
    }

    DbStatus check(const PgResult& result, const QString& sql)
    {
        const auto status = PQresultStatus(result.result);
        if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY) {
            const QByteArray tag(PQcmdStatus(result.result));
            // A COMMIT of a transaction that had failed is a ROLLBACK: nothing of it was kept.
            if (tag == "ROLLBACK" && sql.trimmed().compare(u"COMMIT", Qt::CaseInsensitive) == 0)
                return DatabaseError { ErrorKind::Other, 0,
                    describe(
                        m_uri, QStringLiteral("the transaction had failed, so nothing of it was kept"), ErrorKind::Other, sql) };
            // As SQLite's changes(): the rows the last INSERT, UPDATE or DELETE touched.
            for (const char* counted : { "INSERT", "UPDATE", "DELETE", "MERGE" })
                if (tag.startsWith(counted))
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

private:
    QString m_uri;
    PGconn* m_handle;
    int m_changes = 0;
    QString m_setup;
    QHash<QByteArray, QByteArray> m_prepared; // statement text and parameter types: its name
    std::int64_t m_preparedCount = 0;
};

DbResult<bool> PostgresStatement::step()
{
    if (m_done) { // as SQLite: a step after the last row runs the statement again, its bindings kept
        m_rows = PgResult();
        m_done = false;
    }
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
    m_done = true;
    return false;
}

} // namespace

QString shownLocation(const QString& uri)
{
    return shown(uri);
}

DbResult<std::unique_ptr<Connection>> openPostgres(const QString& uri, const DatabaseOptions& options)
{
    PGconn* handle = PQconnectdb(uri.toUtf8().constData());
    auto connection = std::make_unique<PostgresConnection>(uri, handle);
    if (!handle || PQstatus(handle) != CONNECTION_OK) {
        const QString why = handle ? QString::fromUtf8(PQerrorMessage(handle)) : QStringLiteral("out of memory");
        return DatabaseError { ErrorKind::CannotOpen, 0,
            describe(shown(uri), QStringLiteral("cannot connect: %1").arg(why), ErrorKind::Other, {}) };
    }
    // Notices (a table that exists already) are not errors; text is UTF-8 and reals come back
    // exactly; a statement waits for a lock at most as long as SQLite's busy timeout would (0 is
    // "for ever" to PostgreSQL, so at least 1 ms). Durability: every transaction commits
    // synchronously; with DatabaseOptions::Synchronous::Normal, single statements outside a
    // transaction commit asynchronously (a crash of the server, not of this process, may lose the
    // last fraction of a second of them: as SQLite's NORMAL may at a power cut; docs/STORE.md).
    // A transaction left idle for 10 s (its process paused or cut off mid-transaction) is ended by
    // the server, with the writer lock it held; so is a dead client's connection, found by TCP
    // keepalives within about 25 s.
    const QString setup
        = QStringLiteral("SET client_min_messages = warning; SET client_encoding = 'UTF8'; "
                         "SET extra_float_digits = 3; SET lock_timeout = %1; "
                         "SET idle_in_transaction_session_timeout = 10000; SET tcp_keepalives_idle = 10; "
                         "SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3; "
                         "SET synchronous_commit = %2")
              .arg(std::max(1, options.busyTimeoutMs))
              .arg(options.synchronous == DatabaseOptions::Synchronous::Normal ? QStringLiteral("off") : QStringLiteral("on"));
    if (auto status = connection->configure(setup); !status)
        return status.error();
    // Under the writer lock, where it is missing: brokers that start at once would race to create
    // it.
    PgResult exists(PQexec(handle, "SELECT to_regclass('schema_version') IS NOT NULL"));
    if (PQresultStatus(exists.result) == PGRES_TUPLES_OK && PQntuples(exists.result) == 1
        && QByteArray(PQgetvalue(exists.result, 0, 0)) == "t")
        return std::unique_ptr<Connection>(std::move(connection));
    if (auto begun = connection->execute(connection->beginSql()); !begun)
        return begun.error();
    if (auto status = connection->execute(
            QStringLiteral("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL, name TEXT NOT NULL, "
                           "applied_at TEXT NOT NULL DEFAULT to_char(now() AT TIME ZONE 'UTC', "
                           "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'))"));
        !status)
        return status.error();
    if (auto status = connection->execute(QStringLiteral("COMMIT")); !status)
        return status.error();
    return std::unique_ptr<Connection>(std::move(connection));
}

} // namespace tessera::core::storage::detail
