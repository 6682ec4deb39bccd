#include "../support/postgresserver.h"

#include <core/storage/database.h>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <optional>
#include <thread>

using namespace tessera::core::storage;

namespace {

const QList<Migration> migrations {
    { 1, QStringLiteral("accounts"),
        QStringLiteral("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, micro INTEGER NOT NULL CHECK "
                       "(micro >= 0));") },
    { 2, QStringLiteral("notes"),
        QStringLiteral("CREATE TABLE notes (id INTEGER PRIMARY KEY, account INTEGER REFERENCES accounts(id), body BLOB);") },
};

std::unique_ptr<Database> openOrFail(const QString& path, DatabaseOptions options = {})
{
    auto database = Database::open(path, options);
    if (!database.ok())
        qFatal("open failed: %s", qPrintable(database.error().message));
    return std::move(database).value();
}

std::int64_t countRows(Database& database, const QString& table)
{
    auto statement = database.prepare(QStringLiteral("SELECT COUNT(*) FROM ") + table);
    if (!statement.ok() || !statement->step().ok())
        return -1;
    return statement->columnInt(0);
}

} // namespace

// The cases that hold on both engines run once on SQLite and once on a PostgreSQL server the test
// starts itself (tests/support/postgresserver.h); the PostgreSQL rows skip, saying why, only where
// PostgreSQL is not installed.
#define OPEN_LOCATION(dir, location)                                                                                             \
    QFETCH(QString, engine);                                                                                                     \
    if (engine == QStringLiteral("postgresql") && !m_postgres)                                                                   \
        QSKIP(qPrintable(m_postgresWhy));                                                                                        \
    const QString location = locationOn(engine, dir)

class DatabaseTest : public QObject {
    Q_OBJECT

    std::unique_ptr<tessera::tests::PostgresServer> m_postgres;
    QString m_postgresWhy;
    int m_databases = 0;

    // A new, empty database: a file in `dir`, or a database of its own on the test's server.
    QString locationOn(const QString& engine, const QTemporaryDir& dir)
    {
        if (engine == QStringLiteral("sqlite"))
            return dir.filePath(QStringLiteral("t.sqlite"));
        const QString name = QStringLiteral("t%1").arg(++m_databases);
        QString why;
        if (!m_postgres->createDatabase(name, why))
            qFatal("createdb %s: %s", qPrintable(name), qPrintable(why));
        return m_postgres->uri(name);
    }

    static void bothEngines()
    {
        QTest::addColumn<QString>("engine");
        QTest::newRow("sqlite") << QStringLiteral("sqlite");
        QTest::newRow("postgresql") << QStringLiteral("postgresql");
    }

private Q_SLOTS:
    void initTestCase()
    {
        m_postgres = tessera::tests::PostgresServer::start(m_postgresWhy);
        if (!m_postgres)
            qWarning("PostgreSQL cases skipped: %s", qPrintable(m_postgresWhy));
    }

    void opensInWalMode()
    {
        QTemporaryDir dir;
        auto database = openOrFail(dir.filePath(QStringLiteral("t.sqlite")));
        QCOMPARE(*database->journalMode(), QStringLiteral("wal"));
        QCOMPARE(*database->schemaVersion(), 0);
    }

    void migratesOnceInOrder_data() { bothEngines(); }
    void migratesOnceInOrder()
    {
        QTemporaryDir dir;
        OPEN_LOCATION(dir, location);
        const QString path = location;
        {
            auto database = openOrFail(path);
            QVERIFY(database->migrate(migrations.mid(0, 1)).ok());
            QCOMPARE(*database->schemaVersion(), 1);
        }
        auto database = openOrFail(path);
        QVERIFY(database->migrate(migrations).ok());
        QCOMPARE(*database->schemaVersion(), 2);
        QVERIFY(database->migrate(migrations).ok()); // idempotent
        QCOMPARE(countRows(*database, QStringLiteral("schema_version")), 2);
    }

    void failingMigrationLeavesThePreviousVersion_data() { bothEngines(); }
    void failingMigrationLeavesThePreviousVersion()
    {
        QTemporaryDir dir;
        OPEN_LOCATION(dir, location);
        auto database = openOrFail(location);
        auto broken = migrations;
        broken.append({ 3, QStringLiteral("broken"), QStringLiteral("CREATE TABLE half (x INTEGER); THIS IS NOT SQL;") });
        const auto status = database->migrate(broken);
        QVERIFY(!status.ok());
        QVERIFY2(status.error().message.contains(QStringLiteral("migration 3 (broken)")), qPrintable(status.error().message));
        QCOMPARE(*database->schemaVersion(), 2);
        // The half-applied statement of migration 3 was rolled back with it.
        auto half = database->prepare(QStringLiteral("SELECT * FROM half"));
        QVERIFY(!half.ok() || !half->step().ok());
    }

    void refusesASchemaNewerThanItKnows_data() { bothEngines(); }
    void refusesASchemaNewerThanItKnows()
    {
        QTemporaryDir dir;
        OPEN_LOCATION(dir, location);
        auto database = openOrFail(location);
        QVERIFY(database->migrate(migrations).ok());
        const auto status = database->migrate(migrations.mid(0, 1));
        QVERIFY(!status.ok());
        QVERIFY(status.error().message.contains(QStringLiteral("newer")));
    }

    void loadsNumberedMigrationFiles()
    {
        QTemporaryDir dir;
        for (const auto& [name, sql] :
            { std::pair { "0002_b.sql", "CREATE TABLE b (x);" }, std::pair { "0001_a.sql", "CREATE TABLE a (x);" } }) {
            QFile file(dir.filePath(QLatin1String(name)));
            QVERIFY(file.open(QIODevice::WriteOnly));
            file.write(sql);
        }
        const auto loaded = loadMigrations(dir.path());
        QVERIFY(loaded.ok());
        QCOMPARE(loaded->size(), 2);
        QCOMPARE(loaded->at(0).name, QStringLiteral("a"));
        QCOMPARE(loaded->at(1).version, 2);

        QFile gap(dir.filePath(QStringLiteral("0004_d.sql")));
        QVERIFY(gap.open(QIODevice::WriteOnly));
        gap.close();
        QVERIFY(!loadMigrations(dir.path()).ok());
    }

    void transactionRollsBackUnlessCommitted_data() { bothEngines(); }
    void transactionRollsBackUnlessCommitted()
    {
        QTemporaryDir dir;
        OPEN_LOCATION(dir, location);
        auto database = openOrFail(location);
        QVERIFY(database->migrate(migrations).ok());
        {
            auto transaction = database->begin();
            QVERIFY(transaction.ok());
            QVERIFY(database->execute(QStringLiteral("INSERT INTO accounts (name, micro) VALUES ('a', 5)")).ok());
            // leaves the scope without commit()
        }
        QCOMPARE(countRows(*database, QStringLiteral("accounts")), 0);
        {
            auto transaction = database->begin();
            QVERIFY(database->execute(QStringLiteral("INSERT INTO accounts (name, micro) VALUES ('a', 5)")).ok());
            QVERIFY(transaction->commit().ok());
            QVERIFY(!transaction->commit().ok()); // a second commit is a misuse, reported
        }
        QCOMPARE(countRows(*database, QStringLiteral("accounts")), 1);
    }

    void constraintViolationIsAnError_data() { bothEngines(); }
    void constraintViolationIsAnError()
    {
        QTemporaryDir dir;
        OPEN_LOCATION(dir, location);
        auto database = openOrFail(location);
        QVERIFY(database->migrate(migrations).ok());
        auto insert = database->prepare(QStringLiteral("INSERT INTO accounts (name, micro) VALUES (?, ?)"));
        QVERIFY(insert.ok());
        insert->bind(1, QStringLiteral("a")).bind(2, std::int64_t(-1));
        const auto status = insert->run();
        QVERIFY(!status.ok());
        QCOMPARE(status.error().kind, ErrorKind::Constraint);
    }

    void preparedStatementsBindAndRead_data() { bothEngines(); }
    void preparedStatementsBindAndRead()
    {
        QTemporaryDir dir;
        OPEN_LOCATION(dir, location);
        auto database = openOrFail(location);
        QVERIFY(database->migrate(migrations).ok());
        auto insert = database->prepare(QStringLiteral("INSERT INTO accounts (name, micro) VALUES (?, ?)"));
        for (int i = 0; i < 3; ++i) {
            insert->bind(1, QStringLiteral("näme %1").arg(i)).bind(2, std::int64_t(i) * std::int64_t(1'000'000'000'000));
            QVERIFY(insert->run().ok());
        }
        const QByteArray blob("\x00\x01\xff\x7f", 4);
        auto note = database->prepare(QStringLiteral("INSERT INTO notes (account, body) VALUES (?, ?)"));
        note->bind(1, std::int64_t(1)).bind(2, blob);
        QVERIFY(note->run().ok());

        auto select = database->prepare(QStringLiteral("SELECT name, micro FROM accounts ORDER BY id"));
        int rows = 0;
        while (*select->step()) {
            QCOMPARE(select->columnText(0), QStringLiteral("näme %1").arg(rows));
            QCOMPARE(select->columnInt(1), std::int64_t(rows) * std::int64_t(1'000'000'000'000));
            ++rows;
        }
        QCOMPARE(rows, 3);
        auto body = database->prepare(QStringLiteral("SELECT body FROM notes"));
        QVERIFY(*body->step());
        QCOMPARE(body->columnBlob(0), blob);
    }

    // The id a new row took (SQLite's rowid, PostgreSQL's identity), in and out of a transaction.
    void lastInsertRowIdIsTheNewRowsId_data() { bothEngines(); }
    void lastInsertRowIdIsTheNewRowsId()
    {
        QTemporaryDir dir;
        OPEN_LOCATION(dir, location);
        auto database = openOrFail(location);
        QVERIFY(database->migrate(migrations).ok());
        QVERIFY(database->execute(QStringLiteral("INSERT INTO accounts (name, micro) VALUES ('a', 1)")).ok());
        QCOMPARE(database->lastInsertRowId(), std::int64_t(1));
        auto transaction = database->begin();
        QVERIFY(database->execute(QStringLiteral("INSERT INTO accounts (name, micro) VALUES ('b', 1)")).ok());
        QCOMPARE(database->lastInsertRowId(), std::int64_t(2));
        QVERIFY(transaction->commit().ok());
        QCOMPARE(countRows(*database, QStringLiteral("accounts")), 2);
    }

    // A statement run again after reset() takes its new bindings; changes() counts the rows the
    // last one touched.
    void aStatementRunsAgainWithNewBindings_data() { bothEngines(); }
    void aStatementRunsAgainWithNewBindings()
    {
        QTemporaryDir dir;
        OPEN_LOCATION(dir, location);
        auto database = openOrFail(location);
        QVERIFY(database->migrate(migrations).ok());
        QVERIFY(database->execute(QStringLiteral("INSERT INTO accounts (name, micro) VALUES ('a', 1), ('b', 2), ('c', 3)")).ok());
        auto raise = database->prepare(QStringLiteral("UPDATE accounts SET micro = micro + ? WHERE micro >= ?"));
        raise->bind(1, std::int64_t(10)).bind(2, std::int64_t(2));
        QVERIFY(raise->run().ok());
        QCOMPARE(database->changes(), 2);
        raise->bind(1, std::int64_t(100)).bind(2, std::int64_t(13));
        QVERIFY(raise->run().ok());
        QCOMPARE(database->changes(), 1);
        auto sum
            = database->prepare(QStringLiteral("SELECT SUM(micro), COUNT(*) FROM accounts WHERE name <> 'what?' AND name <> ?"));
        sum->bind(1, QStringLiteral("it's ? not a parameter"));
        QVERIFY(*sum->step());
        QCOMPARE(sum->columnInt(0), std::int64_t(1 + 12 + 113));
        QVERIFY(!*sum->step());
        auto nothing = database->prepare(QStringLiteral("SELECT body FROM notes WHERE id = ?"));
        nothing->bindNull(1);
        QVERIFY(!*nothing->step());
    }

    // The parameter forms the stores use: `?`, `?NNN` (used twice), a `?` in a literal or a
    // comment (with an apostrophe in it) is text; one left unbound is NULL.
    void parametersAreNumberedAsSqliteNumbersThem_data() { bothEngines(); }
    void parametersAreNumberedAsSqliteNumbersThem()
    {
        QTemporaryDir dir;
        OPEN_LOCATION(dir, location);
        auto database = openOrFail(location);
        QVERIFY(database->migrate(migrations).ok());
        QVERIFY(
            database->execute(QStringLiteral("INSERT INTO accounts (name, micro) VALUES ('a?', 1), ('b', 2), ('c', 3)")).ok());
        auto numbered = database->prepare(QStringLiteral("SELECT COUNT(*) FROM accounts -- isn't it? \n"
                                                         "WHERE (micro = ?1 OR micro = ?2 OR ?1 = 3) AND name <> '?' /* ? */"));
        numbered->bind(1, std::int64_t(1)).bind(2, std::int64_t(2));
        QVERIFY(*numbered->step());
        QCOMPARE(numbered->columnInt(0), std::int64_t(2));
        auto unbound = database->prepare(QStringLiteral("SELECT COUNT(*) FROM accounts WHERE name = ? OR micro = ?"));
        unbound->bind(1, QStringLiteral("a?"));
        QVERIFY(*unbound->step());
        QCOMPARE(unbound->columnInt(0), std::int64_t(1));
        // Stepped again after its last row, it runs again.
        QVERIFY(!*unbound->step());
        QVERIFY(*unbound->step());
        QCOMPARE(unbound->columnInt(0), std::int64_t(1));
    }

    // A transaction in which a statement failed commits nothing, and says so; a second begin()
    // on one connection is refused.
    void aFailedTransactionCommitsNothing_data() { bothEngines(); }
    void aFailedTransactionCommitsNothing()
    {
        QTemporaryDir dir;
        OPEN_LOCATION(dir, location);
        auto database = openOrFail(location);
        QVERIFY(database->migrate(migrations).ok());
        {
            auto transaction = database->begin();
            QVERIFY(transaction.ok());
            QVERIFY(!database->begin().ok());
            QVERIFY(database->execute(QStringLiteral("INSERT INTO accounts (name, micro) VALUES ('a', 1)")).ok());
            QVERIFY(!database->execute(QStringLiteral("INSERT INTO accounts (name, micro) VALUES ('a', 2)")).ok());
            const auto committed = transaction->commit();
            // SQLite keeps the statements that succeeded; PostgreSQL fails the whole transaction.
            if (database->engine() == Engine::PostgreSQL)
                QVERIFY(!committed.ok());
        }
        QCOMPARE(countRows(*database, QStringLiteral("accounts")), database->engine() == Engine::PostgreSQL ? 0 : 1);
    }

    // The migrations' types on PostgreSQL: a column may be called `blob` (a name, not a type), an
    // INTEGER holds 64 bits, a BLOB is bytes.
    void migrationTypesAreTranslatedNotNames_data() { bothEngines(); }
    void migrationTypesAreTranslatedNotNames()
    {
        QTemporaryDir dir;
        OPEN_LOCATION(dir, location);
        auto database = openOrFail(location);
        const QList<Migration> named { { 1, QStringLiteral("named"),
            QStringLiteral("CREATE TABLE uploads (blob TEXT NOT NULL, size INTEGER NOT NULL, body BLOB, score REAL, "
                           "PRIMARY KEY (blob, size)) WITHOUT ROWID;") } };
        QVERIFY(database->migrate(named).ok());
        auto insert = database->prepare(QStringLiteral("INSERT INTO uploads (blob, size, body, score) VALUES (?, ?, ?, ?)"));
        insert->bind(1, QStringLiteral("ab12")).bind(2, std::int64_t(1) << 40).bind(3, QByteArray("\0x", 2)).bind(4, 0.1);
        QVERIFY(insert->run().ok());
        auto select = database->prepare(QStringLiteral("SELECT blob, size, body, score FROM uploads"));
        QVERIFY(*select->step());
        QCOMPARE(select->columnText(0), QStringLiteral("ab12"));
        QCOMPARE(select->columnInt(1), std::int64_t(1) << 40);
        QCOMPARE(select->columnBlob(2), QByteArray("\0x", 2));
        QCOMPARE(select->columnDouble(3), 0.1);
    }

    // The broker's own migrations, as a broker applies them: every one, on both engines.
    void theBrokerSchemaMigrates_data() { bothEngines(); }
    void theBrokerSchemaMigrates()
    {
        QTemporaryDir dir;
        OPEN_LOCATION(dir, location);
        auto database = openMigrated(location, QStringLiteral(":/migrations/broker"));
        QVERIFY2(database.ok(), qPrintable(database.ok() ? QString() : database.error().toString()));
        const auto latest = loadMigrations(QStringLiteral(":/migrations/broker"));
        QCOMPARE(*(*database)->schemaVersion(), int(latest->size()));
    }

    // A connection the server dropped (a restart, a failover) is opened again: the statement that
    // met the drop fails, the next one runs, prepared statements included.
    void aDroppedConnectionIsOpenedAgain()
    {
        if (!m_postgres)
            QSKIP(qPrintable(m_postgresWhy));
        QTemporaryDir dir;
        const QString location = locationOn(QStringLiteral("postgresql"), dir);
        auto first = openOrFail(location);
        QVERIFY(first->migrate(migrations).ok());
        QVERIFY(execute(
            *first, QStringLiteral("INSERT INTO accounts (name, micro) VALUES (?, ?)"), QStringLiteral("a"), std::int64_t(5))
                    .ok());
        auto other = openOrFail(location);
        QVERIFY(other
                    ->execute(QStringLiteral("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                             "WHERE pid <> pg_backend_pid() AND datname = current_database()"))
                    .ok());
        (void)first->execute(QStringLiteral("SELECT 1")); // may meet the drop
        auto row = query(*first, QStringLiteral("SELECT micro FROM accounts WHERE name = ?"), QStringLiteral("a"));
        QVERIFY2(row.ok(), row.ok() ? "" : qPrintable(row.error().toString()));
        QVERIFY(*fetch(*row));
        QCOMPARE(row->columnInt(0), std::int64_t(5));
    }

    // PostgreSQL: a row another transaction holds is busy once the lock wait (busyTimeoutMs) ends,
    // as a SQLite file another process writes is.
    void aRowAnotherTransactionHoldsIsBusy()
    {
        if (!m_postgres)
            QSKIP(qPrintable(m_postgresWhy));
        QTemporaryDir dir;
        const QString location = locationOn(QStringLiteral("postgresql"), dir);
        auto first = openOrFail(location);
        QVERIFY(first->migrate(migrations).ok());
        QVERIFY(first->execute(QStringLiteral("INSERT INTO accounts (name, micro) VALUES ('a', 1)")).ok());
        auto holding = first->begin();
        QVERIFY(first->execute(QStringLiteral("UPDATE accounts SET micro = 2 WHERE name = 'a'")).ok());
        DbStatus secondStatus;
        std::optional<ErrorKind> beginKind;
        std::thread other([&] {
            auto second = openOrFail(location, DatabaseOptions { 50, DatabaseOptions::Synchronous::Full });
            // A transaction waits for the writer lock, as SQLite's BEGIN IMMEDIATE waits for the
            // write lock; a statement outside one waits for the row.
            if (auto transaction = second->begin(); !transaction)
                beginKind = transaction.error().kind;
            secondStatus = second->execute(QStringLiteral("UPDATE accounts SET micro = 3 WHERE name = 'a'"));
        });
        other.join();
        QCOMPARE(beginKind, std::optional<ErrorKind>(ErrorKind::Busy));
        QVERIFY(!secondStatus.ok());
        QCOMPARE(secondStatus.error().kind, ErrorKind::Busy);
        QVERIFY(holding->commit().ok());
        QCOMPARE(first->engine(), Engine::PostgreSQL);
    }

    // A server that is not there is an error that says where, without the password.
    void aServerThatIsNotThereIsAnError()
    {
        QVERIFY(isPostgresUri(QStringLiteral("postgresql://db.example/tessera")));
        QVERIFY(isPostgresUri(QStringLiteral("postgres://u@/tessera?host=/run/postgresql")));
        QVERIFY(!isPostgresUri(QStringLiteral("/var/lib/tessera/broker.sqlite")));
        for (const auto& uri : { QStringLiteral("postgresql://tessera:secret@/nowhere?host=/nonexistent-folder"),
                 QStringLiteral("postgresql:///nowhere?host=/nonexistent-folder&password=secret") }) {
            const auto database = Database::open(uri);
            QVERIFY(!database.ok());
            QCOMPARE(database.error().kind, ErrorKind::CannotOpen);
            QVERIFY2(database.error().message.contains(QStringLiteral("cannot connect")), qPrintable(database.error().message));
            QVERIFY2(!database.error().message.contains(QStringLiteral("secret")), qPrintable(database.error().message));
        }
    }

    void diskFullIsAnErrorAndLosesNothing()
    {
        QTemporaryDir dir;
        auto database = openOrFail(dir.filePath(QStringLiteral("t.sqlite")));
        QVERIFY(database->migrate(migrations).ok());
        QVERIFY(database->execute(QStringLiteral("INSERT INTO accounts (name, micro) VALUES ('kept', 1)")).ok());
        // Cap the file at its current size: the next growth fails as a full disk would.
        auto pages = database->prepare(QStringLiteral("PRAGMA page_count"));
        QVERIFY(*pages->step());
        const auto pageCount = pages->columnInt(0);
        QVERIFY(database->execute(QStringLiteral("PRAGMA max_page_count=%1").arg(pageCount)).ok());

        {
            auto transaction = database->begin();
            auto note = database->prepare(QStringLiteral("INSERT INTO notes (account, body) VALUES (1, ?)"));
            note->bind(1, QByteArray(1 << 20, 'x'));
            const auto status = note->run();
            QVERIFY(!status.ok());
            QCOMPARE(status.error().kind, ErrorKind::Full);
            QVERIFY2(status.error().message.contains(QStringLiteral("disk is full")), qPrintable(status.error().message));
        }
        QCOMPARE(countRows(*database, QStringLiteral("accounts")), 1);
        QCOMPARE(countRows(*database, QStringLiteral("notes")), 0);
    }

    void corruptFileIsAnErrorNotACrash()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("t.sqlite"));
        QFile file(path);
        QVERIFY(file.open(QIODevice::WriteOnly));
        QByteArray garbage(8192, '\0');
        for (int i = 0; i < garbage.size(); ++i)
            garbage[i] = char((i * 131 + 17) % 251);
        file.write(garbage);
        file.close();
        const auto database = Database::open(path);
        QVERIFY(!database.ok());
        QCOMPARE(database.error().kind, ErrorKind::Corrupt);
        QVERIFY2(database.error().message.contains(QStringLiteral("damaged")), qPrintable(database.error().message));
    }

    void missingFolderIsAnError()
    {
        QTemporaryDir dir;
        const auto database = Database::open(dir.filePath(QStringLiteral("no/such/folder/t.sqlite")));
        QVERIFY(!database.ok());
        QCOMPARE(database.error().kind, ErrorKind::CannotOpen);
    }

    void lockedDatabaseReportsBusy()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("t.sqlite"));
        auto first = openOrFail(path);
        QVERIFY(first->migrate(migrations).ok());
        auto holding = first->begin();
        QVERIFY(holding.ok());

        // A second connection, on its own thread as the house rule says.
        DbStatus secondStatus;
        std::thread other([&] {
            auto second = openOrFail(path, DatabaseOptions { 50, DatabaseOptions::Synchronous::Full });
            auto transaction = second->begin();
            if (!transaction.ok())
                secondStatus = transaction.error();
        });
        other.join();
        QVERIFY(!secondStatus.ok());
        QCOMPARE(secondStatus.error().kind, ErrorKind::Busy);
        QVERIFY(holding->commit().ok());
    }
};

QTEST_GUILESS_MAIN(DatabaseTest)
#include "tst_database.moc"
