// The control API of a running tessera-node (docs/CONTROL.md), driven by `tessera-node ctl` as a
// user on the same machine would: its state, a pause that holds the job's shard, a resume after
// which the job finishes. And its web dashboard in Debian's Chromium, driven by playwright-core
// (tests/browser/dashboard.mjs).

#include "cluster.h"

#include <QSettings>
#include <QStandardPaths>

using namespace tessera::tests::e2e;

namespace {

// A job of one shard a round, long enough that its progress is seen to move.
QString writeJob(Cluster& cluster, int rounds, int localSteps)
{
    const QString jobFile = cluster.path(QStringLiteral("job.json"));
    Cluster::writeFile(jobFile,
        QStringLiteral(R"({
    "version": 1, "name": "controlled", "model": { "zoo": "mlp", "hidden": [32] },
    "dataset": { "builtin": "fashion-mnist" }, "optimizer": { "kind": "sgd", "lr": 0.05 },
    "training": { "rounds": %1, "shardsPerRound": 1, "localSteps": %2, "batchSize": 32, "seed": 3, "threads": 1,
                  "determinism": "portable", "checkpointInterval": %3 },
    "budget": "10"
})")
            .arg(rounds)
            .arg(localSteps)
            .arg(std::max(5, localSteps / 10)));
    return jobFile;
}

// Why the Firefox test cannot run here; empty when it can.
QString firefoxMissing()
{
    const QString firefox = qEnvironmentVariable("TESSERA_FIREFOX", QStringLiteral("/usr/bin/firefox-esr"));
    if (QStandardPaths::findExecutable(QStringLiteral("node")).isEmpty())
        return QStringLiteral("no node (Node.js) on PATH: ./scripts/install-deps.sh installs it");
    if (!QFileInfo(firefox).isExecutable())
        return QStringLiteral("no Firefox at %1: ./scripts/install-deps.sh installs Debian's firefox-esr").arg(firefox);
    if (!QFileInfo::exists(QStringLiteral(TESSERA_BROWSER_DIR "/node_modules/puppeteer-core/package.json")))
        return QStringLiteral("no puppeteer-core in " TESSERA_BROWSER_DIR "/node_modules: ./scripts/install-deps.sh installs it");
    return {};
}

// Why the browser test cannot run here; empty when it can.
QString browserMissing()
{
    const QString node = QStandardPaths::findExecutable(QStringLiteral("node"));
    const QString chromium = qEnvironmentVariable("TESSERA_CHROMIUM", QStringLiteral("/usr/bin/chromium"));
    if (node.isEmpty())
        return QStringLiteral("no node (Node.js) on PATH: ./scripts/install-deps.sh installs it");
    if (!QFileInfo(chromium).isExecutable())
        return QStringLiteral("no Chromium at %1: ./scripts/install-deps.sh installs Debian's chromium").arg(chromium);
    if (!QFileInfo::exists(QStringLiteral(TESSERA_BROWSER_DIR "/node_modules/playwright-core/package.json")))
        return QStringLiteral(
            "no playwright-core in " TESSERA_BROWSER_DIR "/node_modules: ./scripts/install-deps.sh installs it");
    return {};
}

// A broker, and one node serving its control API on a free port (`control`: more [Control] lines),
// driven by `tessera-node ctl` with that node's settings file.
struct ControlledNode {
    int port = 0;
    QString ini;

    Run ctl(const QStringList& arguments) const
    {
        return run(Bin + QStringLiteral("/tessera-node"),
            QStringList { QStringLiteral("--config"), ini, QStringLiteral("ctl") } + arguments, 60'000);
    }
};

ControlledNode startControlledNode(Cluster& cluster, const QString& brokerSettings = {}, const QString& control = {})
{
    cluster.startBroker({}, brokerSettings);
    const ControlledNode node { freePort(), cluster.path(QStringLiteral("node1.ini")) };
    cluster.startNode(1, {}, Cluster::FirstStart::SkipBenchmark,
        QStringLiteral("MaxThreads=1\n[Control]\nPort=%1\n%2").arg(node.port).arg(control));
    return node;
}

} // namespace

class ControlTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void aRunningNodeIsPausedAndResumedFromTheCommandLine()
    {
        Cluster cluster;
        const auto node
            = startControlledNode(cluster, QStringLiteral("MinDeadlineSeconds=900\n")); // a paused shard keeps its deadline
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 1; }, 120'000));
        const auto ctl = [&](const QStringList& arguments) { return node.ctl(arguments); };
        const QString& ini = node.ini;
        const int port = node.port;
        const auto stateOf = [&] {
            const auto asked = ctl({ QStringLiteral("state"), QStringLiteral("--json") });
            return QJsonDocument::fromJson(asked.standardOutput.toUtf8()).object();
        };
        QCOMPARE(stateOf().value(QStringLiteral("state")).toString(), QStringLiteral("idle"));
        QCOMPARE(stateOf().value(QStringLiteral("name")).toString(), QStringLiteral("node-1"));

        // The other actions while idle: a snooze, "finish, then pause" with nothing to finish, a
        // device's pause, and limits written to the settings file (or refused as the file would be).
        const auto snoozed = ctl({ QStringLiteral("snooze"), QStringLiteral("5") });
        QVERIFY2(snoozed.standardOutput.startsWith(QStringLiteral("snoozed: snoozed until ")), qPrintable(snoozed.output));
        QCOMPARE(ctl({ QStringLiteral("resume") }).exitCode, 0);
        QCOMPARE(stateOf().value(QStringLiteral("state")).toString(), QStringLiteral("idle"));
        const auto device = ctl({ QStringLiteral("device"), QStringLiteral("cpu:0"), QStringLiteral("pause") });
        QVERIFY2(device.standardOutput.startsWith(QStringLiteral("paused: every device is paused")), qPrintable(device.output));
        QCOMPARE(ctl({ QStringLiteral("device"), QStringLiteral("cpu:0"), QStringLiteral("resume") }).exitCode, 0);
        const auto badLimit = ctl({ QStringLiteral("set"), QStringLiteral("Compute/CpuPercent=5") });
        QVERIFY(badLimit.exitCode != 0);
        QVERIFY2(badLimit.output.contains(QStringLiteral("must be from 10 to 100")), qPrintable(badLimit.output));
        QCOMPARE(ctl({ QStringLiteral("set"), QStringLiteral("Compute/CpuPercent=90") }).exitCode, 0);
        QVERIFY(QSettings(ini, QSettings::IniFormat).value(QStringLiteral("Compute/CpuPercent")).toInt() == 90);
        QCOMPARE(stateOf().value(QStringLiteral("limits")).toObject().value(QStringLiteral("Compute/CpuPercent")).toInt(), 90);
        const auto finished = ctl({ QStringLiteral("finish") });
        QVERIFY2(finished.standardOutput.startsWith(QStringLiteral("paused: ")), qPrintable(finished.output));
        QCOMPARE(ctl({ QStringLiteral("resume") }).exitCode, 0);

        const auto paused = ctl({ QStringLiteral("pause") });
        QCOMPARE(paused.exitCode, 0);
        QVERIFY2(paused.standardOutput.startsWith(QStringLiteral("paused: ")), qPrintable(paused.standardOutput));
        // A small job (2 rounds of one shard), so that one node finishes it on a loaded machine too.
        const QString jobId = cluster.submit(writeJob(cluster, 2, 10));
        QVERIFY(!jobId.isEmpty());
        // Its shard comes and waits: the node says paused all along, whatever it holds.
        QCOMPARE(stateOf().value(QStringLiteral("paused")).toBool(), true);
        const auto resumed = ctl({ QStringLiteral("resume") });
        QCOMPARE(resumed.exitCode, 0);
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(stateOf().value(QStringLiteral("paused")).toBool(), false);

        // Without the token, nothing: a copy of the settings that points at another data folder.
        const QString stranger = cluster.path(QStringLiteral("stranger.ini"));
        Cluster::writeFile(stranger,
            QStringLiteral("[Node]\nDataDirectory=%1\n[Control]\nPort=%2\n")
                .arg(cluster.path(QStringLiteral("stranger")))
                .arg(port));
        const auto refused = run(Bin + QStringLiteral("/tessera-node"),
            { QStringLiteral("--config"), stranger, QStringLiteral("ctl"), QStringLiteral("pause") }, 60'000);
        QVERIFY(refused.exitCode != 0);
    }

    // docs/CONTROL.md, "TLS": a node that listens beyond loopback does so over TLS only, says its
    // certificate's fingerprint, and ctl pins it.
    void beyondLoopbackTheApiIsServedOverTls()
    {
        Cluster cluster;
        const auto node = startControlledNode(cluster, {}, QStringLiteral("Bind=0.0.0.0\n"));
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 1; }, 120'000));
        const auto ctl = [&](const QStringList& arguments) { return node.ctl(arguments); };
        const int port = node.port;
        const auto state = ctl({ QStringLiteral("state") });
        QVERIFY2(state.exitCode == 0 && state.standardOutput.startsWith(QStringLiteral("idle: ")), qPrintable(state.output));
        const auto url = ctl({ QStringLiteral("url") });
        QVERIFY2(url.standardOutput.startsWith(QStringLiteral("https://")), qPrintable(url.output));
        const QString fingerprint = url.standardOutput.trimmed().section(QStringLiteral("&fp="), 1);
        QCOMPARE(fingerprint.size(), 64);
        QVERIFY2(cluster.log(QStringLiteral("node1"))
                     .contains(QStringLiteral("https://0.0.0.0:%1/ (certificate SHA-256 %2)").arg(port).arg(fingerprint)),
            qPrintable(cluster.log(QStringLiteral("node1"))));
        // Another certificate pinned than the one the node shows (as if another program held the
        // port): ctl sends nothing.
        const QString data = cluster.path(QStringLiteral("node1"));
        QFile::remove(data + QStringLiteral("/control.crt"));
        const auto other = run(QStringLiteral("openssl"),
            { QStringLiteral("req"), QStringLiteral("-x509"), QStringLiteral("-newkey"), QStringLiteral("ec"),
                QStringLiteral("-pkeyopt"), QStringLiteral("ec_paramgen_curve:P-256"), QStringLiteral("-nodes"),
                QStringLiteral("-subj"), QStringLiteral("/CN=other"), QStringLiteral("-days"), QStringLiteral("1"),
                QStringLiteral("-keyout"), cluster.path(QStringLiteral("other.key")), QStringLiteral("-out"),
                data + QStringLiteral("/control.crt") },
            60'000);
        QCOMPARE(other.exitCode, 0);
        const auto refused = ctl({ QStringLiteral("pause") });
        QVERIFY(refused.exitCode != 0);
        QVERIFY2(refused.output.contains(QStringLiteral("other than the one pinned")), qPrintable(refused.output));
    }

    // docs/CONTROL.md, "The dashboard": the same page in Firefox, whose engine is not Chromium's.
    void aDashboardInFirefoxToo()
    {
        if (const QString missing = firefoxMissing(); !missing.isEmpty())
            QSKIP(qPrintable(missing));
        Cluster cluster;
        const auto node = startControlledNode(cluster);
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 1; }, 120'000));
        const int port = node.port;
        const auto url = node.ctl({ QStringLiteral("url") });
        const QString token = url.standardOutput.trimmed().section(QStringLiteral("#token="), 1);
        QCOMPARE(token.size(), 64);
        const QString shots = qEnvironmentVariable("TESSERA_SCREENSHOT_DIR", cluster.path(QStringLiteral("screenshots")));
        QDir().mkpath(shots);
        const auto browser = run(QStandardPaths::findExecutable(QStringLiteral("node")),
            { QStringLiteral(TESSERA_BROWSER_DIR "/firefox.mjs"), QStringLiteral("http://127.0.0.1:%1").arg(port), token,
                QDir(shots).filePath(QStringLiteral("web-dashboard-firefox.png")) },
            560'000);
        QVERIFY2(browser.exitCode == 0, qPrintable(browser.output));
        qInfo("%s", qPrintable(browser.standardOutput.trimmed()));
    }

    // docs/CONTROL.md, "The dashboard": the page a node serves, in a real browser.
    void aDashboardInChromiumShowsAndDrivesTheNode()
    {
        if (const QString missing = browserMissing(); !missing.isEmpty())
            QSKIP(qPrintable(missing));
        Cluster cluster;
        const auto node = startControlledNode(cluster, QStringLiteral("MinDeadlineSeconds=900\n"));
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 1; }, 120'000));
        const auto ctl = [&](const QStringList& arguments) { return node.ctl(arguments); };
        const int port = node.port;
        // Paused before the job comes: the page sees its shard move only once it resumes it.
        QCOMPARE(ctl({ QStringLiteral("pause") }).exitCode, 0);
        const QString jobId = cluster.submit(writeJob(cluster, 2, 2500));
        QVERIFY(!jobId.isEmpty());
        const auto url = ctl({ QStringLiteral("url") });
        QCOMPARE(url.exitCode, 0);
        const QString address = url.standardOutput.trimmed();
        QVERIFY2(address.startsWith(QStringLiteral("http://127.0.0.1:%1/#token=").arg(port)), qPrintable(address));
        const QString token = address.section(QStringLiteral("#token="), 1);

        const QString shots = qEnvironmentVariable("TESSERA_SCREENSHOT_DIR", cluster.path(QStringLiteral("screenshots")));
        QDir().mkpath(shots);
        const auto browser = run(QStandardPaths::findExecutable(QStringLiteral("node")),
            { QStringLiteral(TESSERA_BROWSER_DIR "/dashboard.mjs"), QStringLiteral("http://127.0.0.1:%1").arg(port), token,
                QDir(shots).filePath(QStringLiteral("web-dashboard.png")) },
            560'000);
        QVERIFY2(browser.exitCode == 0, qPrintable(browser.output));
        const auto measured = QJsonDocument::fromJson(browser.standardOutput.trimmed().toUtf8()).object();
        QVERIFY2(measured.value(QStringLiteral("progressTo")).toInt() > measured.value(QStringLiteral("progressFrom")).toInt(),
            qPrintable(browser.output));
        QVERIFY(measured.contains(QStringLiteral("pushMs")));
        // The goal (docs/PERFORMANCE.md): a change reaches an open page within a second. Said, not asserted.
        qInfo("a pause made through the API reached the page in %lld ms",
            qint64(measured.value(QStringLiteral("pushMs")).toDouble()));
        QVERIFY(QFileInfo::exists(QDir(shots).filePath(QStringLiteral("web-dashboard.png"))));

        // The page left the node running (its last step resumes it): the job ends.
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
    }
};

QTEST_GUILESS_MAIN(ControlTest)
#include "tst_control.moc"
