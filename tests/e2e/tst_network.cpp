// End to end over real processes on 127.0.0.1: tessera-broker, tessera-node run, tessera-job and
// independent Python peers. The networked result must equal tessera-node train-local bit for bit,
// also when a node or the broker is killed with SIGKILL halfway.

#include "cluster.h"

#include <QElapsedTimer>
#include <QSet>

using namespace tessera::tests::e2e;

class NetworkTest : public QObject {
    Q_OBJECT

private:
    QString m_baseline; // canonical hash of train-local's final weights
    QTemporaryDir m_dir;

private Q_SLOTS:
    void initTestCase()
    {
        const auto local = trainLocally(Job, m_dir.path());
        QVERIFY2(!local.hash.isEmpty(), qPrintable(local.output));
        m_baseline = local.hash;
        QCOMPARE(m_baseline.size(), 64);
    }

    // The 100-credit budget of the example job went to its 45 shards and to the re-execution of each
    // sampled one, at 0.9 credits each, exactly once; the rest back to the owner.
    static void everyPaymentOnce(Cluster& cluster, const QString& jobId, bool everyShardChecked)
    {
        int verified = 0;
        QSet<QString> shards;
        for (const auto& value : cluster.checks(jobId)) {
            const auto check = value.toObject();
            if (check.value(QStringLiteral("state")).toString() != u"verified"
                || check.value(QStringLiteral("verifier")).toString().isEmpty())
                continue;
            ++verified;
            const QString shard = QStringLiteral("%1/%2/%3")
                                      .arg(check.value(QStringLiteral("kind")).toString())
                                      .arg(check.value(QStringLiteral("round")).toInteger())
                                      .arg(check.value(QStringLiteral("shard")).toInteger());
            if (shards.contains(shard))
                qWarning("checked twice: %s", qPrintable(QString::fromUtf8(QJsonDocument(check).toJson(QJsonDocument::Compact))));
            shards.insert(shard);
        }
        std::int64_t earned = 0;
        for (const auto& node : cluster.nodes()) {
            const auto balance = node.toObject().value(QStringLiteral("balance")).toString().toDouble();
            earned += std::llround(balance * 1e6);
        }
        qInfo("45 shards, %d re-executed and verified; nodes earned %.1f credits", verified, double(earned) / 1e6);
        if (everyShardChecked)
            QVERIFY2(verified >= 30, "new nodes: nearly every shard is re-executed (all while their streak is under 25)");
        QCOMPARE(earned, std::int64_t(45 + verified) * 900'000);
        QCOMPARE(cluster.balanceOf(cluster.account()), 100'000'000 - earned);
    }

    void threeNodesTrainToTheSameBitsAsOneMachine()
    {
        Cluster cluster;
        // A head of the ledger's log every half second, so that the tampering below is seen soon.
        cluster.startBroker({}, QStringLiteral("LogHeadMs=500\n"));
        QList<QProcess*> processes;
        for (int i = 1; i <= 3; ++i)
            processes << cluster.startNode(i, {}, Cluster::FirstStart::Benchmark);
        const QString jobId = cluster.submit();
        QVERIFY(!jobId.isEmpty());
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        const auto history = job.value(QStringLiteral("history")).toArray();
        QCOMPARE(history.size(), 15);
        const double accuracy = history.last().toObject().value(QStringLiteral("testAccuracy")).toDouble();
        qInfo("broker + 3 nodes: test accuracy %.2f%%", accuracy * 100.0);
        QVERIFY(accuracy >= 0.85);
        QCOMPARE(job.value(QStringLiteral("weightsHash")).toString(), m_baseline);
        QCOMPARE(job.value(QStringLiteral("escrow")).toString(), QStringLiteral("0"));
        QVERIFY(cluster.ledgerConsistent());
        everyPaymentOnce(cluster, jobId, true);
        // Each node's record: together they delivered the 45 shards.
        const auto nodes
            = QJsonDocument::fromJson(cluster.job({ QStringLiteral("nodes"), QStringLiteral("--json") }).standardOutput.toUtf8())
                  .array();
        QCOMPARE(nodes.size(), 3);
        int delivered = 0;
        for (const auto& node : nodes) {
            delivered += node.toObject().value(QStringLiteral("shardsDone")).toInt();
            // New nodes measured their CPU before they registered: brokers see a figure, not 0.
            QVERIFY2(node.toObject().value(QStringLiteral("benchmarkSamplesPerSecond")).toDouble() > 0,
                qPrintable(QString::fromUtf8(QJsonDocument(node.toObject()).toJson())));
        }
        QCOMPARE(delivered, 45);
        QVERIFY(cluster.log(QStringLiteral("node1")).contains(QStringLiteral("first start: measured this CPU")));

        // Each node keeps the lifecycle of its results: computed, committed, then paid, or sampled,
        // verified and paid.
        const auto results = run(Bin + QStringLiteral("/tessera-node"),
            { QStringLiteral("--config"), cluster.path(QStringLiteral("node1.ini")), QStringLiteral("results"),
                QStringLiteral("--json") });
        const auto lifecycle = QJsonDocument::fromJson(results.standardOutput.toUtf8()).array();
        QVERIFY2(!lifecycle.isEmpty(), qPrintable(results.output));
        int paid = 0;
        for (const auto& value : lifecycle) {
            const auto entry = value.toObject();
            if (entry.value(QStringLiteral("state")).toString() != u"paid")
                continue;
            ++paid;
            QCOMPARE(entry.value(QStringLiteral("paid")).toString(), QStringLiteral("0.9"));
            const auto steps = entry.value(QStringLiteral("history")).toArray();
            QVERIFY(steps.size() == 3 || steps.size() == 5);
            if (steps.size() == 5) {
                QCOMPARE(steps[2].toObject().value(QStringLiteral("state")).toString(), QStringLiteral("sampled"));
                QCOMPARE(steps[3].toObject().value(QStringLiteral("state")).toString(), QStringLiteral("verified"));
            }
            QCOMPARE(steps[0].toObject().value(QStringLiteral("state")).toString(), QStringLiteral("computed"));
            QCOMPARE(steps[1].toObject().value(QStringLiteral("state")).toString(), QStringLiteral("committed"));
        }
        QVERIFY(paid > 0);

        // The owner's escrow has a signed receipt that checks offline, and a doctored copy does not.
        const QString receipt = cluster.path(QStringLiteral("escrow.receipt"));
        QCOMPARE(
            cluster.job({ QStringLiteral("receipt"), QStringLiteral("escrow:") + jobId, QStringLiteral("-o"), receipt }).exitCode,
            0);
        const auto verified = run(Bin + QStringLiteral("/tessera-job"), { QStringLiteral("verify-receipt"), receipt });
        QVERIFY2(verified.exitCode == 0 && verified.output.contains(QStringLiteral("valid receipt: 100 credits"))
                && verified.output.contains(QStringLiteral("in the ledger's log: entry")),
            qPrintable(verified.output));
        // The same from the docs alone, in Python: the signature, and the receipt's place in the log.
        const auto independent
            = run(Python, { QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/verify_receipt.py"), receipt });
        QVERIFY2(independent.exitCode == 0 && independent.output.contains(QStringLiteral("hashlib: entry")),
            qPrintable(independent.output));
        QFile receiptFile(receipt);
        QVERIFY(receiptFile.open(QIODevice::ReadOnly));
        const QByteArray doctored = receiptFile.readAll().replace("\"100\"", "\"10\"");
        receiptFile.close();
        Cluster::writeFile(receipt, QString::fromUtf8(doctored));
        const auto forged = run(Bin + QStringLiteral("/tessera-job"), { QStringLiteral("verify-receipt"), receipt });
        QVERIFY2(forged.exitCode != 0 && forged.output.contains(QStringLiteral("INVALID")), qPrintable(forged.output));
        const auto quote = cluster.job({ QStringLiteral("submit"), Job, QStringLiteral("--estimate") });
        QVERIFY2(
            quote.exitCode == 0 && quote.output.contains(QStringLiteral("training      40.5 credits")), qPrintable(quote.output));

        // The job owner fetches the weights and PyTorch loads them.
        const QString model = cluster.path(QStringLiteral("model.pt"));
        const auto fetched = cluster.job({ QStringLiteral("fetch"), jobId, QStringLiteral("-o"), model });
        QVERIFY2(fetched.exitCode == 0, qPrintable(fetched.output));
        const auto loaded = run(Python,
            { QStringLiteral("-c"),
                QStringLiteral("import torch; w = torch.load('%1'); print(sorted(w)); assert w['fc0.weight'].shape == (256, 784)")
                    .arg(model) });
        QVERIFY2(loaded.exitCode == 0, qPrintable(loaded.output));

        theLogHoldsAndAChangedAmountIsCaughtByEveryNode(cluster, processes);
    }

    // docs/LEDGER.md: the broker's log, checked from outside (tessera-job audit, and a checker in
    // Python from the docs), agrees with every figure the broker reports; then the operator halves
    // a shard's payment while the broker is stopped and leaves the books consistent. Every node
    // catches it at the first head after the restart, tessera-job check-head catches it against a
    // head kept from before, and tessera-node run exits 3.
    static void theLogHoldsAndAChangedAmountIsCaughtByEveryNode(Cluster& cluster, const QList<QProcess*>& nodes)
    {
        const auto audited = cluster.job({ QStringLiteral("audit") });
        QVERIFY2(audited.exitCode == 0 && audited.output.contains(QStringLiteral("all agree")), qPrintable(audited.output));
        qInfo("%s", qPrintable(audited.output.trimmed()));
        const auto checked
            = run(Python, { QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/check_log.py"), cluster.endpoint() });
        QVERIFY2(checked.exitCode == 0, qPrintable(checked.output));
        qInfo("%s", qPrintable(checked.output.trimmed()));
        // Every node keeps the newest head it checked: one of the whole log, soon.
        const std::int64_t logged = cluster.logSize();
        for (int i = 1; i <= 3; ++i)
            QVERIFY(QTest::qWaitFor([&] { return cluster.keptLogSize(i) >= logged; }, 120'000));
        const QString keptHead = cluster.path(QStringLiteral("kept-head.json"));
        Cluster::writeFile(keptHead, QString::fromUtf8(QJsonDocument(cluster.logHead()).toJson()));
        QVERIFY(cluster.job({ QStringLiteral("check-head"), keptHead }).exitCode == 0);

        ::kill(pid_t(cluster.broker()->processId()), SIGKILL);
        cluster.broker()->waitForFinished();
        const auto tampered = run(Python,
            { QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/tamper_ledger.py"),
                cluster.path(QStringLiteral("broker/broker.sqlite")), QStringLiteral("change-amount") });
        QVERIFY2(tampered.exitCode == 0, qPrintable(tampered.output));
        qInfo("tampered: %s", qPrintable(tampered.output.trimmed()));
        QElapsedTimer sinceRestart;
        sinceRestart.start();
        cluster.startBroker({}, QStringLiteral("LogHeadMs=500\n"));
        for (int i = 1; i <= 3; ++i)
            QVERIFY2(
                QTest::qWaitFor(
                    [&] { return cluster.log(QStringLiteral("node%1").arg(i)).contains(QStringLiteral("LEDGER LOG BROKEN")); },
                    120'000),
                qPrintable(cluster.log(QStringLiteral("node%1").arg(i)).right(3000)));
        qInfo("every node flagged the rewritten log %lld ms after the broker was started again", sinceRestart.elapsed());
        QVERIFY(!QDir(cluster.path(QStringLiteral("node1/log-evidence"))).entryList(QDir::Files).isEmpty());
        // The rewrite is consistent in itself: only a head from before shows it.
        const auto rechecked = cluster.job({ QStringLiteral("check-head"), keptHead });
        QVERIFY2(
            rechecked.exitCode != 0 && rechecked.output.contains(QStringLiteral("LOG BROKEN")), qPrintable(rechecked.output));
        nodes[0]->terminate();
        QVERIFY(nodes[0]->waitForFinished(60'000));
        QCOMPARE(nodes[0]->exitCode(), 3);
    }

    // Five nodes that cheat, each in its own way, and two honest ones on one job: every cheat is
    // caught by re-execution and slashed, the honest nodes are paid and never slashed, the job's
    // final weights are those of an honest run on one machine, and the books balance, also after a
    // kill -9 of the broker.
    void cheatersAreCaughtAndSlashedWhileHonestNodesArePaid()
    {
        const QString jobFile = m_dir.filePath(QStringLiteral("cheat-job.json"));
        Cluster::writeFile(jobFile, QStringLiteral(R"({
    "version": 1, "name": "verification e2e",
    "model": { "zoo": "mlp", "hidden": [64] },
    "dataset": { "builtin": "fashion-mnist" },
    "optimizer": { "kind": "sgd", "lr": 0.05, "momentum": 0.9 },
    "training": { "rounds": 4, "shardsPerRound": 4, "localSteps": 40, "batchSize": 32, "seed": 7, "threads": 1,
                  "checkpointInterval": 10 },
    "aggregation": { "method": "fedavg" },
    "budget": "1000",
    "verification": { "rate": 0.1 }
})"));
        const auto local = trainLocally(jobFile, m_dir.filePath(QStringLiteral("cheat-local")));
        QVERIFY2(!local.hash.isEmpty(), qPrintable(local.output));
        const QString honestHash = local.hash;

        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("DisputeTimeoutSeconds=20\nSelfVerifyAfterSeconds=600\n"));
        const QStringList modes { QStringLiteral("random"), QStringLiteral("fewer-steps"), QStringLiteral("copy"),
            QStringLiteral("stale"), QStringLiteral("wrong-data") };
        for (const auto& mode : modes)
            cluster.startCheater(mode);
        cluster.startNode(1);
        cluster.startNode(2);
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(job.value(QStringLiteral("weightsHash")).toString(), honestHash);

        QHash<QString, QJsonObject> byName;
        for (const auto& value : cluster.nodes())
            byName.insert(value.toObject().value(QStringLiteral("name")).toString(), value.toObject());
        for (const auto& mode : modes) {
            const auto cheater = byName.value(QStringLiteral("cheater-") + mode);
            qInfo("cheater %s: done %lld, disputes lost %lld, timeouts %lld, slashed %s", qPrintable(mode),
                cheater.value(QStringLiteral("shardsDone")).toInteger(),
                cheater.value(QStringLiteral("disputesLost")).toInteger(), cheater.value(QStringLiteral("timeouts")).toInteger(),
                qPrintable(cheater.value(QStringLiteral("slashed")).toString()));
            QVERIFY2(cheater.value(QStringLiteral("disputesLost")).toInteger() >= 1, qPrintable(mode));
            QVERIFY2(cheater.value(QStringLiteral("slashed")).toString() != u"0", qPrintable(mode));
        }
        for (const auto* name : { "node-1", "node-2" }) {
            const auto honest = byName.value(QString::fromLatin1(name));
            qInfo("%s: done %lld, verified %lld, balance %s", name, honest.value(QStringLiteral("shardsDone")).toInteger(),
                honest.value(QStringLiteral("verified")).toInteger(),
                qPrintable(honest.value(QStringLiteral("balance")).toString()));
            QCOMPARE(honest.value(QStringLiteral("disputesLost")).toInteger(), 0);
            QCOMPARE(honest.value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
            QVERIFY(honest.value(QStringLiteral("verified")).toInteger() > 0);
            QVERIFY(honest.value(QStringLiteral("balance")).toString().toDouble() > 0.0);
        }
        int disputes = 0;
        for (const auto& check : cluster.checks(jobId))
            disputes += check.toObject().value(QStringLiteral("outcome")).toString() != u"none" ? 1 : 0;
        qInfo("%d checks lost by someone", disputes);
        QVERIFY(cluster.ledgerConsistent());

        // A slashed node's results say so; an honest node's results went through verification.
        const auto results = run(Bin + QStringLiteral("/tessera-node"),
            { QStringLiteral("--config"), cluster.path(QStringLiteral("node1.ini")), QStringLiteral("results"),
                QStringLiteral("--json") });
        QVERIFY(results.output.contains(QStringLiteral("\"verified\"")));

        // kill -9 and restart: nothing is paid twice, the books still balance.
        const auto before = cluster.nodes();
        ::kill(pid_t(cluster.broker()->processId()), SIGKILL);
        cluster.broker()->waitForFinished();
        cluster.startBroker({}, QStringLiteral("DisputeTimeoutSeconds=20\nSelfVerifyAfterSeconds=600\n"));
        QVERIFY(QTest::qWaitFor([&] { return cluster.ledgerConsistent(); }, 20'000));
        const auto after = cluster.nodes();
        QCOMPARE(after.size(), before.size());
        for (qsizetype i = 0; i < after.size(); ++i)
            QCOMPARE(after[i].toObject().value(QStringLiteral("balance")), before[i].toObject().value(QStringLiteral("balance")));

        // The ledger's log holds every slash with the ruling that caused it, and its replay agrees
        // with every stake the broker reports (docs/LEDGER.md, "Audit").
        const auto audited = cluster.job({ QStringLiteral("audit") });
        QVERIFY2(audited.exitCode == 0 && audited.output.contains(QStringLiteral("all agree")), qPrintable(audited.output));
        qInfo("%s", qPrintable(audited.output.trimmed()));

        // An honest node's record (docs/LEDGER.md, "Portable records") checks offline against the
        // broker's key, and shows its verified results and no lost dispute; a cheater's shows its losses.
        const auto key = cluster.signingKey();
        Cluster::writeFile(cluster.path(QStringLiteral("cheater-random.ini")),
            QStringLiteral("[Node]\nDataDirectory=%1\n").arg(cluster.path(QStringLiteral("cheater-random"))));
        for (const auto& [name, lost] :
            { std::pair { QStringLiteral("node1"), false }, std::pair { QStringLiteral("cheater-random"), true } }) {
            const QString file = cluster.path(name + QStringLiteral(".record"));
            const auto exported = run(Bin + QStringLiteral("/tessera-node"),
                { QStringLiteral("--config"), cluster.path(name + QStringLiteral(".ini")), QStringLiteral("record"),
                    QStringLiteral("-o"), file, QStringLiteral("--broker"), cluster.endpoint() });
            QVERIFY2(exported.exitCode == 0, qPrintable(exported.output));
            const auto verified = run(Bin + QStringLiteral("/tessera-job"),
                { QStringLiteral("verify-record"), file, QStringLiteral("--signer"), key, QStringLiteral("--json") });
            QVERIFY2(verified.exitCode == 0, qPrintable(verified.output));
            const auto summary
                = QJsonDocument::fromJson(verified.standardOutput.toUtf8()).object().value(QStringLiteral("summary")).toObject();
            qInfo("record of %s: %s", qPrintable(name),
                qPrintable(QString::fromUtf8(QJsonDocument(summary).toJson(QJsonDocument::Compact))));
            QCOMPARE(summary.value(QStringLiteral("disputesLost")).toInt() > 0, lost);
            if (!lost)
                QVERIFY(summary.value(QStringLiteral("verified")).toInt() + summary.value(QStringLiteral("agreed")).toInt() > 0);
        }
        aDeletedSlashIsCaughtByEveryHonestNode(cluster);
    }

    // The operator takes a slash out of history while the broker is stopped (its stake given back,
    // the entries after it renumbered, the books consistent): the honest nodes, which kept a head
    // that holds the slash, flag the broker as soon as it serves again.
    static void aDeletedSlashIsCaughtByEveryHonestNode(Cluster& cluster)
    {
        // The honest nodes have checked a head that holds the whole log, slashes included.
        const std::int64_t logged = cluster.logSize();
        for (int i = 1; i <= 2; ++i)
            QVERIFY(QTest::qWaitFor([&] { return cluster.keptLogSize(i) >= logged; }, 120'000));
        ::kill(pid_t(cluster.broker()->processId()), SIGKILL);
        cluster.broker()->waitForFinished();
        const auto tampered = run(Python,
            { QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/tamper_ledger.py"),
                cluster.path(QStringLiteral("broker/broker.sqlite")), QStringLiteral("delete-slash") });
        QVERIFY2(tampered.exitCode == 0, qPrintable(tampered.output));
        qInfo("tampered: %s", qPrintable(tampered.output.trimmed()));
        QElapsedTimer sinceRestart;
        sinceRestart.start();
        cluster.startBroker({}, QStringLiteral("DisputeTimeoutSeconds=20\nSelfVerifyAfterSeconds=600\nLogHeadMs=500\n"));
        QVERIFY(cluster.ledgerConsistent()); // the books alone show nothing
        for (int i = 1; i <= 2; ++i)
            QVERIFY2(
                QTest::qWaitFor(
                    [&] { return cluster.log(QStringLiteral("node%1").arg(i)).contains(QStringLiteral("LEDGER LOG BROKEN")); },
                    120'000),
                qPrintable(cluster.log(QStringLiteral("node%1").arg(i)).right(3000)));
        qInfo("both honest nodes flagged the deleted slash %lld ms after the broker was started again", sinceRestart.elapsed());
    }

    // training.determinism portable across machines that differ (docs/VERIFICATION.md, "Disputes
    // over portable jobs"): nodes that make other kernel choices (ATen capability, OpenBLAS core
    // type, the portable matmul's SIMD width) and allow fewer threads than the job names verify
    // each other bit for bit; the broker re-executes nothing itself and compares nothing with a
    // tolerance. Two cheaters that answer disputes from their own runs (twice the learning rate,
    // another data order) lose disputes narrowed to one instruction: the first update, which the
    // referee runs alone, and the step's batch, which it reads itself. The job ends on the bits
    // train-local computes with the job's own thread count.
    void aPortableJobIsVerifiedAcrossCpusAndItsCheatersLoseOverOneInstruction()
    {
        const QString jobFile = m_dir.filePath(QStringLiteral("portable-job.json"));
        Cluster::writeFile(jobFile, QStringLiteral(R"({
    "version": 1, "name": "portable across CPUs",
    "model": { "zoo": "mlp", "hidden": [64] },
    "dataset": { "builtin": "fashion-mnist" },
    "optimizer": { "kind": "sgd", "lr": 0.05, "momentum": 0.9 },
    "training": { "rounds": 2, "shardsPerRound": 4, "localSteps": 30, "batchSize": 32, "seed": 5, "threads": 2,
                  "checkpointInterval": 10, "determinism": "portable" },
    "budget": "1000",
    "verification": { "rate": 1.0 }
})"));
        const auto local = trainLocally(jobFile, m_dir.filePath(QStringLiteral("portable-local")));
        QVERIFY2(!local.hash.isEmpty(), qPrintable(local.output));

        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("DisputeTimeoutSeconds=60\nSelfVerifyAfterSeconds=600\n"));
        cluster.startCheater(QStringLiteral("wrong-lr"), { QStringLiteral("ATEN_CPU_CAPABILITY=avx2") });
        cluster.startCheater(QStringLiteral("wrong-data"), { QStringLiteral("TESSERA_PORTABLE_ISA=generic") });
        cluster.startNode(1, {}, Cluster::FirstStart::SkipBenchmark, QStringLiteral("MaxThreads=1\n"), Cluster::olderCpu());
        cluster.startNode(2, {}, Cluster::FirstStart::SkipBenchmark, QStringLiteral("MaxThreads=2\n"), Cluster::newerCpu());
        cluster.startNode(3, {}, Cluster::FirstStart::SkipBenchmark, QStringLiteral("MaxThreads=2\n"));
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 5; }, 120'000));
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(job.value(QStringLiteral("weightsHash")).toString(), local.hash);

        QSet<QString> profiles;
        for (const auto& value : cluster.nodes()) {
            const auto node = value.toObject();
            const auto name = node.value(QStringLiteral("name")).toString();
            qInfo("%s (%s): done %lld, verified %lld, disputes lost %lld, slashed %s", qPrintable(name),
                qPrintable(node.value(QStringLiteral("runtimeProfile")).toString()),
                node.value(QStringLiteral("shardsDone")).toInteger(), node.value(QStringLiteral("verified")).toInteger(),
                node.value(QStringLiteral("disputesLost")).toInteger(),
                qPrintable(node.value(QStringLiteral("slashed")).toString()));
            if (name.startsWith(QStringLiteral("cheater-"))) {
                QVERIFY2(node.value(QStringLiteral("disputesLost")).toInteger() >= 1, qPrintable(name));
                QVERIFY2(node.value(QStringLiteral("slashed")).toString() != u"0", qPrintable(name));
                continue;
            }
            profiles.insert(node.value(QStringLiteral("runtimeProfile")).toString());
            QCOMPARE(node.value(QStringLiteral("disputesLost")).toInteger(), 0);
            QCOMPARE(node.value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
        }
        QVERIFY2(profiles.size() >= 2, "the honest nodes registered one runtime profile: nothing differed");
        // Every check was decided by nodes of different machines bit for bit, or by one instruction.
        int verified = 0, narrowed = 0;
        for (const auto& value : cluster.checks(jobId)) {
            const auto detail = value.toObject().value(QStringLiteral("detail")).toString();
            QVERIFY2(
                !detail.contains(QStringLiteral("the broker re-executed")) && !detail.contains(QStringLiteral("runtime profile")),
                qPrintable(detail));
            verified += detail.contains(QStringLiteral("same bits")) ? 1 : 0;
            narrowed += detail.contains(QStringLiteral("alone")) || detail.contains(QStringLiteral("read the batch")) ? 1 : 0;
        }
        qInfo("checks: %d verified bit for bit, %d disputes narrowed to one instruction", verified, narrowed);
        QVERIFY(verified > 0);
        const auto broker = cluster.log(QStringLiteral("broker"));
        QVERIFY2(broker.contains(QStringLiteral("alone and agrees with")), qPrintable(broker));
        QVERIFY2(broker.contains(QStringLiteral("read the batch of step")), qPrintable(broker));
        QVERIFY(cluster.ledgerConsistent());
    }

    // A language model through the broker: a small gpt on the fortunes text (AdamW, schedule,
    // clipping, Nesterov outer steps) ends on train-local's bits with every result re-executed, a
    // cheater on it is caught and slashed, and the owner reads text from the job's weights, the
    // same for the same seed.
    void aLanguageModelTrainsThroughTheBrokerAndItsCheaterLoses()
    {
        const QString jobFile = m_dir.filePath(QStringLiteral("lm-job.json"));
        Cluster::writeFile(jobFile, QStringLiteral(R"({
    "version": 1, "name": "small gpt",
    "model": { "zoo": "gpt", "layers": 2, "heads": 2, "width": 32, "context": 32 },
    "dataset": { "builtin": "fortunes" },
    "optimizer": { "kind": "adamw", "lr": 0.003, "weightDecay": 0.1, "clipNorm": 1.0,
                   "schedule": { "warmupSteps": 5, "minLr": 0.0003 } },
    "training": { "rounds": 2, "shardsPerRound": 3, "localSteps": 20, "batchSize": 16, "seed": 5, "threads": 1,
                  "checkpointInterval": 5 },
    "aggregation": { "method": "nesterov", "outerLr": 0.7, "outerMomentum": 0.9, "optimizerState": "averaged" },
    "budget": "1000",
    "verification": { "rate": 1.0 }
})"));
        const auto local = trainLocally(jobFile, m_dir.filePath(QStringLiteral("lm-local")));
        QVERIFY2(!local.hash.isEmpty(), qPrintable(local.output));
        QVERIFY2(local.output.contains(QStringLiteral("perplexity")), qPrintable(local.output));
        const QString honestHash = local.hash;

        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("DisputeTimeoutSeconds=20\nSelfVerifyAfterSeconds=600\n"));
        cluster.startCheater(QStringLiteral("fewer-steps"));
        cluster.startNode(1);
        cluster.startNode(2);
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 3; }, 120'000));
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(job.value(QStringLiteral("weightsHash")).toString(), honestHash);
        for (const auto& value : cluster.nodes()) {
            const auto node = value.toObject();
            const auto name = node.value(QStringLiteral("name")).toString();
            qInfo("%s: done %lld, disputes lost %lld, slashed %s", qPrintable(name),
                node.value(QStringLiteral("shardsDone")).toInteger(), node.value(QStringLiteral("disputesLost")).toInteger(),
                qPrintable(node.value(QStringLiteral("slashed")).toString()));
            const bool cheater = name.startsWith(QStringLiteral("cheater"));
            QCOMPARE(node.value(QStringLiteral("disputesLost")).toInteger() >= 1, cheater);
            QCOMPARE(node.value(QStringLiteral("slashed")).toString() != u"0", cheater);
        }
        QVERIFY(cluster.ledgerConsistent());

        const auto waited = cluster.job({ QStringLiteral("wait"), jobId });
        QVERIFY2(waited.standardOutput.contains(QStringLiteral("perplexity")), qPrintable(waited.output));
        const QStringList sample { QStringLiteral("sample"), jobId, QStringLiteral("--prompt"), QStringLiteral("The "),
            QStringLiteral("--tokens"), QStringLiteral("30"), QStringLiteral("--seed"), QStringLiteral("1") };
        const auto first = cluster.job(sample, 60'000);
        QVERIFY2(first.exitCode == 0, qPrintable(first.output));
        QVERIFY2(first.standardOutput.startsWith(QStringLiteral("The ")) && first.standardOutput.size() >= 30,
            qPrintable(first.output));
        QCOMPARE(cluster.job(sample, 60'000).standardOutput, first.standardOutput);
        qInfo("sample: %s", qPrintable(first.standardOutput.simplified()));
    }

    // A node keeps one training state per result (the middle checkpoint) and re-creates any other
    // for a dispute. A cheater whose last interval is another run's loses the dispute at the last
    // checkpoint, settled from the state before it, which the honest side re-created. A cheater with
    // an honest chain whose revealed int8 update is another run's loses the dispute over what was
    // revealed, settled from the last state, re-created too.
    // Colluders (docs/VERIFICATION.md, "Who checks whom"): two nodes that compute the same wrong
    // result (1.5 times the learning rate) beside two honest ones. A sample's verifier is drawn
    // among the eligible nodes, so the pair cannot arrange to check each other; where the draw
    // picks the partner, the broker's audit re-executes the shard (here every time,
    // Broker/AuditPercent=100). Every result of a node's warm-up is sampled, so the bound is one:
    // each colluder is slashed at its first result anyone checks (or its first check of another's),
    // no lie reaches the weights (they end as an honest run's), and the honest nodes lose nothing.
    void colludingVerifiersAreCaught()
    {
        const QString jobFile = m_dir.filePath(QStringLiteral("collusion-job.json"));
        Cluster::writeFile(jobFile, QStringLiteral(R"({
    "version": 1, "name": "collusion e2e",
    "model": { "zoo": "mlp", "hidden": [32] },
    "dataset": { "builtin": "fashion-mnist" },
    "optimizer": { "kind": "sgd", "lr": 0.05 },
    "training": { "rounds": 3, "shardsPerRound": 4, "localSteps": 20, "batchSize": 32, "seed": 11, "threads": 1,
                  "checkpointInterval": 10 },
    "budget": "1000",
    "verification": { "rate": 0.1 }
})"));
        const auto local = trainLocally(jobFile, m_dir.filePath(QStringLiteral("collusion-local")));
        QVERIFY2(!local.hash.isEmpty(), qPrintable(local.output));

        Cluster cluster;
        // MinDeadlineSeconds: on a loaded machine a shard may take longer than its 30 s floor; a
        // deadline passed would hand it to another node and change who checks whom.
        cluster.startBroker({},
            QStringLiteral("AuditPercent=100\nDisputeTimeoutSeconds=20\nSelfVerifyAfterSeconds=600\nMinDeadlineSeconds=600\n"));
        const QStringList colluders { QStringLiteral("colluder-1"), QStringLiteral("colluder-2") };
        for (const auto& name : colluders)
            cluster.startCheater(QStringLiteral("collude"), {}, name);
        cluster.startNode(1);
        cluster.startNode(2);
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        const auto job = cluster.waitForEnd(jobId);
        QVERIFY2(job.value(QStringLiteral("state")).toString() == u"finished", qPrintable(cluster.log(QStringLiteral("broker"))));
        QCOMPARE(job.value(QStringLiteral("weightsHash")).toString(), local.hash);

        QHash<QString, QString> nameOf;
        for (const auto& value : cluster.nodes())
            nameOf.insert(value.toObject().value(QStringLiteral("nodeId")).toString(),
                value.toObject().value(QStringLiteral("name")).toString());
        int paired = 0, audited = 0;
        for (const auto& value : cluster.checks(jobId)) {
            const auto check = value.toObject();
            const bool pair = colluders.contains(nameOf.value(check.value(QStringLiteral("checked")).toString()))
                && colluders.contains(nameOf.value(check.value(QStringLiteral("verifier")).toString()));
            paired += pair ? 1 : 0;
            audited += check.value(QStringLiteral("detail")).toString().contains(QStringLiteral("(an audit)")) ? 1 : 0;
            if (pair)
                QCOMPARE(check.value(QStringLiteral("outcome")).toString(), QStringLiteral("both"));
        }
        qInfo("%d checks of a colluder drawn for its partner, %d caught by the broker's audit", paired, audited);
        for (const auto& name : colluders) {
            const auto node = cluster.nodeNamed(name);
            qInfo("%s: done %lld, disputes lost %lld, slashed %s", qPrintable(name),
                node.value(QStringLiteral("shardsDone")).toInteger(), node.value(QStringLiteral("disputesLost")).toInteger(),
                qPrintable(node.value(QStringLiteral("slashed")).toString()));
            QVERIFY2(node.value(QStringLiteral("slashed")).toString() != u"0", qPrintable(name));
        }
        for (const auto* name : { "node-1", "node-2" }) {
            const auto honest = cluster.nodeNamed(QLatin1String(name));
            QCOMPARE(honest.value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
            QCOMPARE(honest.value(QStringLiteral("disputesLost")).toInteger(), 0);
        }
        QVERIFY(cluster.ledgerConsistent());
    }

    void aDisputeIsSettledFromARecreatedState_data()
    {
        QTest::addColumn<QString>("mode");
        QTest::addColumn<int>("recreated"); // the checkpoint whose state the honest side re-creates
        QTest::addColumn<QString>("ruling");
        QTest::newRow("late") << QStringLiteral("late") << 3 << QStringLiteral("the referee re-executed checkpoint 4");
        QTest::newRow("poisoned") << QStringLiteral("poisoned") << 4
                                  << QStringLiteral("the referee revealed the update from the last checkpoint");
    }
    void aDisputeIsSettledFromARecreatedState()
    {
        QFETCH(QString, mode);
        QFETCH(int, recreated);
        QFETCH(QString, ruling);
        const QString jobFile = m_dir.filePath(QStringLiteral("recreated-job.json"));
        Cluster::writeFile(jobFile, QStringLiteral(R"({
    "version": 1, "name": "re-created state",
    "model": { "zoo": "mlp", "hidden": [1024, 1024] },
    "dataset": { "builtin": "fashion-mnist" },
    "optimizer": { "kind": "sgd", "lr": 0.05, "momentum": 0.9 },
    "training": { "rounds": 2, "shardsPerRound": 3, "localSteps": 40, "batchSize": 32, "seed": 3, "threads": 1,
                  "checkpointInterval": 10 },
    "aggregation": { "compression": "int8" },
    "budget": "1000",
    "verification": { "rate": 1.0 }
})"));
        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("SelfVerifyAfterSeconds=600\n"));
        cluster.startCheater(mode);
        cluster.startNode(1);
        cluster.startNode(2);
        // All three take part from the start, however slowly the machine starts them.
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 3; }, 120'000));
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QVERIFY(cluster.ledgerConsistent());
        // Checkpoints 0..4: the state kept is checkpoint 2's; the dispute needs another one.
        const QString asked = QStringLiteral("re-creating checkpoint %1 of").arg(recreated);
        const auto recreations
            = cluster.log(QStringLiteral("node1")).count(asked) + cluster.log(QStringLiteral("node2")).count(asked);
        qInfo("states re-created for disputes at checkpoint %d: %lld", recreated, qlonglong(recreations));
        QVERIFY2(recreations >= 1, qPrintable(cluster.log(QStringLiteral("broker"))));
        QVERIFY2(cluster.log(QStringLiteral("broker")).contains(ruling), qPrintable(cluster.log(QStringLiteral("broker"))));
        for (const auto& value : cluster.nodes()) {
            const auto node = value.toObject();
            const auto name = node.value(QStringLiteral("name")).toString();
            qInfo("%s: disputes lost %lld, slashed %s", qPrintable(name), node.value(QStringLiteral("disputesLost")).toInteger(),
                qPrintable(node.value(QStringLiteral("slashed")).toString()));
            if (name == QStringLiteral("cheater-") + mode) {
                QVERIFY(node.value(QStringLiteral("disputesLost")).toInteger() >= 1);
                QVERIFY(node.value(QStringLiteral("slashed")).toString() != u"0");
            } else {
                QCOMPARE(node.value(QStringLiteral("disputesLost")).toInteger(), 0);
                QCOMPARE(node.value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
            }
        }
    }

    void aNodeKilledMidRoundChangesNothing()
    {
        Cluster cluster;
        cluster.startBroker(
            {}, QStringLiteral("SamplingWarmup=0\nSamplingFloorPercent=0\n")); // only the job's 10% is re-executed: the first
                                                                               // test checks every shard
        QProcess* victim = cluster.startNode(1);
        cluster.startNode(2);
        cluster.startNode(3);
        const QString jobId = cluster.submit();
        QVERIFY(cluster.waitForRound(jobId, 3));
        // Killed just after it starts a shard, so that shard has to go to another node.
        const auto started = cluster.log(QStringLiteral("node1")).count(QStringLiteral("training "));
        QVERIFY(QTest::qWaitFor(
            [&] { return cluster.log(QStringLiteral("node1")).count(QStringLiteral("training ")) > started; }, 240'000));
        ::kill(pid_t(victim->processId()), SIGKILL);
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(job.value(QStringLiteral("weightsHash")).toString(), m_baseline);
        QVERIFY(cluster.ledgerConsistent());
    }

    void aBrokerKilledMidJobGoesOnAfterARestart()
    {
        Cluster cluster;
        QProcess* broker = cluster.startBroker({}, QStringLiteral("SamplingWarmup=0\nSamplingFloorPercent=0\n"));
        cluster.startNode(1);
        cluster.startNode(2);
        const QString jobId = cluster.submit();
        QVERIFY(cluster.waitForRound(jobId, 4));
        ::kill(pid_t(broker->processId()), SIGKILL);
        broker->waitForFinished();
        QTest::qWait(1500);
        cluster.startBroker({},
            QStringLiteral(
                "SamplingWarmup=0\nSamplingFloorPercent=0\n")); // the same data folder and port; the nodes find it again
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(job.value(QStringLiteral("weightsHash")).toString(), m_baseline);
        // Every shard and every check paid exactly once, across the crash.
        QCOMPARE(job.value(QStringLiteral("escrow")).toString(), QStringLiteral("0"));
        QVERIFY(cluster.ledgerConsistent());
        everyPaymentOnce(cluster, jobId, false);
    }

    // SIGTERM while a shard trains: the node finishes it, reports it and stops. The shard is long and
    // the signal comes once the node says it started it, so it lands mid-shard on any CPU; the node
    // says so ("finishing the shard in training") only when it does.
    void sigtermLetsTheShardInTrainingFinish()
    {
        const QString longShard = m_dir.filePath(QStringLiteral("long-shard.json"));
        Cluster::writeFile(longShard, QStringLiteral(R"({"name": "one long shard", "model": {"zoo": "mlp"},
            "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9},
            "training": {"rounds": 1, "shardsPerRound": 1, "localSteps": 1500, "batchSize": 64, "seed": 9,
                         "checkpointInterval": 500}, "budget": "100"})"));
        Cluster cluster;
        cluster.startBroker();
        QProcess* node = cluster.startNode(1);
        const QString jobId = cluster.submit(longShard);
        QVERIFY(
            QTest::qWaitFor([&] { return cluster.log(QStringLiteral("node1")).contains(QStringLiteral("training ")); }, 120'000));
        ::kill(pid_t(node->processId()), SIGTERM);
        QVERIFY(node->waitForFinished(120'000));
        QCOMPARE(node->exitStatus(), QProcess::NormalExit);
        QCOMPARE(node->exitCode(), 0);
        const QString log = cluster.log(QStringLiteral("node1"));
        QVERIFY2(log.contains(QStringLiteral("finishing the shard in training before stopping")), qPrintable(log));
        QVERIFY2(log.contains(QStringLiteral("stopped after reporting 1 shard(s)")), qPrintable(log));
        // The broker has the result; alone, it checks it itself, and the job ends.
        const auto end = cluster.waitForEnd(jobId);
        QCOMPARE(end.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        // The node bonds some of what it earned (the faucet bonded its first 10 credits).
        const auto bonded = run(Bin + QStringLiteral("/tessera-node"),
            { QStringLiteral("--config"), cluster.path(QStringLiteral("node1.ini")), QStringLiteral("stake"),
                QStringLiteral("bond"), QStringLiteral("1.5"), QStringLiteral("--broker"), cluster.endpoint() });
        QVERIFY2(bonded.exitCode == 0 && bonded.output.contains(QStringLiteral("stake 11.5")), qPrintable(bonded.output));
    }

    // Independent peers from the docs alone: a node written in Python (pyzmq, PyTorch, PyNaCl) from
    // PROTOCOL.md, DETERMINISM.md and JOBS.md trains beside a native node. Every result of a new node
    // is re-executed by another, so each checks the other bit for bit; its weights are PyTorch's
    // state_dict() (an OrderedDict), accepted as any dict; the job ends with train-local's bits.
    // Then beside a cheater: the disputes ask it for its training states, it delivers them, and the
    // referee sides with it.
    void aNodeBuiltFromTheDocsTrainsBesideNativeNodes()
    {
        const QString jobFile = m_dir.filePath(QStringLiteral("python-job.json"));
        Cluster::writeFile(
            jobFile, QStringLiteral(R"({"name": "docs node", "model": {"zoo": "mlp", "hidden": [64], "dropout": 0.1},
            "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9},
            "training": {"rounds": 2, "shardsPerRound": 4, "localSteps": 30, "batchSize": 32, "seed": 11,
                         "checkpointInterval": 10}, "budget": "100", "verification": {"rate": 0}})"));
        const auto local = trainLocally(jobFile, m_dir.filePath(QStringLiteral("python-local")));
        QVERIFY2(!local.hash.isEmpty(), qPrintable(local.output));
        const QString baseline = local.hash;

        auto recordOf = [](Cluster& cluster, const QString& name) {
            for (const auto& value : cluster.nodes()) {
                if (value.toObject().value(QStringLiteral("name")).toString() == name)
                    return value.toObject();
            }
            return QJsonObject {};
        };
        // The broker never checks a result itself here: the two nodes must check each other.
        const QString settings = QStringLiteral("SelfVerifyAfterSeconds=600\n");
        {
            Cluster cluster;
            cluster.startBroker({}, settings);
            cluster.startNode(1);
            cluster.startPythonNode(QStringLiteral("python"));
            // Both take part from the first shard, however slowly the machine starts Python.
            QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 2; }, 120'000));
            const auto end = cluster.waitForEnd(cluster.submit(jobFile));
            QVERIFY2(
                end.value(QStringLiteral("state")).toString() == u"finished", qPrintable(cluster.log(QStringLiteral("python"))));
            QCOMPARE(end.value(QStringLiteral("weightsHash")).toString(), baseline);
            const auto python = recordOf(cluster, QStringLiteral("python"));
            const auto native = recordOf(cluster, QStringLiteral("node-1"));
            qInfo("python node: done %lld, verified %lld; native node: done %lld, verified %lld",
                python.value(QStringLiteral("shardsDone")).toInteger(), python.value(QStringLiteral("verified")).toInteger(),
                native.value(QStringLiteral("shardsDone")).toInteger(), native.value(QStringLiteral("verified")).toInteger());
            QVERIFY2(python.value(QStringLiteral("verified")).toInteger() > 0, qPrintable(cluster.log(QStringLiteral("python"))));
            // Where the Python node rebuilt a round's weights from the change (PROTOCOL.md), it got them right.
            QVERIFY2(!cluster.log(QStringLiteral("python")).contains(QStringLiteral("did not give its weights")),
                qPrintable(cluster.log(QStringLiteral("python"))));
            QVERIFY(native.value(QStringLiteral("verified")).toInteger() > 0);
            for (const auto& record : { python, native }) {
                QCOMPARE(record.value(QStringLiteral("disputesLost")).toInteger(), 0);
                QCOMPARE(record.value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
            }
            QVERIFY(cluster.ledgerConsistent());
        }
        {
            Cluster cluster;
            cluster.startBroker({}, QStringLiteral("DisputeTimeoutSeconds=60\n"));
            // The Python node registers first, so that it is there to check the cheater's samples
            // (a sample no connected node could check is re-executed by the broker itself).
            cluster.startPythonNode(QStringLiteral("python"));
            QVERIFY(QTest::qWaitFor(
                [&] { return cluster.log(QStringLiteral("python")).contains(QStringLiteral("registered as")); }, 120'000));
            cluster.startCheater(QStringLiteral("fewer-steps"));
            const auto end = cluster.waitForEnd(cluster.submit(jobFile));
            const QString log = cluster.log(QStringLiteral("python"));
            QVERIFY2(end.value(QStringLiteral("state")).toString() == u"finished", qPrintable(log));
            QCOMPARE(end.value(QStringLiteral("weightsHash")).toString(), baseline);
            const auto python = recordOf(cluster, QStringLiteral("python"));
            const auto cheater = recordOf(cluster, QStringLiteral("cheater-fewer-steps"));
            QVERIFY2(log.contains(QStringLiteral("sent checkpoint")), qPrintable(log));
            QVERIFY(cheater.value(QStringLiteral("disputesLost")).toInteger() >= 1);
            QCOMPARE(python.value(QStringLiteral("disputesLost")).toInteger(), 0);
            QCOMPARE(python.value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
            QVERIFY(cluster.ledgerConsistent());
        }
    }

    // A real network: CURVE, no faucet. The operator credits an owner and a node by hand (the
    // broker running); the node bonds its stake; the owner, with the identity tessera-job keeps,
    // submits, waits, fetches, cancels a second job and sees its refund, each command a separate
    // invocation; another identity's cancel, fetch, balance and receipt of the owner's are refused.
    void ownersHaveAnIdentityOnANetworkWithoutAFaucet()
    {
        const QString small = m_dir.filePath(QStringLiteral("owner-job.json"));
        Cluster::writeFile(small, QStringLiteral(R"({"name": "owner's job", "model": {"zoo": "mlp", "hidden": [32]},
            "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
            "training": {"rounds": 2, "shardsPerRound": 2, "localSteps": 20, "batchSize": 32, "seed": 5}, "budget": "5"})"));
        Cluster cluster;
        const QString keys = cluster.path(QStringLiteral("broker.key"));
        cluster.startBroker({ QStringLiteral("--keys"), keys }, {}, Cluster::Money::OperatorOnly);
        QVERIFY(QTest::qWaitFor([&] { return QFile::exists(keys); }, 60'000));
        const QString address = cluster.curveAddress(keys);
        QVERIFY(QTest::qWaitFor(
            [&] { return cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("list") }, 5'000, address).exitCode == 0; },
            60'000));

        // The owner's identity: created on first use, the same on every later run.
        const QString owner = cluster.account();
        QCOMPARE(owner.size(), 40);
        QCOMPARE(cluster.account(), owner);
        const auto who = cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("whoami") });
        QVERIFY2(who.output.contains(owner) && who.output.contains(QStringLiteral("lost identity is lost credits")),
            qPrintable(who.output));
        // Without money nothing can be submitted.
        const auto broke = cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("submit"), small }, 60'000, address);
        QVERIFY2(broke.exitCode != 0, qPrintable(broke.output));

        // The operator funds the owner and a node, while the broker runs.
        const auto credited = cluster.brokerCommand({ QStringLiteral("credit"), QStringLiteral("--memo"),
            QStringLiteral("invoice 17"), QStringLiteral("--"), owner, QStringLiteral("50") });
        QVERIFY2(credited.exitCode == 0 && credited.output.contains(QStringLiteral("credited 50 credits")),
            qPrintable(credited.output));
        const QString cause = credited.output.section(QStringLiteral("(credit:"), 1).section(u';', 0, 0);
        cluster.startNode(1, { address });
        QVERIFY(QTest::qWaitFor(
            [&] { return cluster.log(QStringLiteral("node1")).contains(QStringLiteral("registered with")); }, 120'000));
        const auto nodeCredited = cluster.brokerCommand(
            { QStringLiteral("credit"), QStringLiteral("--"), cluster.nodeAccount(1), QStringLiteral("10") });
        QVERIFY2(nodeCredited.exitCode == 0, qPrintable(nodeCredited.output));
        const auto bonded = run(Bin + QStringLiteral("/tessera-node"),
            { QStringLiteral("--config"), cluster.path(QStringLiteral("node1.ini")), QStringLiteral("stake"),
                QStringLiteral("bond"), QStringLiteral("10"), QStringLiteral("--broker"), address });
        QVERIFY2(bonded.exitCode == 0 && bonded.output.contains(QStringLiteral("stake 10")), qPrintable(bonded.output));

        auto balance = [&](const QString& identity) {
            const auto reply = cluster.jobAs(identity, { QStringLiteral("balance"), QStringLiteral("--json") }, 60'000, address);
            return QJsonDocument::fromJson(reply.standardOutput.toUtf8()).object().value(QStringLiteral("balance")).toString();
        };
        QCOMPARE(balance(QStringLiteral("owner")), QStringLiteral("50"));
        const auto receipt = cluster.jobAs(QStringLiteral("owner"),
            { QStringLiteral("receipt"), QStringLiteral("credit:") + cause, QStringLiteral("-o"),
                cluster.path(QStringLiteral("credit.json")) },
            60'000, address);
        QVERIFY2(receipt.exitCode == 0, qPrintable(receipt.output));

        // Submit, wait, fetch: separate invocations, one account.
        const auto submitted = cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("submit"), small }, 60'000, address);
        QVERIFY2(submitted.exitCode == 0, qPrintable(submitted.output));
        const QString jobId = submitted.standardOutput.trimmed();
        const auto waited = cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("wait"), jobId }, 300'000, address);
        QVERIFY2(waited.exitCode == 0, qPrintable(waited.output + cluster.log(QStringLiteral("node1"))));
        const QString model = cluster.path(QStringLiteral("model.pt"));
        QCOMPARE(
            cluster
                .jobAs(QStringLiteral("owner"), { QStringLiteral("fetch"), jobId, QStringLiteral("-o"), model }, 60'000, address)
                .exitCode,
            0);
        QVERIFY(QFileInfo(model).size() > 0);
        const QString afterFirst = balance(QStringLiteral("owner"));

        // A second job, cancelled at once: its budget comes back.
        const auto second = cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("submit"), small }, 60'000, address);
        const QString secondId = second.standardOutput.trimmed();
        QCOMPARE(cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("cancel"), secondId }, 60'000, address).exitCode, 0);
        const QString refundFile = cluster.path(QStringLiteral("refund.json"));
        QCOMPARE(cluster
                     .jobAs(QStringLiteral("owner"),
                         { QStringLiteral("receipt"), QStringLiteral("refund:") + secondId, QStringLiteral("-o"), refundFile },
                         60'000, address)
                     .exitCode,
            0);
        QFile refund(refundFile);
        QVERIFY(refund.open(QIODevice::ReadOnly));
        const double refunded
            = QJsonDocument::fromJson(refund.readAll()).object().value(QStringLiteral("amount")).toString().toDouble();
        const double spent = 5.0 - refunded; // what its shards, if any started, were paid
        QCOMPARE(qRound64(balance(QStringLiteral("owner")).toDouble() * 1e6), qRound64((afterFirst.toDouble() - spent) * 1e6));
        qInfo("owner: 50 credited, %s after the first job, %s refunded of the cancelled job's 5", qPrintable(afterFirst),
            qPrintable(QString::number(refunded)));

        // Another identity: refused, with the documented errors.
        const auto cancel = cluster.jobAs(QStringLiteral("other"), { QStringLiteral("cancel"), jobId }, 60'000, address);
        QVERIFY2(cancel.exitCode == 1 && cancel.output.contains(QStringLiteral("forbidden")), qPrintable(cancel.output));
        const auto fetch = cluster.jobAs(QStringLiteral("other"),
            { QStringLiteral("fetch"), jobId, QStringLiteral("-o"), cluster.path(QStringLiteral("stolen.pt")) }, 60'000, address);
        QVERIFY2(fetch.exitCode == 1 && fetch.output.contains(QStringLiteral("not yours")), qPrintable(fetch.output));
        const auto peek = cluster.jobAs(QStringLiteral("other"), { QStringLiteral("balance"), owner }, 60'000, address);
        QVERIFY2(peek.exitCode == 1 && peek.output.contains(QStringLiteral("forbidden")), qPrintable(peek.output));
        const auto escrow = cluster.jobAs(QStringLiteral("other"),
            { QStringLiteral("receipt"), QStringLiteral("escrow:") + jobId, QStringLiteral("-o"),
                cluster.path(QStringLiteral("x.json")) },
            60'000, address);
        QVERIFY2(escrow.exitCode == 1 && escrow.output.contains(QStringLiteral("forbidden")), qPrintable(escrow.output));
        QCOMPARE(balance(QStringLiteral("other")), QStringLiteral("0"));
        QVERIFY(cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("ledger") }, 60'000, address).exitCode == 0);

        // The node sees what it earned (its identity's account).
        const auto earned = run(Bin + QStringLiteral("/tessera-node"),
            { QStringLiteral("--config"), cluster.path(QStringLiteral("node1.ini")), QStringLiteral("balance"),
                QStringLiteral("--broker"), address, QStringLiteral("--json") });
        QVERIFY2(QJsonDocument::fromJson(earned.standardOutput.toUtf8())
                     .object()
                     .value(QStringLiteral("balance"))
                     .toString()
                     .toDouble()
                > 0,
            qPrintable(earned.output));
    }

    // Every command from each caller (the job's owner, another client, a node, the operator), as
    // PROTOCOL.md's table says, against a real broker under CURVE (tests/e2e/python/authorization.py).
    void whoMayDoWhatIsEnforcedUnderCurve()
    {
        Cluster cluster;
        const QString operatorKey = cluster.account(QStringLiteral("operator"));
        const QString keys = cluster.path(QStringLiteral("broker.key"));
        cluster.startBroker({ QStringLiteral("--keys"), keys }, QStringLiteral("OperatorKeys=\"%1\"\n").arg(operatorKey),
            Cluster::Money::OperatorOnly);
        QVERIFY(QTest::qWaitFor([&] { return QFile::exists(keys); }, 60'000));
        const QString address = cluster.curveAddress(keys);
        QVERIFY(QTest::qWaitFor(
            [&] { return cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("list") }, 5'000, address).exitCode == 0; },
            60'000));
        const auto credited
            = cluster.brokerCommand({ QStringLiteral("credit"), QStringLiteral("--"), cluster.account(), QStringLiteral("200") });
        QVERIFY2(credited.exitCode == 0, qPrintable(credited.output));
        (void)cluster.account(QStringLiteral("other"));
        const auto submitted = cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("submit"), Job }, 60'000, address);
        QVERIFY2(submitted.exitCode == 0, qPrintable(submitted.output));
        const auto table = run(Python,
            { QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/authorization.py"), cluster.endpoint(),
                address.section(u'#', 1), cluster.path(QStringLiteral("owner.key")), cluster.path(QStringLiteral("other.key")),
                cluster.path(QStringLiteral("operator.key")), submitted.standardOutput.trimmed() },
            120'000);
        qInfo("%s", qPrintable(table.output));
        QVERIFY2(table.exitCode == 0, qPrintable(table.output + cluster.log(QStringLiteral("broker"))));
    }

    // A client that gave up waiting for its SUBMIT and asks again under the same request id gets
    // the first job: one job, one escrow (docs/PROTOCOL.md, "Submitting twice";
    // tests/e2e/python/submit_twice.py). So does `tessera-job submit --request-id ID` run twice.
    void aSubmitAskedAgainCreatesOneJob()
    {
        Cluster cluster;
        cluster.startBroker({}, {}, Cluster::Money::OperatorOnly);
        QVERIFY(QTest::qWaitFor([&] { return cluster.job({ QStringLiteral("list") }, 5'000).exitCode == 0; }, 60'000));
        const auto credited = cluster.brokerCommand(
            { QStringLiteral("credit"), QStringLiteral("--"), QStringLiteral("retrying-owner"), QStringLiteral("50") });
        QVERIFY2(credited.exitCode == 0, qPrintable(credited.output));
        const auto retried = run(Python,
            { QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/submit_twice.py"), cluster.endpoint(),
                QStringLiteral("retrying-owner") },
            180'000);
        qInfo("%s", qPrintable(retried.output));
        QVERIFY2(retried.exitCode == 0, qPrintable(retried.output + cluster.log(QStringLiteral("broker"))));

        const QString me = cluster.account();
        QVERIFY(
            cluster.brokerCommand({ QStringLiteral("credit"), QStringLiteral("--"), me, QStringLiteral("200") }).exitCode == 0);
        const QStringList submit { QStringLiteral("submit"), QStringLiteral("--request-id"), QStringLiteral("cli-1"), Job };
        const auto first = cluster.job(submit, 60'000);
        const auto second = cluster.job(submit, 60'000);
        QVERIFY2(first.exitCode == 0 && second.exitCode == 0, qPrintable(first.output + second.output));
        QCOMPARE(second.standardOutput.trimmed(), first.standardOutput.trimmed());
        QCOMPARE(cluster.balanceOf(me), 100'000'000); // 200 credited, one budget of 100 escrowed
        QVERIFY(cluster.ledgerConsistent());
    }

    // Capabilities (docs/PROTOCOL.md): a node from before int8 updates (it declares none) is never
    // sent an int8 job's work, and one that declares int8 but reveals whole weights is refused at
    // RESULT, not slashed, and the shard goes to another node (it gets no more of the job). Tessera's node trains the job and
    // nobody loses stake. A fresh node bonds before its first run.
    void nodesGetOnlyTasksTheyDeclaredTheyCanRun()
    {
        Cluster cluster;
        cluster.startBroker();
        const QString jobFile = cluster.path(QStringLiteral("int8.json"));
        Cluster::writeFile(jobFile, QStringLiteral(R"({"version": 1, "name": "int8", "model": {"zoo": "mlp", "hidden": [32]},
                "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
                "training": {"rounds": 2, "shardsPerRound": 2, "localSteps": 20, "batchSize": 32, "seed": 1,
                             "threads": 1, "checkpointInterval": 10},
                "aggregation": {"compression": "int8"}, "budget": "20", "verification": {"rate": 0.0}})"));
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        cluster.startPythonNode(QStringLiteral("old"), { QStringLiteral("--capabilities"), QStringLiteral("none") });
        cluster.startPythonNode(QStringLiteral("whole"), { QStringLiteral("--ignore-compression") });
        const auto says = [&](const QString& log, const QString& text) {
            return QTest::qWaitFor([&] { return cluster.log(log).contains(text); }, 300'000);
        };
        QVERIFY2(says(QStringLiteral("old"), QStringLiteral("registered as")), qPrintable(cluster.log(QStringLiteral("old"))));
        QVERIFY2(says(QStringLiteral("whole"), QStringLiteral("result refused")),
            qPrintable(cluster.log(QStringLiteral("whole")) + cluster.log(QStringLiteral("broker"))));
        QVERIFY2(cluster.log(QStringLiteral("whole")).contains(QStringLiteral("compression")),
            qPrintable(cluster.log(QStringLiteral("whole"))));
        cluster.startNode(1);
        const auto job = cluster.waitForEnd(jobId);
        QVERIFY2(job.value(QStringLiteral("state")).toString() == u"finished", qPrintable(cluster.log(QStringLiteral("broker"))));
        QCOMPARE(cluster.log(QStringLiteral("old")).count(QStringLiteral("training ")), 0); // never sent a task
        for (const auto* name : { "old", "whole", "node-1" }) {
            const auto node = cluster.nodeNamed(QLatin1String(name));
            QVERIFY2(!node.isEmpty() && node.value(QStringLiteral("slashed")).toString() == u"0",
                qPrintable(QStringLiteral("%1: %2").arg(QLatin1String(name), QString::fromUtf8(QJsonDocument(node).toJson()))));
        }
        QVERIFY(cluster.ledgerConsistent());
    }

    // Without CURVE a broker listens on loopback only, unless told --insecure-plaintext.
    void aPlaintextBrokerStaysOnLoopback()
    {
        Cluster cluster;
        Cluster::writeFile(cluster.path(QStringLiteral("broker.ini")),
            QStringLiteral("[Broker]\nDataDirectory=%1\n").arg(cluster.path(QStringLiteral("broker"))));
        const QString port = cluster.endpoint().section(u':', -1);
        const QStringList open { QStringLiteral("--config"), cluster.path(QStringLiteral("broker.ini")), QStringLiteral("--bind"),
            QStringLiteral("tcp://0.0.0.0:") + port };
        const auto refused = run(Bin + QStringLiteral("/tessera-broker"), open, 60'000);
        QVERIFY2(refused.exitCode != 0 && refused.output.contains(QStringLiteral("refusing to listen on tcp://0.0.0.0:"))
                && refused.output.contains(QStringLiteral("--insecure-plaintext")),
            qPrintable(refused.output));
        QProcess insecure;
        insecure.setProcessChannelMode(QProcess::MergedChannels);
        insecure.start(Bin + QStringLiteral("/tessera-broker"), open + QStringList { QStringLiteral("--insecure-plaintext") });
        QVERIFY(insecure.waitForStarted());
        QVERIFY(QTest::qWaitFor([&] { return cluster.job({ QStringLiteral("list") }, 5'000).exitCode == 0; }, 60'000));
        insecure.terminate();
        QVERIFY(insecure.waitForFinished(30'000));
        QVERIFY2(insecure.readAll().contains("every caller acts as the operator"), "no warning");
    }

    // docs/LEDGER.md, "Watching the log": an operator forks its broker's books (a copy of its data
    // folder, served by a second broker of the same network and key) and shows each fork to other
    // nodes. A node that reaches both brokers sees two histories that no proof joins and flags the
    // network; a head published from one fork fails tessera-job check-head against the other.
    void aHistoryForkedForSomeNodesIsASplitView()
    {
        Cluster first;
        Cluster second;
        first.startBroker({}, QStringLiteral("LogHeadMs=300\n"));
        first.startNode(2); // shared history: node 2's stake
        QVERIFY(QTest::qWaitFor([&] { return first.logSize() >= 1; }, 120'000));
        ::kill(pid_t(first.broker()->processId()), SIGKILL);
        first.broker()->waitForFinished();
        QCOMPARE(run(QStringLiteral("cp"),
                     { QStringLiteral("-a"), first.path(QStringLiteral("broker")), second.path(QStringLiteral("broker")) })
                     .exitCode,
            0);
        QFile::remove(second.path(QStringLiteral("broker/broker.lock")));
        first.startBroker({}, QStringLiteral("LogHeadMs=300\n"));
        second.startBroker({}, QStringLiteral("LogHeadMs=300\n"));
        // Each fork grows on its own: a node that only one of them knows.
        first.startNode(3);
        second.startNode(4);
        QVERIFY(QTest::qWaitFor([&] { return first.logSize() >= 2 && second.logSize() >= 2; }, 120'000));
        first.startNode(1, { first.endpoint(), second.endpoint() });
        QVERIFY2(QTest::qWaitFor(
                     [&] { return first.log(QStringLiteral("node1")).contains(QStringLiteral("LEDGER LOG BROKEN")); }, 120'000),
            qPrintable(first.log(QStringLiteral("node1")).right(3000)));
        qInfo("%s",
            qPrintable(first.log(QStringLiteral("node1")).section(QStringLiteral("LEDGER LOG BROKEN"), 1).section(u'\n', 0, 0)));
        const auto evidence = QDir(first.path(QStringLiteral("node1/log-evidence"))).entryList(QDir::Files);
        QCOMPARE(evidence.size(), 1);
        // A head one fork published does not extend to the other's.
        const QString published = first.path(QStringLiteral("published-head.json"));
        Cluster::writeFile(published, QString::fromUtf8(QJsonDocument(second.logHead()).toJson()));
        const auto checked = first.job({ QStringLiteral("check-head"), published });
        QVERIFY2(checked.exitCode != 0 && checked.output.contains(QStringLiteral("LOG BROKEN")), qPrintable(checked.output));
    }

    void oneNodeServesTwoBrokers()
    {
        const QString small = m_dir.filePath(QStringLiteral("small.json"));
        Cluster::writeFile(small, QStringLiteral(R"({"name": "small", "model": {"zoo": "mlp", "hidden": [32]},
            "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
            "training": {"rounds": 2, "shardsPerRound": 2, "localSteps": 20, "batchSize": 32, "seed": 5}, "budget": "1"})"));
        Cluster first;
        Cluster second;
        // With one node nobody else can re-execute its sampled results: the brokers do, after a second.
        first.startBroker({}, QStringLiteral("SelfVerifyAfterSeconds=1\n"));
        // The second network trusts the first's records (docs/LEDGER.md, "Portable records").
        const QString network = first.logHead().value(QStringLiteral("network")).toString();
        const QString key = first.signingKey();
        second.startBroker({}, QStringLiteral("SelfVerifyAfterSeconds=1\nTrustedNetworks=%1:%2\n").arg(network, key));
        first.startNode(1, { first.endpoint(), second.endpoint() });
        const QString a = first.submit(small);
        QCOMPARE(first.waitForEnd(a).value(QStringLiteral("state")).toString(), QStringLiteral("finished"));

        // The node's record of the first network starts its streak on the second, once.
        const QString record = first.path(QStringLiteral("node1.record"));
        const QString ini = first.path(QStringLiteral("node1.ini"));
        const auto exported = run(Bin + QStringLiteral("/tessera-node"),
            { QStringLiteral("--config"), ini, QStringLiteral("record"), QStringLiteral("-o"), record, QStringLiteral("--broker"),
                first.endpoint() });
        QVERIFY2(exported.exitCode == 0, qPrintable(exported.output));
        qInfo("%s", qPrintable(exported.output.trimmed()));
        const QString nodeId = first.nodes().first().toObject().value(QStringLiteral("nodeId")).toString();
        const auto streakOnSecond = [&]() -> std::int64_t {
            for (const auto& node : second.nodes()) {
                if (node.toObject().value(QStringLiteral("nodeId")).toString() == nodeId)
                    return node.toObject().value(QStringLiteral("streak")).toInteger();
            }
            return -1;
        };
        QVERIFY(QTest::qWaitFor([&] { return streakOnSecond() >= 0; }, 120'000)); // registered there
        const std::int64_t before = streakOnSecond();
        const auto present = [&] {
            return run(Bin + QStringLiteral("/tessera-node"),
                { QStringLiteral("--config"), ini, QStringLiteral("present-record"), record, QStringLiteral("--broker"),
                    second.endpoint(), QStringLiteral("--json") });
        };
        const auto presented = present();
        QVERIFY2(presented.exitCode == 0, qPrintable(presented.output));
        const std::int64_t credited
            = QJsonDocument::fromJson(presented.standardOutput.toUtf8()).object().value(QStringLiteral("credited")).toInteger();
        qInfo("streak on the second network: %lld before, %lld credited by the record, %lld after",
            static_cast<long long>(before), static_cast<long long>(credited), static_cast<long long>(streakOnSecond()));
        QVERIFY(credited > 0 && credited <= 12);
        QCOMPARE(before, 0);
        QCOMPARE(streakOnSecond(), credited);
        const QString b = second.submit(small);
        QCOMPARE(second.waitForEnd(b).value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        // Presented again (a client that asks again after a timeout): the same answer, nothing moves.
        const std::int64_t streak = streakOnSecond();
        const auto again = present();
        QCOMPARE(QJsonDocument::fromJson(again.standardOutput.toUtf8()).object().value(QStringLiteral("credited")).toInteger(),
            credited);
        QCOMPARE(streakOnSecond(), streak);
        // The first network does not take its own log's record, and a doctored record is refused.
        const auto own = run(Bin + QStringLiteral("/tessera-node"),
            { QStringLiteral("--config"), ini, QStringLiteral("present-record"), record, QStringLiteral("--broker"),
                first.endpoint() });
        QVERIFY2(own.exitCode != 0 && own.output.contains(QStringLiteral("this network")), qPrintable(own.output));
    }

    // A job that brings its own files: a TorchScript model and tensor files made by PyTorch, uploaded
    // by tessera-job, kept as blobs by the broker (which builds the first weights and evaluates
    // from them) and fetched by the node.
    void aTorchScriptJobOnTensorFilesTrainsThroughTheBroker()
    {
        const QString script = m_dir.filePath(QStringLiteral("make_files.py"));
        Cluster::writeFile(script, QStringLiteral(R"(import sys, torch
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(20, 3)
    def forward(self, x):
        return self.fc(x)
torch.jit.script(Net()).save(sys.argv[1] + "/net.pt")
centers = torch.randn(3, 20) * 3
for name, n in (("train.pt", 600), ("test.pt", 200)):
    y = torch.randint(0, 3, (n,))
    torch.save({"x": centers[y] + torch.randn(n, 20), "y": y}, sys.argv[1] + "/" + name)
)"));
        const auto made = run(Python, { script, m_dir.path() });
        QVERIFY2(made.exitCode == 0, qPrintable(made.output));
        const QString jobFile = m_dir.filePath(QStringLiteral("files.json"));
        Cluster::writeFile(jobFile, QStringLiteral(R"({"name": "own files", "model": {"torchscript": {"file": "net.pt"}},
            "dataset": {"tensors": {"trainFile": "train.pt", "testFile": "test.pt", "trainSamples": 600}},
            "optimizer": {"kind": "sgd", "lr": 0.05},
            "training": {"rounds": 2, "shardsPerRound": 2, "localSteps": 10, "batchSize": 16, "seed": 5}, "budget": "1"})"));
        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("SelfVerifyAfterSeconds=1\n"));
        cluster.startNode(1);
        const auto end = cluster.waitForEnd(cluster.submit(jobFile));
        QCOMPARE(end.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        const auto history = end.value(QStringLiteral("history")).toArray();
        QCOMPARE(history.size(), 2);
        QVERIFY2(history.last().toObject().value(QStringLiteral("testAccuracy")).toDouble() > 0.9,
            qPrintable(QString::fromUtf8(QJsonDocument(end).toJson())));
    }

    void hostileInputGetsErrorsAndTheBrokerServesOn()
    {
        Cluster cluster;
        cluster.startBroker();
        const auto hostile
            = run(Python, { QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/hostile_client.py"), cluster.endpoint() });
        QVERIFY2(hostile.exitCode == 0, qPrintable(hostile.output));
        QVERIFY(hostile.output.contains(QStringLiteral("the peer was dropped")));
        QVERIFY(hostile.output.contains(QStringLiteral("the broker still serves")));
        QCOMPARE(cluster.broker()->state(), QProcess::Running);
        QVERIFY(cluster.log(QStringLiteral("broker")).contains(QStringLiteral("dropped a peer")));
        // A node id and a name with "%1" in them are shown as they are, not substituted into.
        const auto nodes = cluster.job({ QStringLiteral("nodes") });
        QVERIFY2(nodes.output.contains(QStringLiteral("pct%1%2%3nod  name %1 %2  ")), qPrintable(nodes.output));
    }

    void curveRefusesPlaintextAndWrongKeys()
    {
        Cluster cluster;
        const QString publicKey = cluster.startCurveBroker();
        QVERIFY2(!publicKey.isEmpty(), qPrintable(cluster.log(QStringLiteral("broker"))));
        const auto client = run(
            Python, { QStringLiteral(TESSERA_SOURCE_DIR "/tests/e2e/python/curve_client.py"), cluster.endpoint(), publicKey });
        QVERIFY2(client.exitCode == 0,
            qPrintable(client.output + QStringLiteral("\nbroker log:\n") + cluster.log(QStringLiteral("broker"))));
        // tessera-job over CURVE, with the key in the address.
        const auto listed
            = cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("list") }, 60'000, cluster.endpoint() + u'#' + publicKey);
        QVERIFY2(listed.exitCode == 0 && listed.output.contains(QStringLiteral("no jobs")), qPrintable(listed.output));
    }

    void allowListAdmitsOnlyListedKeys()
    {
        Cluster cluster;
        const QString keys = cluster.path(QStringLiteral("broker.key"));
        // The broker admits one node key; tessera-job (a fresh key each run) is not on the list.
        const QString nodeKeys = cluster.path(QStringLiteral("node1/node.key"));
        QDir().mkpath(cluster.path(QStringLiteral("node1")));
        const auto created = run(Python,
            { QStringLiteral("-c"),
                QStringLiteral("import zmq; p, s = zmq.curve_keypair(); open('%1', 'w').write('public %s\\nsecret %s\\n' % "
                               "(p.decode(), s.decode()))")
                    .arg(nodeKeys) });
        QVERIFY2(created.exitCode == 0, qPrintable(created.output));
        QFile nodeKeyFile(nodeKeys);
        QVERIFY(nodeKeyFile.open(QIODevice::ReadOnly));
        const QString nodeKey = QString::fromLatin1(nodeKeyFile.readLine()).trimmed().section(u' ', 1);
        Cluster::writeFile(cluster.path(QStringLiteral("broker.ini")), QString());
        cluster.startBroker({ QStringLiteral("--keys"), keys });
        QVERIFY(QTest::qWaitFor([&] { return QFile::exists(keys); }, 60'000));
        cluster.broker()->kill(); // restart it with the allow list in its settings
        cluster.broker()->waitForFinished();
        QFile brokerKeyFile(keys);
        QVERIFY(brokerKeyFile.open(QIODevice::ReadOnly));
        const QString brokerKey = QString::fromLatin1(brokerKeyFile.readLine()).trimmed().section(u' ', 1);
        const QString ini = cluster.path(QStringLiteral("allow.ini"));
        Cluster::writeFile(ini,
            QStringLiteral("[Broker]\nDataDirectory=%1\nKeyFile=%2\nAllowList=\"%3\"\n")
                .arg(cluster.path(QStringLiteral("broker")), keys, nodeKey));
        QProcess broker;
        broker.start(Bin + QStringLiteral("/tessera-broker"),
            { QStringLiteral("--config"), ini, QStringLiteral("--bind"), cluster.endpoint() });
        QVERIFY(broker.waitForStarted());
        const QString address = cluster.endpoint() + u'#' + brokerKey;
        // The listed node registers and works: the broker is up and serving.
        cluster.startNode(1, { address });
        QVERIFY(QTest::qWaitFor(
            [&] { return cluster.log(QStringLiteral("node1")).contains(QStringLiteral("registered with")); }, 120'000));
        // So a client that is not listed is refused by a broker that serves, not by one still starting.
        const auto refused = cluster.jobAs(QStringLiteral("owner"), { QStringLiteral("list") }, 60'000, address);
        QVERIFY2(refused.exitCode != 0 && refused.output.contains(QStringLiteral("no answer")), qPrintable(refused.output));
        broker.kill();
        broker.waitForFinished();
    }
};

QTEST_GUILESS_MAIN(NetworkTest)
#include "tst_network.moc"
