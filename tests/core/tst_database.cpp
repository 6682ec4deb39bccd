#include <core/storage/database.h>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

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

class DatabaseTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void opensInWalMode()
    {
        QTemporaryDir dir;
        auto database = openOrFail(dir.filePath(QStringLiteral("t.sqlite")));
        QCOMPARE(*database->journalMode(), QStringLiteral("wal"));
        QCOMPARE(*database->schemaVersion(), 0);
    }

    void migratesOnceInOrder()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("t.sqlite"));
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

    void failingMigrationLeavesThePreviousVersion()
    {
        QTemporaryDir dir;
        auto database = openOrFail(dir.filePath(QStringLiteral("t.sqlite")));
        auto broken = migrations;
        broken.append({ 3, QStringLiteral("broken"), QStringLiteral("CREATE TABLE half (x INTEGER); THIS IS NOT SQL;") });
        const auto status = database->migrate(broken);
        QVERIFY(!status.ok());
        QVERIFY2(status.error().message.contains(QStringLiteral("migration 3 (broken)")), qPrintable(status.error().message));
        QCOMPARE(*database->schemaVersion(), 2);
        // The half-applied statement of migration 3 was rolled back with it.
        QVERIFY(!database->prepare(QStringLiteral("SELECT * FROM half")).ok());
    }

    void refusesASchemaNewerThanItKnows()
    {
        QTemporaryDir dir;
        auto database = openOrFail(dir.filePath(QStringLiteral("t.sqlite")));
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

    void transactionRollsBackUnlessCommitted()
    {
        QTemporaryDir dir;
        auto database = openOrFail(dir.filePath(QStringLiteral("t.sqlite")));
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

    void constraintViolationIsAnError()
    {
        QTemporaryDir dir;
        auto database = openOrFail(dir.filePath(QStringLiteral("t.sqlite")));
        QVERIFY(database->migrate(migrations).ok());
        auto insert = database->prepare(QStringLiteral("INSERT INTO accounts (name, micro) VALUES (?, ?)"));
        QVERIFY(insert.ok());
        insert->bind(1, QStringLiteral("a")).bind(2, std::int64_t(-1));
        const auto status = insert->run();
        QVERIFY(!status.ok());
        QCOMPARE(status.error().kind, ErrorKind::Constraint);
    }

    void preparedStatementsBindAndRead()
    {
        QTemporaryDir dir;
        auto database = openOrFail(dir.filePath(QStringLiteral("t.sqlite")));
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
