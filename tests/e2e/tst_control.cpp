// The control API of a running tessera-node (docs/CONTROL.md), driven by `tessera-node ctl` as a
// user on the same machine would: its state, a pause that holds the job's shard, a resume after
// which the job finishes.

#include "cluster.h"

using namespace tessera::tests::e2e;

class ControlTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void aRunningNodeIsPausedAndResumedFromTheCommandLine()
    {
        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("MinDeadlineSeconds=900\n")); // a paused shard keeps its deadline
        const int port = freePort();
        cluster.startNode(
            1, {}, Cluster::FirstStart::SkipBenchmark, QStringLiteral("MaxThreads=1\n[Control]\nPort=%1\n").arg(port));
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 1; }, 120'000));
        const QString ini = cluster.path(QStringLiteral("node1.ini"));
        const auto ctl = [&](const QStringList& arguments) {
            return run(Bin + QStringLiteral("/tessera-node"),
                QStringList { QStringLiteral("--config"), ini, QStringLiteral("ctl") } + arguments, 60'000);
        };
        const auto stateOf = [&] {
            const auto asked = ctl({ QStringLiteral("state"), QStringLiteral("--json") });
            return QJsonDocument::fromJson(asked.standardOutput.toUtf8()).object();
        };
        QCOMPARE(stateOf().value(QStringLiteral("state")).toString(), QStringLiteral("idle"));
        QCOMPARE(stateOf().value(QStringLiteral("name")).toString(), QStringLiteral("node-1"));

        const auto paused = ctl({ QStringLiteral("pause") });
        QCOMPARE(paused.exitCode, 0);
        QVERIFY2(paused.standardOutput.startsWith(QStringLiteral("paused: ")), qPrintable(paused.standardOutput));
        // A small job (2 rounds of one shard), so that one node finishes it on a loaded machine too.
        const QString jobFile = cluster.path(QStringLiteral("small.json"));
        Cluster::writeFile(jobFile, QStringLiteral(R"({
    "version": 1, "name": "controlled", "model": { "zoo": "mlp", "hidden": [32] },
    "dataset": { "builtin": "fashion-mnist" }, "optimizer": { "kind": "sgd", "lr": 0.05 },
    "training": { "rounds": 2, "shardsPerRound": 1, "localSteps": 10, "batchSize": 32, "seed": 3, "threads": 1,
                  "determinism": "portable", "checkpointInterval": 5 },
    "budget": "10"
})"));
        const QString jobId = cluster.submit(jobFile);
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
};

QTEST_GUILESS_MAIN(ControlTest)
#include "tst_control.moc"
