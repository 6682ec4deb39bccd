#pragma once

// The plain types of core/storage (database.h) that its engines (backend.h) share.

#include "../error.h"

#include <QString>

namespace tessera::core::storage {

// Why a database call failed, for callers that react differently (retry when busy, stop when full).
enum class ErrorKind { Busy, Full, Corrupt, ReadOnly, CannotOpen, Constraint, Misuse, Other };

struct DatabaseError {
    ErrorKind kind = ErrorKind::Other;
    int sqliteCode = 0; // SQLite's extended result code; 0 from PostgreSQL
    QString message;
    QString sqlState = {}; // PostgreSQL's SQLSTATE (23505: a unique key taken, ...); empty from SQLite

    Error toError() const { return Error { QStringLiteral("database"), message, kind == ErrorKind::Full }; }
};

template<typename T> using DbResult = Result<T, DatabaseError>;
using DbStatus = BasicStatus<DatabaseError>;

// The database engines a Database speaks to: SQLite (a file, the default) and PostgreSQL (a server,
// named by a postgresql:// URI; docs/STORE.md).
enum class Engine { SQLite, PostgreSQL };

struct DatabaseOptions {
    int busyTimeoutMs = 5000;
    // FULL by default: the ledger must survive a power cut, not just a crash.
    enum class Synchronous { Normal, Full } synchronous = Synchronous::Full;
};

} // namespace tessera::core::storage
