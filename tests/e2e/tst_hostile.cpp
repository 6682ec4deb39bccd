// Hostile peers against a real broker process (docs/SECURITY.md, "Hostile peers"): a node that
// claims to be absurdly slow and asks again and again, reports false failures, a QUOTE of a model
// that would not fit in memory and of a TorchScript model whose loading never ends, fields that would break every listing, an
// upload squatted by its hash, a plaintext node-id takeover (tests/e2e/python/hostile_peers.py), all while an honest node trains
// a job. The job must finish, the books balance, and every client is answered meanwhile.

#include "cluster.h"

using namespace tessera::tests::e2e;

class HostileTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void hostilePeersStallNothing()
    {
        Cluster cluster;
        cluster.startBroker();
        // Six shards a round. The hoarder comes first and alone, so what it gets and fails does not
        // depend on speed; the honest node starts when the script says so, answers the rest, and
        // once three answers are in the job's usual shard time is known and held shards are late.
        const QString jobFile = cluster.path(QStringLiteral("job.json"));
        Cluster::writeFile(jobFile, QStringLiteral(R"({"version": 1, "name": "hostile", "model": {"zoo": "mlp", "hidden": [32]},
                "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
                "training": {"rounds": 20, "shardsPerRound": 6, "localSteps": 20, "batchSize": 32, "seed": 1,
                             "threads": 1, "checkpointInterval": 10},
                "budget": "50", "verification": {"rate": 0.0}})"));
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());

        QProcess attack;
        attack.setProcessChannelMode(QProcess::MergedChannels);
        attack.start(
            Python, { QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/hostile_peers.py"), cluster.endpoint(), jobId });
        QString output;
        const bool asked = QTest::qWaitFor(
            [&] {
                output += QString::fromUtf8(attack.readAll());
                return output.contains(QStringLiteral("ready for the honest node")) || attack.state() == QProcess::NotRunning;
            },
            300'000);
        QVERIFY2(asked && attack.state() == QProcess::Running, qPrintable(output + cluster.log(QStringLiteral("broker"))));
        cluster.startNode(1);
        QVERIFY(attack.waitForFinished(600'000));
        output += QString::fromUtf8(attack.readAll());
        qInfo().noquote() << output;
        QVERIFY2(attack.exitStatus() == QProcess::NormalExit && attack.exitCode() == 0,
            qPrintable(output + cluster.log(QStringLiteral("broker"))));
        const QString honest = QStringLiteral("node-1");

        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QVERIFY(cluster.ledgerConsistent());
        // The false failures are on the hoarder's record; the honest node's has none.
        const auto nodes = cluster.nodes();
        bool sawHoarder = false;
        for (const auto& value : nodes) {
            const auto node = value.toObject();
            if (node.value(QStringLiteral("nodeId")).toString() == QStringLiteral("hoarder")) {
                sawHoarder = true;
                QVERIFY(node.value(QStringLiteral("shardsFailed")).toInt() >= 1);
            } else if (node.value(QStringLiteral("name")).toString() == honest) {
                QCOMPARE(node.value(QStringLiteral("shardsFailed")).toInt(), 0);
            }
        }
        QVERIFY(sawHoarder);
    }

    // A job whose model never returns from forward() (a TorchScript loop without end) against a
    // real broker and node, beside an honest job: the node's worker is stopped at its time limit
    // and reports the failure; no other node could run the shard, so the broker runs it itself, in
    // a worker of its own (Broker/Sandbox) that is stopped at Broker/MaxDeadlineSeconds. The
    // hostile job fails with the reason, the honest one finishes, and the books balance. Before
    // Broker/Sandbox the broker's own run never ended and held every job's aggregation behind it.
    void anEndlessModelFailsItsJobAndStallsNothing()
    {
        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("MaxDeadlineSeconds=30\n"));
        // The hostile models of the compute tests' fixtures (tests/compute/python/make_fixtures.py), endless.pt among them.
        const QString fixtures = cluster.path(QStringLiteral("fixtures"));
        QVERIFY(QDir().mkpath(fixtures));
        QProcess python;
        python.setProcessChannelMode(QProcess::MergedChannels);
        python.start(Python, { QStringLiteral(TESSERA_SOURCE_DIR "/tests/compute/python/make_fixtures.py"), fixtures });
        QVERIFY(python.waitForFinished(120'000));
        QVERIFY2(python.exitCode() == 0, python.readAll().constData());
        QVERIFY(QFile::copy(QDir(fixtures).filePath(QStringLiteral("endless.pt")), cluster.path(QStringLiteral("endless.pt"))));
        const QString hostileFile = cluster.path(QStringLiteral("endless.json"));
        Cluster::writeFile(hostileFile, QStringLiteral(R"({"version": 1, "name": "endless",
                "model": {"torchscript": {"file": "endless.pt"}}, "dataset": {"builtin": "fashion-mnist"},
                "optimizer": {"kind": "sgd", "lr": 0.05},
                "training": {"rounds": 1, "shardsPerRound": 1, "localSteps": 4, "batchSize": 8, "seed": 1,
                             "threads": 1, "checkpointInterval": 2},
                "budget": "5", "verification": {"rate": 0.0}})"));
        const QString honestFile = cluster.path(QStringLiteral("honest.json"));
        Cluster::writeFile(honestFile, QStringLiteral(R"({"version": 1, "name": "honest", "model": {"zoo": "mlp", "hidden": [32]},
                "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
                "training": {"rounds": 4, "shardsPerRound": 2, "localSteps": 20, "batchSize": 32, "seed": 1,
                             "threads": 1, "checkpointInterval": 10},
                "budget": "20", "verification": {"rate": 0.0}})"));
        const QString hostile = cluster.submit(hostileFile);
        QVERIFY2(!hostile.isEmpty(), qPrintable(cluster.log(QStringLiteral("broker"))));
        const QString honest = cluster.submit(honestFile);
        QVERIFY(!honest.isEmpty());
        cluster.startNode(1);

        const auto failed = cluster.waitForEnd(hostile);
        QCOMPARE(failed.value(QStringLiteral("state")).toString(), QStringLiteral("failed"));
        const QString failure = failed.value(QStringLiteral("failure")).toString();
        qInfo().noquote() << "the endless job:" << failure;
        QVERIFY2(failure.contains(QStringLiteral("on the broker")) && failure.count(QStringLiteral("time limit")) == 2,
            qPrintable(failure + cluster.log(QStringLiteral("broker"))));
        const auto finished = cluster.waitForEnd(honest);
        QCOMPARE(finished.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QVERIFY(cluster.ledgerConsistent());
        // The node's failure was the job's: not on its record.
        for (const auto& value : cluster.nodes()) {
            const auto node = value.toObject();
            if (node.value(QStringLiteral("name")).toString() == u"node-1")
                QCOMPARE(node.value(QStringLiteral("shardsFailed")).toInt(), 0);
        }
    }

    // A flood ban is the flooder's key's, not its socket's (tests/e2e/python/flood_per_key.py).
    void aFloodBanHoldsForTheKeyNotTheSocket()
    {
        Cluster cluster;
        const QString publicKey = cluster.startCurveBroker();
        QVERIFY2(!publicKey.isEmpty(), qPrintable(cluster.log(QStringLiteral("broker"))));
        const auto flood = run(Python,
            { QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/flood_per_key.py"), cluster.endpoint(), publicKey }, 280'000);
        qInfo().noquote() << flood.output;
        QVERIFY2(flood.exitCode == 0, qPrintable(flood.output + cluster.log(QStringLiteral("broker"))));
    }
};

QTEST_GUILESS_MAIN(HostileTest)
#include "tst_hostile.moc"
