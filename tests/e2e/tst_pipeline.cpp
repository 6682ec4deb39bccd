// Layers on different nodes (docs/PROTOCOL.md, "Stage tasks"): a pipeline gpt job through a broker
// whose nodes each hold one stage of a shard, trading activations and gradients through the
// broker's relay, ends on tessera-node train-local's bits.

#include "cluster.h"

using namespace tessera::tests::e2e;

class PipelineTest : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    // verify: every stage result is re-executed (verification.rate 1).
    // int8: the stages trade int8 tensors (training.pipeline.tensors).
    QString writeJob(std::int64_t stages, bool verify = false, bool int8 = false)
    {
        const QString file = m_dir.filePath(QStringLiteral("pipeline-%1%2%3.json")
                                                .arg(stages)
                                                .arg(verify ? QStringLiteral("-verified") : QString())
                                                .arg(int8 ? QStringLiteral("-int8") : QString()));
        Cluster::writeFile(file,
            QStringLiteral(R"({
    "name": "pipelined gpt", "model": { "zoo": "gpt", "layers": 4, "heads": 2, "width": 32, "context": 32, "tied": false },
    "dataset": { "builtin": "fortunes" }, "optimizer": { "kind": "adamw", "lr": 0.003, "clipNorm": 1.0 },
    "training": { "rounds": 2, "shardsPerRound": 2, "localSteps": 8, "batchSize": 8, "seed": 4, "checkpointInterval": 4,
                  "determinism": "portable", "pipeline": { "stages": %1, "microBatches": 4%3 } },
    "budget": "100"%2
})")
                .arg(stages)
                .arg(verify ? QStringLiteral(R"(, "verification": { "rate": 1.0 })") : QString())
                .arg(int8 ? QStringLiteral(R"(, "tensors": "int8")") : QString()));
        return file;
    }

private Q_SLOTS:
    // Two pipelines of S stages each a round, on 2 S nodes of different kernel choices and thread
    // limits: every stage's tensors go through the broker, and the job's weights are train-local's
    // (the same for S = 2 and S = 4: the stages are placement, not arithmetic).
    // With int8 tensors (a quarter of the bytes through the broker), train-local quantises as the
    // nodes do: the same bits again.
    void aPipelineJobOnNodesEndsOnTrainLocalsBits_data()
    {
        QTest::addColumn<int>("stages");
        QTest::addColumn<bool>("int8");
        QTest::newRow("2 stages") << 2 << false;
        QTest::newRow("4 stages") << 4 << false;
        QTest::newRow("2 stages, int8 tensors") << 2 << true;
    }
    void aPipelineJobOnNodesEndsOnTrainLocalsBits()
    {
        QFETCH(int, stages);
        QFETCH(bool, int8);
        const auto jobFile = writeJob(stages, false, int8);
        const auto local = trainLocally(
            jobFile, m_dir.filePath(QStringLiteral("local-%1%2").arg(stages).arg(int8 ? QStringLiteral("-int8") : QString())));
        QVERIFY2(!local.hash.isEmpty(), qPrintable(local.output));

        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("MinDeadlineSeconds=900\nSelfVerifyAfterSeconds=900\n"));
        for (int i = 1; i <= 2 * stages; ++i)
            cluster.startNode(i, {}, Cluster::FirstStart::SkipBenchmark, QStringLiteral("MaxThreads=%1\n").arg(1 + i % 2),
                i % 2 ? Cluster::olderCpu() : Cluster::newerCpu());
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 2 * stages; }, 120'000));
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(job.value(QStringLiteral("weightsHash")).toString(), local.hash);
        QVERIFY(cluster.ledgerConsistent());
    }

    // The desktop app runs no LibTorch of its own: its stage trains in its compute worker, which
    // asks for each tensor over its pipes. With the app and one tessera-node as the only nodes, every
    // shard has a stage in the app, and the job ends on train-local's bits.
    void aStageTrainsInTheDesktopApp()
    {
        const auto jobFile = writeJob(2);
        const auto local = trainLocally(jobFile, m_dir.filePath(QStringLiteral("local-app")));
        QVERIFY2(!local.hash.isEmpty(), qPrintable(local.output));
        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("MinDeadlineSeconds=900\nSelfVerifyAfterSeconds=900\n"));
        cluster.startNode(1, {}, Cluster::FirstStart::SkipBenchmark, QStringLiteral("MaxThreads=1\n"));
        const QString home = cluster.path(QStringLiteral("app"));
        QVERIFY(QDir().mkpath(home + QStringLiteral("/runtime")));
        QFile(home + QStringLiteral("/runtime"))
            .setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner);
        const QString ini = home + QStringLiteral("/tessera.ini");
        Cluster::writeFile(ini,
            QStringLiteral("[Node]\nDataDirectory=%1/data\nName=app\nBrokers=%2\n[Compute]\nBenchmarkOnFirstStart=false\n"
                           "Contribute=true\nMaxThreads=1\n")
                .arg(home, cluster.endpoint()));
        cluster.start(QStringLiteral(TESSERA_BIN_DIR) + QStringLiteral("/tessera"), { QStringLiteral("--config"), ini },
            QStringLiteral("app"),
            { QStringLiteral("XDG_RUNTIME_DIR=") + home + QStringLiteral("/runtime"),
                QStringLiteral("XDG_CONFIG_HOME=") + home + QStringLiteral("/config"),
                QStringLiteral("XDG_DATA_HOME=") + home + QStringLiteral("/share"),
                QStringLiteral("QT_QPA_PLATFORM=offscreen") });
        QVERIFY2(QTest::qWaitFor([&] { return cluster.nodes().size() == 2; }, 120'000),
            qPrintable(cluster.log(QStringLiteral("app"))));
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(job.value(QStringLiteral("weightsHash")).toString(), local.hash);
        QVERIFY2(cluster.log(QStringLiteral("app")).contains(QStringLiteral(" of 2)")),
            qPrintable(cluster.log(QStringLiteral("app"))));
        QVERIFY(cluster.ledgerConsistent());
    }

    // A stage's node killed while its shard trains: the broker stops the pipeline (its partner
    // gives its stage back), hands the shard's stages out together again, and the job ends on the
    // same bits, every credit accounted for.
    void aStageNodeKilledMidShardChangesNoBit()
    {
        const auto jobFile = writeJob(2);
        const auto local = trainLocally(jobFile, m_dir.filePath(QStringLiteral("local-killed")));
        QVERIFY2(!local.hash.isEmpty(), qPrintable(local.output));
        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("MinDeadlineSeconds=900\nSelfVerifyAfterSeconds=900\n"));
        QList<QProcess*> nodes;
        for (int i = 1; i <= 3; ++i)
            nodes.append(cluster.startNode(i, {}, Cluster::FirstStart::SkipBenchmark, QStringLiteral("MaxThreads=1\n")));
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 3; }, 120'000));
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        int victim = -1;
        QVERIFY(QTest::qWaitFor(
            [&] {
                for (int i = 0; i < 3 && victim < 0; ++i) {
                    if (cluster.log(QStringLiteral("node%1").arg(i + 1)).contains(QStringLiteral("training ")))
                        victim = i;
                }
                return victim >= 0;
            },
            120'000));
        nodes[victim]->kill();
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(job.value(QStringLiteral("weightsHash")).toString(), local.hash);
        QVERIFY2(cluster.log(QStringLiteral("broker")).contains(QStringLiteral("stopped: a stage's node went")),
            "the killed stage's pipeline was not stopped");
        QVERIFY(cluster.ledgerConsistent());
    }

    // docs/VERIFICATION.md, "Pipeline stages": a node trains its stage with twice the learning rate
    // while its partner computes honestly on what it sends. Every stage result is re-executed
    // (verification.rate 1) from what it received: the cheater is slashed; its partner and the
    // other honest nodes are paid and never slashed; the cheated shard is trained again; the job
    // ends on train-local's bits. The cheater and S - 1 honest nodes come first, so that the
    // cheater holds a stage; two more honest nodes join once it does.
    void aCheatingStageIsSlashedAndItsHonestPartnersAreNot_data()
    {
        QTest::addColumn<int>("stages");
        QTest::newRow("2 stages") << 2;
        QTest::newRow("4 stages") << 4;
    }
    void aCheatingStageIsSlashedAndItsHonestPartnersAreNot()
    {
        QFETCH(int, stages);
        const auto jobFile = writeJob(stages, true);
        const auto local = trainLocally(jobFile, m_dir.filePath(QStringLiteral("local-cheat-%1").arg(stages)));
        QVERIFY2(!local.hash.isEmpty(), qPrintable(local.output));
        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("MinDeadlineSeconds=900\nSelfVerifyAfterSeconds=900\n"));
        cluster.startCheater(QStringLiteral("stage-lr"));
        for (int i = 1; i < stages; ++i)
            cluster.startNode(i, {}, Cluster::FirstStart::SkipBenchmark, QStringLiteral("MaxThreads=1\n"),
                i % 2 ? Cluster::olderCpu() : Cluster::newerCpu());
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == stages; }, 120'000));
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        QVERIFY(QTest::qWaitFor(
            [&] { return cluster.log(QStringLiteral("cheater-stage-lr")).contains(QStringLiteral("cheat: stage")); }, 120'000));
        cluster.startNode(stages, {}, Cluster::FirstStart::SkipBenchmark, QStringLiteral("MaxThreads=2\n"), Cluster::newerCpu());
        cluster.startNode(stages + 1, {}, Cluster::FirstStart::SkipBenchmark, QStringLiteral("MaxThreads=1\n"));
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(job.value(QStringLiteral("weightsHash")).toString(), local.hash);
        int honest = 0;
        for (const auto& value : cluster.nodes()) {
            const auto node = value.toObject();
            const auto name = node.value(QStringLiteral("name")).toString();
            qInfo("%s: done %lld, verified %lld, disputes lost %lld, slashed %s", qPrintable(name),
                node.value(QStringLiteral("shardsDone")).toInteger(), node.value(QStringLiteral("verified")).toInteger(),
                node.value(QStringLiteral("disputesLost")).toInteger(),
                qPrintable(node.value(QStringLiteral("slashed")).toString()));
            if (name.startsWith(QStringLiteral("cheater-"))) {
                QVERIFY2(node.value(QStringLiteral("disputesLost")).toInteger() >= 1, qPrintable(name));
                QVERIFY2(node.value(QStringLiteral("slashed")).toString() != u"0", qPrintable(name));
                continue;
            }
            ++honest;
            QCOMPARE(node.value(QStringLiteral("disputesLost")).toInteger(), 0);
            QCOMPARE(node.value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
            QVERIFY(node.value(QStringLiteral("balance")).toString().toDouble() > 0.0);
        }
        QCOMPARE(honest, stages + 1);
        // Its checks: the cheater's stage lost to the referee's replay; its partners' were verified or
        // called off with pay.
        bool caught = false;
        for (const auto& value : cluster.checks(jobId)) {
            const auto check = value.toObject();
            caught = caught
                || (check.value(QStringLiteral("outcome")).toString() == u"accused"
                    && check.value(QStringLiteral("detail"))
                           .toString()
                           .contains(QStringLiteral("the referee re-executed the stage")));
        }
        QVERIFY(caught);
        QVERIFY(cluster.ledgerConsistent());
    }
};

QTEST_GUILESS_MAIN(PipelineTest)
#include "tst_pipeline.moc"
