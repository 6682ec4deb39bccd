#pragma once

// What a database engine does for Database and Statement (database.h): SQLite in sqlitebackend.cpp,
// PostgreSQL in postgresbackend.cpp. Internal to core/storage.

#include "databasetypes.h"

#include <QByteArray>
#include <QString>

#include <cstdint>
#include <memory>

namespace tessera::core::storage::detail {

class StatementBackend {
public:
    virtual ~StatementBackend() = default;
    virtual void bind(int index, std::int64_t value) = 0;
    virtual void bind(int index, double value) = 0;
    virtual void bind(int index, const QString& value) = 0;
    virtual void bind(int index, const QByteArray& blob) = 0;
    virtual void bindNull(int index) = 0;
    virtual DbResult<bool> step() = 0;
    virtual void reset() = 0; // to run again: rows and bindings go
    virtual std::int64_t columnInt(int index) const = 0;
    virtual double columnDouble(int index) const = 0;
    virtual QString columnText(int index) const = 0;
    virtual QByteArray columnBlob(int index) const = 0;
    virtual bool columnIsNull(int index) const = 0;
};

class Connection {
public:
    virtual ~Connection() = default;
    virtual Engine engine() const = 0;
    virtual DbStatus execute(const QString& sql) = 0;
    virtual DbResult<std::unique_ptr<StatementBackend>> prepare(const QString& sql) = 0;
    // What starts a transaction that writes (SQLite takes its write lock at once).
    virtual QString beginSql() const = 0;
    // Whether a transaction is open on this connection.
    virtual bool inTransaction() const = 0;
    virtual std::int64_t lastInsertRowId() = 0;
    virtual int changes() const = 0;
    virtual DbResult<QString> journalMode() = 0;
    // A migration's SQL as this engine reads it (the files are written for SQLite).
    virtual QString migrationSql(const QString& sql) const = 0;
};

DbResult<std::unique_ptr<Connection>> openSqlite(const QString& path, const DatabaseOptions& options);
DbResult<std::unique_ptr<Connection>> openPostgres(const QString& uri, const DatabaseOptions& options);
// A postgresql:// URI as messages show it: without its password.
QString shownLocation(const QString& uri);

// The message for a failure of `what`: the database's own words, the advice for its kind, and the
// statement it ran.
QString describe(const QString& where, const QString& message, ErrorKind kind, const QString& context);

} // namespace tessera::core::storage::detail
