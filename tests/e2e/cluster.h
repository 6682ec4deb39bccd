#pragma once

// A broker and nodes as real processes on 127.0.0.1, for the end-to-end tests (tst_network,
// tst_hostile), on the rules of scripts/lib/cluster.sh.

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QTest>

#include <support/processrun.h>

#include <memory>

#include <cmath>
#include <csignal>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tessera::tests::e2e {

inline const QString Bin = QStringLiteral(TESSERA_BIN_DIR);
inline const QString Job = QStringLiteral(TESSERA_SOURCE_DIR "/examples/jobs/fashion-mnist-mlp.json");
inline const QString Python = QStringLiteral("/usr/bin/python3");

using tessera::tests::Run;
using tessera::tests::run;

// A port free now and below the kernel's ephemeral range (ip_local_port_range; 32768 and up by
// default), so that no outgoing connection of this test or of one running beside it (make test runs
// two at once) takes it before the broker binds it. scripts/free_port.py does the same for the scripts.
inline int freePort()
{
    int ephemeral = 32768;
    QFile range(QStringLiteral("/proc/sys/net/ipv4/ip_local_port_range"));
    if (range.open(QIODevice::ReadOnly)) {
        bool ok = false;
        const int low = QString::fromLatin1(range.readAll()).simplified().section(u' ', 0, 0).toInt(&ok);
        if (ok && low > 21000)
            ephemeral = low;
    }
    for (int attempt = 0; attempt < 500; ++attempt) {
        const int port = 20000 + int(QRandomGenerator::global()->bounded(ephemeral - 20000));
        const int probe = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in address {};
        address.sin_family = AF_INET;
        address.sin_port = htons(std::uint16_t(port));
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        const bool free = ::bind(probe, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
        ::close(probe);
        if (free)
            return port;
    }
    qFatal("no free port between 20000 and the kernel's ephemeral range");
}

// A job trained by tessera-node train-local into `directory`: the canonical hash of its final
// weights (empty when it failed) and what it printed.
struct Local {
    QString hash;
    QString output;
};
inline Local trainLocally(const QString& jobFile, const QString& directory)
{
    const auto local = run(Bin + QStringLiteral("/tessera-node"),
        { QStringLiteral("--config"), QStringLiteral("/dev/null"), QStringLiteral("train-local"), jobFile,
            QStringLiteral("--out"), directory });
    QFile report(QDir(directory).filePath(QStringLiteral("report.json")));
    if (local.exitCode != 0 || !report.open(QIODevice::ReadOnly))
        return { {}, local.output };
    return { QJsonDocument::fromJson(report.readAll()).object().value(QStringLiteral("finalWeightsHash")).toString(),
        local.output };
}

// A broker and nodes in a scratch folder, stopped (SIGKILL) when the cluster goes out of scope, on
// the rules of scripts/lib/cluster.sh: a free port below the ephemeral range, `[Broker]
// DataDirectory, Faucet` plus the test's settings (CanaryPercent=0 unless a test says otherwise: the
// tests count payments), the broker counts as started once `tessera-job list` answers (120 s), each
// node `[Node] DataDirectory, Name` (and `[Compute] BenchmarkOnFirstStart`, startNode), every process appends to NAME.log, the
// owner is owner.key.
class Cluster {
public:
    Cluster()
        : m_port(freePort())
    {
        // TESSERA_KEEP_TEST_DIRS=1 keeps each cluster's folder (logs, databases) for a post-mortem.
        m_dir.setAutoRemove(qEnvironmentVariableIsEmpty("TESSERA_KEEP_TEST_DIRS"));
    }
    ~Cluster()
    {
        for (auto& process : m_processes) {
            process->kill();
            process->waitForFinished(5000);
        }
    }

    QString endpoint() const { return QStringLiteral("tcp://127.0.0.1:%1").arg(m_port); }
    QString path(const QString& name) const { return m_dir.filePath(name); }

    enum class Money { Faucet, OperatorOnly };
    QProcess* startBroker(const QStringList& extra = {}, const QString& settings = {}, Money money = Money::Faucet)
    {
        // A local broker's faucet funds the job owner and bonds each node's stake (a real network's
        // operator credits accounts by hand: Money::OperatorOnly). No canaries: the tests count
        // payments.
        writeFile(path(QStringLiteral("broker.ini")),
            QStringLiteral("[Broker]\nDataDirectory=%1\nFaucet=%2\nCanaryPercent=0\n%3")
                .arg(path(QStringLiteral("broker")), money == Money::Faucet ? QStringLiteral("true") : QStringLiteral("false"),
                    settings));
        m_broker = start(Bin + QStringLiteral("/tessera-broker"),
            QStringList { QStringLiteral("--config"), path(QStringLiteral("broker.ini")), QStringLiteral("--bind"), endpoint() }
                + extra,
            QStringLiteral("broker"));
        // A plaintext broker answers before the test goes on (a loaded machine starts it slowly).
        if (extra.isEmpty() && !QTest::qWaitFor([&] { return job({ QStringLiteral("list") }, 5'000).exitCode == 0; }, 120'000))
            qWarning("the broker did not answer within 120 s: %s", qPrintable(log(QStringLiteral("broker"))));
        return m_broker;
    }

    // A node measures its CPU on its first start (Compute/BenchmarkOnFirstStart, about 2 s); most
    // tests start many new nodes and skip it, one test keeps it.
    enum class FirstStart { SkipBenchmark, Benchmark };
    // compute: more [Compute] settings ("MaxThreads=1\n"); environment: "NAME=value" entries the
    // node's process gets besides the test's own (another CPU's kernel choices, for instance).
    // The kernel choices an older CPU makes (no AVX, an old OpenBLAS core, the portable matrix
    // product's generic kernel) and a newer one's (AVX2 everywhere): two "machines" on this one.
    static QStringList olderCpu()
    {
        return { QStringLiteral("ATEN_CPU_CAPABILITY=default"), QStringLiteral("OPENBLAS_CORETYPE=Prescott"),
            QStringLiteral("TESSERA_PORTABLE_ISA=generic") };
    }
    static QStringList newerCpu()
    {
        return { QStringLiteral("ATEN_CPU_CAPABILITY=avx2"), QStringLiteral("OPENBLAS_CORETYPE=Haswell"),
            QStringLiteral("TESSERA_PORTABLE_ISA=avx2") };
    }

    QProcess* startNode(int index, const QStringList& brokers = {}, FirstStart first = FirstStart::SkipBenchmark,
        const QString& compute = {}, const QStringList& environment = {})
    {
        const QString ini = path(QStringLiteral("node%1.ini").arg(index));
        writeFile(ini,
            QStringLiteral("[Node]\nDataDirectory=%1\nName=node-%2\n[Compute]\nBenchmarkOnFirstStart=%3\n%4")
                .arg(path(QStringLiteral("node%1").arg(index)))
                .arg(index)
                .arg(first == FirstStart::Benchmark ? QStringLiteral("true") : QStringLiteral("false"), compute));
        QStringList arguments { QStringLiteral("--config"), ini, QStringLiteral("run") };
        for (const auto& broker : brokers.isEmpty() ? QStringList { endpoint() } : brokers)
            arguments << QStringLiteral("--broker") << broker;
        return start(Bin + QStringLiteral("/tessera-node"), arguments, QStringLiteral("node%1").arg(index), environment);
    }

    // name: the node's name, its folder and its log (cheater-MODE when empty).
    QProcess* startCheater(const QString& mode, const QStringList& environment = {}, const QString& name = {})
    {
        const QString named = name.isEmpty() ? QStringLiteral("cheater-") + mode : name;
        return start(QStringLiteral(TESSERA_CHEATER),
            { QStringLiteral("--broker"), endpoint(), QStringLiteral("--data"), path(named), QStringLiteral("--mode"), mode,
                QStringLiteral("--name"), named },
            named, environment);
    }

    // A node written in Python from the docs alone (tests/e2e/python/python_node.py); extra: its
    // options (a hostile one's --poison, --fail-with, --shards).
    QProcess* startPythonNode(const QString& name, const QStringList& extra = {})
    {
        return start(Python,
            QStringList { QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/python_node.py"), endpoint(),
                QStringLiteral("--name"), name }
                + extra,
            name);
    }

    // A node's record in NODES, by its name (empty when the broker has none).
    QJsonObject nodeNamed(const QString& name)
    {
        for (const auto& value : nodes()) {
            if (value.toObject().value(QStringLiteral("name")).toString() == name)
                return value.toObject();
        }
        return {};
    }

    QString log(const QString& name) const
    {
        QFile file(path(name + QStringLiteral(".log")));
        return file.open(QIODevice::ReadOnly) ? QString::fromUtf8(file.readAll()) : QString();
    }

    // tessera-job as the cluster's job owner (its identity in the cluster's folder), or as another
    // identity, on this broker or another address of it (with #KEY under CURVE).
    Run job(const QStringList& arguments, int timeoutMs = 300'000)
    {
        return jobAs(QStringLiteral("owner"), arguments, timeoutMs);
    }
    Run jobAs(const QString& identity, const QStringList& arguments, int timeoutMs = 300'000, const QString& address = {})
    {
        return run(Bin + QStringLiteral("/tessera-job"),
            QStringList { QStringLiteral("--config"), QStringLiteral("/dev/null"), QStringLiteral("--identity"),
                path(identity + QStringLiteral(".key")), QStringLiteral("--broker"), address.isEmpty() ? endpoint() : address }
                + arguments,
            timeoutMs);
    }

    // An identity's account (its public key), created on first use.
    QString account(const QString& identity = QStringLiteral("owner"))
    {
        const auto me = jobAs(identity, { QStringLiteral("whoami"), QStringLiteral("--json") }, 20'000);
        return QJsonDocument::fromJson(me.standardOutput.toUtf8()).object().value(QStringLiteral("account")).toString();
    }

    QString submit(const QString& jobFile = Job)
    {
        const auto submitted = job({ QStringLiteral("submit"), jobFile });
        if (submitted.exitCode != 0)
            qWarning("%s", qPrintable(submitted.output));
        return submitted.standardOutput.trimmed();
    }

    QJsonObject status(const QString& jobId)
    {
        const auto reply = job({ QStringLiteral("status"), jobId, QStringLiteral("--json") }, 20'000);
        return QJsonDocument::fromJson(reply.standardOutput.toUtf8()).object();
    }

    // Waits until the job has aggregated at least `round` rounds.
    bool waitForRound(const QString& jobId, int round)
    {
        return QTest::qWaitFor([&] { return status(jobId).value(QStringLiteral("round")).toInt() >= round; }, 240'000);
    }

    QJsonObject waitForEnd(const QString& jobId)
    {
        const auto finished = job({ QStringLiteral("wait"), jobId, QStringLiteral("--json") });
        return QJsonDocument::fromJson(finished.standardOutput.toUtf8()).object();
    }

    QProcess* broker() const { return m_broker; }

    // The operator's tessera-broker commands on this broker's books (credit, balance).
    Run brokerCommand(const QStringList& arguments)
    {
        return run(Bin + QStringLiteral("/tessera-broker"),
            QStringList { QStringLiteral("--config"), path(QStringLiteral("broker.ini")) } + arguments, 60'000);
    }

    // A CURVE broker (--keys broker.key) once its key file is written; its public key, or empty.
    QString startCurveBroker(const QStringList& extra = {})
    {
        const QString keys = path(QStringLiteral("broker.key"));
        startBroker(QStringList { QStringLiteral("--keys"), keys } + extra);
        if (!QTest::qWaitFor([&] { return QFile::exists(keys); }, 60'000)) // written whole (QSaveFile)
            return {};
        QFile keyFile(keys);
        if (!keyFile.open(QIODevice::ReadOnly))
            return {};
        return QString::fromLatin1(keyFile.readLine()).trimmed().section(u' ', 1);
    }

    // The CURVE address of a broker started with --keys FILE: tcp://...#KEY.
    QString curveAddress(const QString& keyFile) const
    {
        QFile file(keyFile);
        if (!file.open(QIODevice::ReadOnly))
            return {};
        return endpoint() + u'#' + QString::fromLatin1(file.readLine()).trimmed().section(u' ', 1);
    }

    // A node's account: the public key of the identity in its data folder.
    QString nodeAccount(int index) const
    {
        QFile file(path(QStringLiteral("node%1/node.key").arg(index)));
        if (!file.open(QIODevice::ReadOnly))
            return {};
        return QString::fromLatin1(file.readLine()).trimmed().section(u' ', 1);
    }

    // The books balance: the sum of all accounts is zero and none is negative.
    bool ledgerConsistent()
    {
        const auto ledger = job({ QStringLiteral("ledger") }, 20'000);
        if (ledger.exitCode != 0)
            qWarning("%s", qPrintable(ledger.output));
        return ledger.exitCode == 0;
    }

    // Micro-credits held by an account, from tessera-job balance.
    // An account's balance in micro-credits, or -1. A read: asked again (up to 3 times) when the
    // answer is not a balance, and what came back instead is logged.
    // What tessera-job audit --json says of the ledger's log: the entries it read, the head it checked.
    QJsonObject audit()
    {
        return QJsonDocument::fromJson(job({ QStringLiteral("audit"), QStringLiteral("--json") }).standardOutput.toUtf8())
            .object();
    }
    // The size of the ledger's log now; -1 when unknown.
    std::int64_t logSize()
    {
        const auto entries = audit().value(QStringLiteral("entries"));
        return entries.isDouble() ? entries.toInteger() : -1;
    }
    // A signed head of the whole ledger's log, as a head file (tessera-job check-head) holds it.
    QJsonObject logHead() { return audit().value(QStringLiteral("head")).toObject(); }
    // The broker's signing key (base64; tessera-job ledger --json), which signs its receipts and heads.
    QString signingKey()
    {
        return QJsonDocument::fromJson(job({ QStringLiteral("ledger"), QStringLiteral("--json") }).standardOutput.toUtf8())
            .object()
            .value(QStringLiteral("signingKey"))
            .toString();
    }
    // The size of the newest head of the ledger's log that node INDEX checked (log-heads.json); 0: none.
    std::int64_t keptLogSize(int index) const
    {
        QFile file(path(QStringLiteral("node%1/log-heads.json").arg(index)));
        if (!file.open(QIODevice::ReadOnly))
            return 0;
        const auto heads = QJsonDocument::fromJson(file.readAll()).object().value(QStringLiteral("heads")).toObject();
        return heads.isEmpty() ? 0 : heads.begin().value().toObject().value(QStringLiteral("size")).toInteger();
    }

    std::int64_t balanceOf(const QString& account)
    {
        for (int attempt = 0; attempt < 3; ++attempt) {
            const auto reply = job({ QStringLiteral("balance"), account }, 20'000);
            const auto text = reply.output.section(u':', 1).section(u' ', 1, 1);
            bool ok = false;
            const double credits = text.toDouble(&ok);
            if (ok)
                return std::llround(credits * 1e6);
            qWarning("balance of %s: exit %d: %s", qPrintable(account), reply.exitCode, qPrintable(reply.output));
        }
        return -1;
    }

    QJsonArray nodes()
    {
        return QJsonDocument::fromJson(job({ QStringLiteral("nodes"), QStringLiteral("--json") }, 20'000).standardOutput.toUtf8())
            .array();
    }

    QJsonArray checks(const QString& jobId)
    {
        return QJsonDocument::fromJson(
            job({ QStringLiteral("verifications"), jobId, QStringLiteral("--json") }, 20'000).standardOutput.toUtf8())
            .array();
    }

    static void writeFile(const QString& path, const QString& text)
    {
        QFile file(path);
        if (file.open(QIODevice::WriteOnly))
            file.write(text.toUtf8());
    }

    // Any program, as one of the cluster's: its output appended to LOG.log, stopped with the cluster.
    QProcess* start(const QString& program, const QStringList& arguments, const QString& log, const QStringList& environment = {})
    {
        auto process = std::make_unique<QProcess>();
        process->setProcessChannelMode(QProcess::MergedChannels);
        if (!environment.isEmpty()) {
            auto inherited = QProcessEnvironment::systemEnvironment();
            for (const auto& entry : environment)
                inherited.insert(entry.section(u'=', 0, 0), entry.section(u'=', 1));
            process->setProcessEnvironment(inherited);
        }
        process->setStandardOutputFile(path(log + QStringLiteral(".log")), QIODevice::Append);
        // A test that dies (a watchdog's abort) takes its cluster with it.
        process->setChildProcessModifier([] { ::prctl(PR_SET_PDEATHSIG, SIGKILL); });
        process->start(program, arguments);
        process->waitForStarted();
        m_processes.push_back(std::move(process));
        return m_processes.back().get();
    }

private:
    QTemporaryDir m_dir;
    int m_port;
    QProcess* m_broker = nullptr;
    std::vector<std::unique_ptr<QProcess>> m_processes;
};

} // namespace tessera::tests::e2e
