#pragma once

// The store a broker test runs on (docs/STORE.md, "Tests"): SQLite in the broker's data folder,
// or, where the test runs with TESSERA_TEST_STORE=postgresql (ctest's *_postgresql entries), a new
// database on a PostgreSQL server this process starts once. The same test cases run on both.

#include "postgresserver.h"

#include <QHash>
#include <QString>
#include <QtGlobal>

#include <memory>

namespace tessera::tests {

class TestStore {
public:
    static bool onPostgres() { return qEnvironmentVariable("TESSERA_TEST_STORE") == QStringLiteral("postgresql"); }

    // Whether the store can be used; `why` says why not (a test's initTestCase skips with it).
    static bool ready(QString& why)
    {
        if (!onPostgres())
            return true;
        auto& self = instance();
        if (!self.m_server && self.m_why.isEmpty())
            self.m_server = PostgresServer::start(self.m_why);
        why = self.m_why;
        return self.m_server != nullptr;
    }

    // What Broker/Database says for the broker of a data folder: empty (SQLite in that folder), or
    // the URI of a database of its own, new the first time the folder is named (a broker reopened
    // on the same folder finds its records again).
    static QString databaseFor(const QString& dataFolder)
    {
        if (!onPostgres())
            return {};
        QString why;
        if (!ready(why))
            qFatal("no PostgreSQL for the test: %s", qPrintable(why));
        auto& self = instance();
        if (const auto found = self.m_databases.constFind(dataFolder); found != self.m_databases.cend())
            return *found;
        const QString name = QStringLiteral("broker_%1").arg(self.m_databases.size() + 1);
        if (!self.m_server->createDatabase(name, why))
            qFatal("cannot create database %s: %s", qPrintable(name), qPrintable(why));
        return *self.m_databases.insert(dataFolder, self.m_server->uri(name));
    }

    // Where a test's own database is: the SQLite file it names, or a database of its own on the
    // test's PostgreSQL server.
    static QString location(const QString& sqlitePath) { return onPostgres() ? databaseFor(sqlitePath) : sqlitePath; }

    static PostgresServer* server() { return instance().m_server.get(); }
    // Stops the server (cleanupTestCase: while Qt still runs, not at exit).
    static void shutdown() { instance().m_server.reset(); }

private:
    static TestStore& instance()
    {
        static TestStore store;
        return store;
    }

    std::unique_ptr<PostgresServer> m_server;
    QString m_why;
    QHash<QString, QString> m_databases;
};

} // namespace tessera::tests
