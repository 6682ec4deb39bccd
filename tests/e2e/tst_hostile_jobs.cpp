// Hostile participants, round 2 (docs/SECURITY.md, "Hostile peers"), each against a real broker
// process with sandboxed tessera-nodes or nodes written in Python from the docs: a job owner whose
// code is nondeterministic or prints onto the worker's pipe, nodes that reveal poisoned results or
// report made-up failures, a stranger without credits whose model never finishes loading, another
// account on the machine of the practice broker's user. Each attack is refused; the honest nodes
// keep their stake and are paid, the honest jobs finish, and the books balance.

#include "cluster.h"

#include <cmath>
#include <unistd.h>

using namespace tessera::tests::e2e;

namespace {

// The fixture models of tests/compute/python/make_fixtures.py, made in the cluster's folder.
bool makeFixtures(Cluster& cluster)
{
    QProcess python;
    python.setProcessChannelMode(QProcess::MergedChannels);
    python.setWorkingDirectory(cluster.path(QString()));
    python.start(
        Python, { QStringLiteral(TESSERA_SOURCE_DIR "/tests/compute/python/make_fixtures.py"), cluster.path(QString()) });
    if (!python.waitForFinished(180'000) || python.exitCode() != 0) {
        qWarning("make_fixtures.py: %s", python.readAll().constData());
        return false;
    }
    return true;
}

QString torchScriptJob(const QString& name, const QString& model, double rate, int rounds = 1, int shards = 2,
    const QString& budget = QStringLiteral("20"))
{
    return QStringLiteral(R"({"version": 1, "name": "%1", "model": {"torchscript": {"file": "%2"}},
            "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
            "training": {"rounds": %4, "shardsPerRound": %5, "localSteps": 8, "batchSize": 16, "seed": 1,
                         "threads": 1, "checkpointInterval": 4},
            "budget": "%6", "verification": {"rate": %3}})")
        .arg(name, model)
        .arg(rate)
        .arg(rounds)
        .arg(shards)
        .arg(budget);
}

QString zooJob(const QString& name, int rounds, int shards, const QString& compression = QStringLiteral("int8"))
{
    return QStringLiteral(R"({"version": 1, "name": "%1", "model": {"zoo": "mlp", "hidden": [32]},
            "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
            "training": {"rounds": %2, "shardsPerRound": %3, "localSteps": 20, "batchSize": 32, "seed": 1,
                         "threads": 1, "checkpointInterval": 10},
            "aggregation": {"compression": "%4"},
            "budget": "20", "verification": {"rate": 0.0}})")
        .arg(name)
        .arg(rounds)
        .arg(shards)
        .arg(compression);
}

bool logSays(Cluster& cluster, const QString& log, const QString& text, int timeoutMs = 300'000)
{
    return QTest::qWaitFor([&] { return cluster.log(log).contains(text); }, timeoutMs);
}

} // namespace

class HostileJobsTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // Item 1 of the round: an owner's model whose every run differs (its output depends on where a
    // fresh tensor lies, as torch.empty's contents would), every result sampled. The two honest
    // nodes disagree, the broker's replay agrees with neither and a second replay not with the
    // first: the job's own code is at fault. Nobody is slashed, the owner gains nothing, the job
    // fails saying why. Beside it, a model that prints lines of the worker's own protocol
    // ("done", "progress ...") from forward() trains to the end: prints never reach the supervisor.
    void anHonestNodeIsNeverSlashedWhateverTheJobsCodeDoes()
    {
        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("SelfVerifyAfterSeconds=5\nDisputeTimeoutSeconds=30\n"));
        QVERIFY(makeFixtures(cluster));
        const QString nondeterministic = cluster.path(QStringLiteral("nondeterministic.json"));
        Cluster::writeFile(
            nondeterministic, torchScriptJob(QStringLiteral("nondeterministic"), QStringLiteral("nondeterministic.pt"), 1.0));
        const QString printer = cluster.path(QStringLiteral("printer.json"));
        Cluster::writeFile(printer, torchScriptJob(QStringLiteral("printer"), QStringLiteral("printer.pt"), 0.0, 2, 2));
        const QString owner = cluster.account();
        const QString hostile = cluster.submit(nondeterministic);
        QVERIFY2(!hostile.isEmpty(), qPrintable(cluster.log(QStringLiteral("broker"))));
        const QString printing = cluster.submit(printer);
        QVERIFY(!printing.isEmpty());
        cluster.startNode(1);
        cluster.startNode(2);

        const auto failed = cluster.waitForEnd(hostile);
        const QString why = failed.value(QStringLiteral("failure")).toString();
        qInfo().noquote() << "the nondeterministic job:" << failed.value(QStringLiteral("state")).toString() << why;
        QCOMPARE(failed.value(QStringLiteral("state")).toString(), QStringLiteral("failed"));
        QVERIFY2(why.contains(QStringLiteral("the job's code")), qPrintable(why + cluster.log(QStringLiteral("broker"))));
        const auto printed = cluster.waitForEnd(printing);
        QCOMPARE(printed.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));

        for (const auto* name : { "node-1", "node-2" }) {
            const auto node = cluster.nodeNamed(QLatin1String(name));
            QVERIFY2(!node.isEmpty(), name);
            QCOMPARE(node.value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
            QCOMPARE(node.value(QStringLiteral("disputesLost")).toInt(), 0);
        }
        // The owner gets back what was not spent, never more than it put in (2 budgets of 20).
        const auto balance = cluster.balanceOf(owner);
        QVERIFY2(balance >= 0 && balance <= 40'000'000, qPrintable(QString::number(balance)));
        QVERIFY(cluster.ledgerConsistent());
    }

    // Item 2: nodes that reveal a result with a NaN in it (refused at RESULT: a signed lie) and an
    // update 30 times the one they trained (finite, with consistent hashes; far from the round's
    // other updates, so re-executed before the round aggregates, and lost in the dispute). No
    // result is sampled otherwise. The job finishes with finite losses, both liars are slashed and
    // the honest node is not.
    void aPoisonedResultNeverReachesTheWeights()
    {
        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("SelfVerifyAfterSeconds=5\nDisputeTimeoutSeconds=30\n"));
        const QString jobFile = cluster.path(QStringLiteral("job.json"));
        Cluster::writeFile(jobFile, zooJob(QStringLiteral("poisoned"), 2, 3, QStringLiteral("none")));
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        // Alone first, each takes one shard and lies about it; then the honest node does the rest.
        cluster.startPythonNode(QStringLiteral("nan-liar"),
            { QStringLiteral("--poison"), QStringLiteral("nan"), QStringLiteral("--shards"), QStringLiteral("1") });
        QVERIFY2(logSays(cluster, QStringLiteral("nan-liar"), QStringLiteral("result refused")),
            qPrintable(cluster.log(QStringLiteral("nan-liar"))));
        QVERIFY2(cluster.log(QStringLiteral("nan-liar")).contains(QStringLiteral("not finite")),
            qPrintable(cluster.log(QStringLiteral("nan-liar"))));
        cluster.startPythonNode(QStringLiteral("huge-liar"),
            { QStringLiteral("--poison"), QStringLiteral("huge"), QStringLiteral("--shards"), QStringLiteral("1") });
        QVERIFY2(logSays(cluster, QStringLiteral("huge-liar"), QStringLiteral("poisoned (huge)")),
            qPrintable(cluster.log(QStringLiteral("huge-liar"))));
        cluster.startNode(1);

        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        for (const auto& round : job.value(QStringLiteral("history")).toArray()) {
            const double loss = round.toObject().value(QStringLiteral("testLoss")).toDouble(-1.0);
            QVERIFY2(std::isfinite(loss) && loss >= 0.0 && loss < 10.0, qPrintable(QString::number(loss)));
        }
        for (const auto* liar : { "nan-liar", "huge-liar" }) {
            const auto node = cluster.nodeNamed(QLatin1String(liar));
            QVERIFY2(node.value(QStringLiteral("slashed")).toString() != u"0",
                qPrintable(QStringLiteral("%1: %2").arg(QLatin1String(liar), QString::fromUtf8(QJsonDocument(node).toJson()))
                    + cluster.log(QStringLiteral("broker"))));
        }
        QCOMPARE(cluster.nodeNamed(QStringLiteral("node-1")).value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
        QVERIFY(cluster.balanceOf(cluster.nodeAccount(1)) > 0); // paid
        QVERIFY(cluster.ledgerConsistent());
    }

    // Item 3: three free keys report every shard they take as failed, with a reason that blames
    // the job ("time limit: ..."). Their reports fail nothing: the broker runs the shard itself
    // and, trained, it is the shard's result; their failures are on their records. An honest node
    // joins, and the job finishes.
    void threeFreeKeysCannotFailAJob()
    {
        Cluster cluster;
        cluster.startBroker();
        const QString jobFile = cluster.path(QStringLiteral("job.json"));
        Cluster::writeFile(jobFile, zooJob(QStringLiteral("reported"), 2, 2));
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        const QString reason = QStringLiteral("time limit: the shard ran past its 40.0 s and its worker was stopped");
        for (int i = 1; i <= 3; ++i)
            cluster.startPythonNode(QStringLiteral("reporter-%1").arg(i), { QStringLiteral("--fail-with"), reason });
        for (int i = 1; i <= 3; ++i)
            QVERIFY2(logSays(cluster, QStringLiteral("reporter-%1").arg(i), QStringLiteral("reporting")),
                qPrintable(cluster.log(QStringLiteral("broker"))));
        QCOMPARE(cluster.status(jobId).value(QStringLiteral("state")).toString(), QStringLiteral("running"));
        cluster.startNode(1);
        const auto job = cluster.waitForEnd(jobId);
        QVERIFY2(job.value(QStringLiteral("state")).toString() == u"finished",
            qPrintable(job.value(QStringLiteral("failure")).toString() + cluster.log(QStringLiteral("broker"))));
        // What the broker's own run disproved is on the reporters' records (a shard another node
        // trained meanwhile disproves nothing about a time limit: it is not counted).
        int failures = 0;
        for (int i = 1; i <= 3; ++i)
            failures += cluster.nodeNamed(QStringLiteral("reporter-%1").arg(i)).value(QStringLiteral("shardsFailed")).toInt();
        QVERIFY2(failures >= 1, qPrintable(cluster.log(QStringLiteral("broker"))));
        QCOMPARE(cluster.nodeNamed(QStringLiteral("node-1")).value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
        QVERIFY(cluster.ledgerConsistent());
    }

    // Item 5: a broker without a faucet. A key without credits submits a model whose loading never
    // ends: refused for its budget before any of its code runs. A funded owner submits it: its
    // loading runs in the background, and while it does another owner's job is submitted and
    // trained by a node; the endless one is refused at Broker/JobCodeSeconds, nothing escrowed.
    void aStrangersEndlessModelStallsNobody()
    {
        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("JobCodeSeconds=60\n"), Cluster::Money::OperatorOnly);
        QVERIFY(makeFixtures(cluster));
        const QString endless = cluster.path(QStringLiteral("endless.json"));
        Cluster::writeFile(endless,
            torchScriptJob(QStringLiteral("endless"), QStringLiteral("endless_load.pt"), 0.0, 1, 1, QStringLiteral("5")));
        const auto broke = cluster.jobAs(QStringLiteral("stranger"), { QStringLiteral("submit"), endless });
        QVERIFY(broke.exitCode != 0);
        QVERIFY2(broke.output.contains(QStringLiteral("balance")), qPrintable(broke.output));
        QVERIFY2(
            !cluster.log(QStringLiteral("broker")).contains(QStringLiteral("JobCodeSeconds")), "no code of the stranger's ran");

        const QString rich = cluster.account(QStringLiteral("rich"));
        const QString owner = cluster.account();
        for (const auto& account : { rich, owner }) {
            const auto credited
                = cluster.brokerCommand({ QStringLiteral("credit"), QStringLiteral("--"), account, QStringLiteral("50") });
            QVERIFY2(credited.exitCode == 0, qPrintable(credited.output));
        }
        QProcess slow;
        slow.setProcessChannelMode(QProcess::MergedChannels);
        slow.start(Bin + QStringLiteral("/tessera-job"),
            { QStringLiteral("--config"), QStringLiteral("/dev/null"), QStringLiteral("--identity"),
                cluster.path(QStringLiteral("rich.key")), QStringLiteral("--broker"), cluster.endpoint(),
                QStringLiteral("submit"), endless });
        QVERIFY(slow.waitForStarted());
        const QString honestFile = cluster.path(QStringLiteral("honest.json"));
        Cluster::writeFile(honestFile, zooJob(QStringLiteral("honest"), 1, 1));
        const QString honest = cluster.submit(honestFile);
        QVERIFY2(!honest.isEmpty(), qPrintable(cluster.log(QStringLiteral("broker"))));
        QVERIFY2(slow.state() == QProcess::Running,
            qPrintable(QStringLiteral("the endless model's submit was answered before the honest one: ")
                + QString::fromUtf8(slow.readAll())));
        // No faucet: the node is credited and bonds its stake, as on a real network.
        cluster.startNode(1);
        QVERIFY(logSays(cluster, QStringLiteral("node1"), QStringLiteral("registered with"), 120'000));
        const auto nodeCredited = cluster.brokerCommand(
            { QStringLiteral("credit"), QStringLiteral("--"), cluster.nodeAccount(1), QStringLiteral("10") });
        QVERIFY2(nodeCredited.exitCode == 0, qPrintable(nodeCredited.output));
        const auto bonded = run(Bin + QStringLiteral("/tessera-node"),
            { QStringLiteral("--config"), cluster.path(QStringLiteral("node1.ini")), QStringLiteral("stake"),
                QStringLiteral("bond"), QStringLiteral("10"), QStringLiteral("--broker"), cluster.endpoint() });
        QVERIFY2(bonded.exitCode == 0, qPrintable(bonded.output));
        QCOMPARE(cluster.waitForEnd(honest).value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QVERIFY(slow.waitForFinished(300'000));
        const QString said = QString::fromUtf8(slow.readAll());
        QVERIFY(slow.exitCode() != 0);
        QVERIFY2(said.contains(QStringLiteral("JobCodeSeconds")), qPrintable(said));
        QCOMPARE(cluster.balanceOf(rich), 50'000'000); // nothing escrowed, nothing spent
        QVERIFY(cluster.ledgerConsistent());
    }

    // Item 8: a broker on a Unix socket in a folder of its user's alone, as the app's practice
    // broker: its user is answered, another account on the machine (nobody) cannot even connect;
    // and a broker refuses a socket folder other accounts may enter.
    void aBrokerOnAUnixSocketIsItsUsersAlone()
    {
        if (::geteuid() != 0)
            QSKIP("acting as another account needs root");
        Cluster cluster;
        const QString folder = cluster.path(QStringLiteral("private"));
        QVERIFY(QDir().mkpath(folder));
        QVERIFY(QFile::setPermissions(folder, QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner));
        const QString address = QStringLiteral("ipc://") + folder + QStringLiteral("/broker.sock");
        Cluster::writeFile(cluster.path(QStringLiteral("ipc.ini")),
            QStringLiteral("[Broker]\nDataDirectory=%1\nFaucet=true\n").arg(cluster.path(QStringLiteral("broker"))));
        cluster.start(Bin + QStringLiteral("/tessera-broker"),
            { QStringLiteral("--config"), cluster.path(QStringLiteral("ipc.ini")), QStringLiteral("--bind"), address },
            QStringLiteral("broker"));
        QVERIFY2(
            QTest::qWaitFor(
                [&] { return cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("list") }, 5'000, address).exitCode == 0; },
                120'000),
            qPrintable(cluster.log(QStringLiteral("broker"))));
        // Another account: python as nobody, asking LIST.
        const auto other = run(QStringLiteral("setpriv"),
            { QStringLiteral("--reuid=65534"), QStringLiteral("--regid=65534"), QStringLiteral("--clear-groups"), Python,
                QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/local_account.py"), address },
            60'000);
        qInfo().noquote() << other.output;
        QVERIFY2(other.exitCode == 0 && other.output.contains(QStringLiteral("no answer")), qPrintable(other.output));

        const QString open = cluster.path(QStringLiteral("open"));
        QVERIFY(QDir().mkpath(open));
        QVERIFY(QFile::setPermissions(open,
            QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner | QFileDevice::ReadOther
                | QFileDevice::ExeOther));
        Cluster::writeFile(cluster.path(QStringLiteral("open.ini")),
            QStringLiteral("[Broker]\nDataDirectory=%1\n").arg(cluster.path(QStringLiteral("broker-open"))));
        const auto refused = run(Bin + QStringLiteral("/tessera-broker"),
            { QStringLiteral("--config"), cluster.path(QStringLiteral("open.ini")), QStringLiteral("--bind"),
                QStringLiteral("ipc://") + open + QStringLiteral("/broker.sock") },
            60'000);
        QVERIFY(refused.exitCode != 0);
        QVERIFY2(refused.output.contains(QStringLiteral("account's alone")), qPrintable(refused.output));
    }

    // Items 7 and 10: a key's uploads no job names are bounded (Broker/MaxUnnamedUploadMiB), and
    // another owner's submit is untouched; an error of the broker's database reaches the peer
    // without the broker's paths (tests/e2e/python/uploads.py).
    void uploadsAreBoundedAndErrorsNameNoFile()
    {
        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("MaxUnnamedUploadMiB=2\n"));
        const auto uploads = run(Python,
            { QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/uploads.py"), cluster.endpoint(),
                cluster.path(QStringLiteral("broker/broker.sqlite")) },
            120'000);
        qInfo().noquote() << uploads.output;
        QVERIFY2(uploads.exitCode == 0, qPrintable(uploads.output + cluster.log(QStringLiteral("broker"))));
    }
};

QTEST_GUILESS_MAIN(HostileJobsTest)
#include "tst_hostile_jobs.moc"
