#pragma once

// A PostgreSQL server of a test's own (docs/STORE.md, "Tests"): Debian's initdb and pg_ctl
// (postgresql-15) in a new folder under /tmp, listening on a Unix socket in that folder only (no
// TCP port), with trust authentication for its one role, `tessera`. PostgreSQL refuses to run as
// root, so a test running as root runs the server as the `postgres` user. Stopped and removed
// when destroyed. Where PostgreSQL is not installed, start() says so and tests skip.

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QString>
#include <QStringList>

#include <memory>

#include <cerrno>

#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

namespace tessera::tests {

class PostgresServer {
public:
    // The server, or why there is none (`why`; empty where PostgreSQL is not installed).
    static std::unique_ptr<PostgresServer> start(QString& why)
    {
        const QString bin = binDirectory();
        if (bin.isEmpty()) {
            why = QStringLiteral("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb; "
                                 "scripts/install-deps.sh installs postgresql-15)");
            return nullptr;
        }
        // libpq in this process reads PG* variables (PGOPTIONS could set anything): none of the
        // caller's environment reaches the test's server.
        for (const auto& name : QProcessEnvironment::systemEnvironment().keys())
            if (name.startsWith(QStringLiteral("PG")))
                qunsetenv(name.toLocal8Bit().constData());
        sweepStale(bin);
        QByteArray folder("/tmp/tessera-pg-XXXXXX");
        if (!mkdtemp(folder.data())) {
            why = QStringLiteral("cannot make a folder under /tmp");
            return nullptr;
        }
        QFile owner(QString::fromLocal8Bit(folder) + QStringLiteral("/owner.pid"));
        if (owner.open(QIODevice::WriteOnly))
            owner.write(QByteArray::number(qint64(getpid())));
        owner.close();
        std::unique_ptr<PostgresServer> server(new PostgresServer(bin, QString::fromLocal8Bit(folder)));
        if (!server->prepareOwner(why) || !server->initialise(why) || !server->launch(why))
            return nullptr;
        return server;
    }

    ~PostgresServer()
    {
        if (m_started)
            runAsOwner(m_bin + QStringLiteral("/pg_ctl"),
                { QStringLiteral("-D"), dataFolder(), QStringLiteral("-m"), QStringLiteral("immediate"),
                    QStringLiteral("stop") });
        QDir(m_folder).removeRecursively();
    }

    // A postgresql:// URI of one of its databases.
    QString uri(const QString& database = QStringLiteral("postgres")) const
    {
        return QStringLiteral("postgresql:///%1?host=%2&user=tessera").arg(database, m_folder);
    }
    QString folder() const { return m_folder; }
    QString log() const
    {
        QFile file(m_folder + QStringLiteral("/server.log"));
        return file.open(QIODevice::ReadOnly) ? QString::fromUtf8(file.readAll().right(4000)) : QString();
    }

    // Runs a program of the server's (psql, createdb, ...) as the server's user; its exit code.
    int runAsOwner(const QString& program, const QStringList& arguments, QString* output = nullptr) const
    {
        QProcess process;
        process.setProcessChannelMode(QProcess::MergedChannels);
        QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
        for (const auto& name : environment.keys())
            if (name.startsWith(QStringLiteral("PG")))
                environment.remove(name);
        process.setProcessEnvironment(environment);
        if (m_asPostgres)
            process.start(QStringLiteral("runuser"),
                QStringList { QStringLiteral("-u"), QStringLiteral("postgres"), QStringLiteral("--"), program } + arguments);
        else
            process.start(program, arguments);
        const bool finished = process.waitForFinished(120'000);
        if (output)
            *output = QString::fromUtf8(process.readAll());
        return finished && process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1;
    }

    // A new, empty database of that name.
    bool createDatabase(const QString& name, QString& why) const
    {
        const int code = runAsOwner(m_bin + QStringLiteral("/createdb"),
            { QStringLiteral("-h"), m_folder, QStringLiteral("-U"), QStringLiteral("tessera"), name }, &why);
        return code == 0;
    }

private:
    PostgresServer(QString bin, QString folder)
        : m_bin(std::move(bin))
        , m_folder(std::move(folder))
        , m_asPostgres(geteuid() == 0)
    { }

    static QString binDirectory()
    {
        const QDir versions(QStringLiteral("/usr/lib/postgresql"));
        auto entries = versions.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name);
        for (auto it = entries.crbegin(); it != entries.crend(); ++it) {
            const QString bin = versions.filePath(*it + QStringLiteral("/bin"));
            if (QFile::exists(bin + QStringLiteral("/initdb")) && QFile::exists(bin + QStringLiteral("/pg_ctl")))
                return bin;
        }
        return {};
    }

    QString dataFolder() const { return m_folder + QStringLiteral("/data"); }

    // The servers of tests that died without stopping theirs (a crash, a ctest timeout): their
    // folder's owner.pid names a process that is gone. Stopped, and their folders removed.
    static void sweepStale(const QString& bin)
    {
        const QDir tmp(QStringLiteral("/tmp"));
        for (const auto& name : tmp.entryList({ QStringLiteral("tessera-pg-*") }, QDir::Dirs | QDir::NoDotAndDotDot)) {
            QFile owner(tmp.filePath(name + QStringLiteral("/owner.pid")));
            if (!owner.open(QIODevice::ReadOnly))
                continue;
            const auto pid = owner.readAll().trimmed().toLongLong();
            if (pid <= 0 || ::kill(pid_t(pid), 0) == 0 || errno != ESRCH)
                continue; // its test still runs
            PostgresServer stale(bin, tmp.filePath(name));
            stale.m_started = QFile::exists(stale.dataFolder() + QStringLiteral("/postmaster.pid"));
        } // ~PostgresServer stops it and removes the folder
    }

    bool prepareOwner(QString& why) const
    {
        if (!m_asPostgres)
            return true;
        const passwd* postgres = getpwnam("postgres");
        if (!postgres || chown(m_folder.toLocal8Bit().constData(), postgres->pw_uid, postgres->pw_gid) != 0) {
            why = QStringLiteral("running as root, and the postgres user cannot own %1").arg(m_folder);
            return false;
        }
        return true;
    }

    bool initialise(QString& why) const
    {
        QString output;
        const int code = runAsOwner(m_bin + QStringLiteral("/initdb"),
            { QStringLiteral("-D"), dataFolder(), QStringLiteral("-U"), QStringLiteral("tessera"), QStringLiteral("-A"),
                QStringLiteral("trust"), QStringLiteral("-E"), QStringLiteral("UTF8"), QStringLiteral("--locale=C"),
                QStringLiteral("--no-sync") },
            &output);
        if (code != 0)
            why = QStringLiteral("initdb failed: ") + output.right(2000);
        return code == 0;
    }

    bool launch(QString& why)
    {
        // Its socket in its own folder, no TCP; fsync off: a test's server need not survive a
        // power cut (the store's own durability is SQLite's and PostgreSQL's defaults elsewhere).
        const QString options = QStringLiteral("-k %1 -c listen_addresses='' -c fsync=off -c max_connections=60").arg(m_folder);
        QString output;
        const int code = runAsOwner(m_bin + QStringLiteral("/pg_ctl"),
            { QStringLiteral("-D"), dataFolder(), QStringLiteral("-o"), options, QStringLiteral("-l"),
                m_folder + QStringLiteral("/server.log"), QStringLiteral("-w"), QStringLiteral("-t"), QStringLiteral("60"),
                QStringLiteral("start") },
            &output);
        m_started = code == 0;
        if (!m_started)
            why = QStringLiteral("pg_ctl start failed: %1 %2").arg(output.right(1000), log());
        return m_started;
    }

    QString m_bin;
    QString m_folder;
    bool m_asPostgres = false;
    bool m_started = false;
};

} // namespace tessera::tests
