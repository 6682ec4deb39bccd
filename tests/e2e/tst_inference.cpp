// Inference jobs end to end (docs/JOBS.md, "Inference jobs"): a broker, two honest nodes and a
// cheater that changes one input's output, as real processes on 127.0.0.1. The network's result
// must equal tessera-node infer-local byte for byte, the cheater must be slashed and the job owner
// charged only for accepted shards and their checks.

#include "cluster.h"

using namespace tessera::tests::e2e;

class InferenceTest : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    Run node(const QStringList& arguments)
    {
        return run(Bin + QStringLiteral("/tessera-node"),
            QStringList { QStringLiteral("--config"), QStringLiteral("/dev/null") } + arguments);
    }

    // The job's result as infer-local writes it (empty when it failed).
    QByteArray inferLocally(const QString& jobFile, const QString& name)
    {
        const QString out = m_dir.filePath(name + QStringLiteral(".jsonl"));
        const auto local = node({ QStringLiteral("infer-local"), jobFile, QStringLiteral("-o"), out });
        if (local.exitCode != 0)
            qWarning("%s", qPrintable(local.output));
        QFile file(out);
        return local.exitCode == 0 && file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
    }

    static QByteArray fetched(Cluster& cluster, const QString& jobId, const QString& file)
    {
        const auto fetch = cluster.job({ QStringLiteral("fetch"), jobId, QStringLiteral("-o"), file });
        if (fetch.exitCode != 0)
            qWarning("%s", qPrintable(fetch.output));
        QFile result(file);
        return result.open(QIODevice::ReadOnly) ? result.readAll() : QByteArray();
    }

    // The cheater lost at least one dispute and was slashed; no honest node was.
    static void onlyTheCheaterLost(Cluster& cluster)
    {
        for (const auto& value : cluster.nodes()) {
            const auto record = value.toObject();
            const auto name = record.value(QStringLiteral("name")).toString();
            qInfo("%s: done %lld, verified %lld, disputes lost %lld, slashed %s", qPrintable(name),
                record.value(QStringLiteral("shardsDone")).toInteger(), record.value(QStringLiteral("verified")).toInteger(),
                record.value(QStringLiteral("disputesLost")).toInteger(),
                qPrintable(record.value(QStringLiteral("slashed")).toString()));
            const bool cheater = name.startsWith(QStringLiteral("cheater"));
            QCOMPARE(record.value(QStringLiteral("disputesLost")).toInteger() >= 1, cheater);
            QCOMPARE(record.value(QStringLiteral("slashed")).toString() != u"0", cheater);
        }
    }

    // A cluster of a broker, the cheater and two honest nodes, all registered.
    static void startNetwork(Cluster& cluster)
    {
        // No timer decides anything here, however slowly a loaded machine runs the nodes: deadlines
        // and the broker's own re-execution are far away, and a dispute is refereed at once.
        cluster.startBroker({}, QStringLiteral("MinDeadlineSeconds=900\nSelfVerifyAfterSeconds=900\n"));
        cluster.startCheater(QStringLiteral("one-line"));
        cluster.startNode(1);
        cluster.startNode(2);
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 3; }, 120'000));
    }

private Q_SLOTS:
    void initTestCase()
    {
        // A small classifier to label with: 200 steps of the zoo mlp (about 80% on the test set).
        Cluster::writeFile(m_dir.filePath(QStringLiteral("mlp-train.json")), QStringLiteral(R"({
    "name": "small mlp", "model": { "zoo": "mlp", "hidden": [64] }, "dataset": { "builtin": "fashion-mnist" },
    "optimizer": { "kind": "sgd", "lr": 0.05 },
    "training": { "rounds": 1, "shardsPerRound": 1, "localSteps": 200, "batchSize": 64, "seed": 3 }, "budget": "10"
})"));
        const auto trained = node({ QStringLiteral("train-local"), m_dir.filePath(QStringLiteral("mlp-train.json")),
            QStringLiteral("--out"), m_dir.filePath(QStringLiteral("mlp")) });
        QVERIFY2(trained.exitCode == 0, qPrintable(trained.output));
    }

    // The Fashion-MNIST test set labelled in 20 shards of 500: the result is infer-local's, the
    // accuracy the broker reports is the lines', the cheater (one line changed per shard) is
    // slashed at its first checked shard, and the budget paid exactly the accepted shards and their
    // re-executions, the rest back to the owner (the honest nodes' balances hold the slashed stake too).
    void aClassificationJobIsShardedCheckedAndPaidOnlyForAcceptedShards()
    {
        const QString jobFile = m_dir.filePath(QStringLiteral("classify.json"));
        Cluster::writeFile(jobFile, QStringLiteral(R"({
    "name": "label the test set", "kind": "inference",
    "model": { "zoo": "mlp", "hidden": [64], "initialWeights": { "file": "mlp/model.pt" } },
    "dataset": { "builtin": "fashion-mnist" },
    "inference": { "task": "classify", "split": "test", "batchSize": 50, "samplesPerShard": 500 },
    "budget": "100", "verification": { "rate": 1.0 }
})"));
        const auto local = inferLocally(jobFile, QStringLiteral("classify-local"));
        QCOMPARE(local.count('\n'), 10000);

        Cluster cluster;
        startNetwork(cluster);
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(job.value(QStringLiteral("shardsDone")).toInteger(), 20);
        const auto result = fetched(cluster, jobId, cluster.path(QStringLiteral("labels.jsonl")));
        QCOMPARE(result.size(), local.size());
        QVERIFY(result == local);
        // The accuracy the broker reports is the share of lines whose class is their label.
        std::int64_t correct = 0;
        for (const auto& line : local.split('\n')) {
            const auto object = QJsonDocument::fromJson(line).object();
            correct += !object.isEmpty() && object.value(QStringLiteral("class")) == object.value(QStringLiteral("label"));
        }
        const auto history = job.value(QStringLiteral("history")).toArray();
        QCOMPARE(history.size(), 1);
        QCOMPARE(history.first().toObject().value(QStringLiteral("testAccuracy")).toDouble(), double(correct) / 10000.0);
        QVERIFY(correct > 7000);

        onlyTheCheaterLost(cluster);
        QVERIFY(cluster.ledgerConsistent());
        // Paid: each of the 20 shards once (the cheater's never: they were computed again), and each
        // node's re-execution that did not lose (the ones that caught the cheater too); nothing else.
        std::int64_t verified = 0;
        for (const auto& value : cluster.checks(jobId)) {
            const auto check = value.toObject();
            const auto outcome = check.value(QStringLiteral("outcome")).toString();
            verified
                += !check.value(QStringLiteral("verifier")).toString().isEmpty() && (outcome == u"none" || outcome == u"accused");
        }
        const auto price = std::llround(job.value(QStringLiteral("pricePerShard")).toString().toDouble() * 1e6);
        const auto spent = 100'000'000 - cluster.balanceOf(cluster.account());
        qInfo("20 shards at %lld micro-credits, %lld re-executions paid; the owner spent %lld", qlonglong(price),
            qlonglong(verified), qlonglong(spent));
        QVERIFY(price > 0);
        QCOMPARE(spent, (20 + verified) * price);
    }

    // A node written in Python from the docs alone (tests/e2e/python/python_node.py) classifies
    // shards beside a native node, each checking the other's (the broker re-executes nothing
    // itself): the same bytes as infer-local, nobody loses.
    void aNodeBuiltFromTheDocsAnswersClassifyShards()
    {
        const QString jobFile = m_dir.filePath(QStringLiteral("classify-docs.json"));
        Cluster::writeFile(jobFile, QStringLiteral(R"({
    "name": "label from the docs", "kind": "inference",
    "model": { "zoo": "mlp", "hidden": [64], "initialWeights": { "file": "mlp/model.pt" } },
    "dataset": { "builtin": "fashion-mnist" },
    "inference": { "task": "classify", "split": "test", "batchSize": 100, "samplesPerShard": 1000 },
    "budget": "100", "verification": { "rate": 1.0 }
})"));
        const auto local = inferLocally(jobFile, QStringLiteral("classify-docs-local"));
        QCOMPARE(local.count('\n'), 10000);
        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("MinDeadlineSeconds=900\nSelfVerifyAfterSeconds=900\n"));
        cluster.startPythonNode(QStringLiteral("python"), { QStringLiteral("--capabilities"), QStringLiteral("int8,inference") });
        QVERIFY(QTest::qWaitFor(
            [&] { return cluster.log(QStringLiteral("python")).contains(QStringLiteral("registered as")); }, 120'000));
        cluster.startNode(1);
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 2; }, 120'000));
        const QString jobId = cluster.submit(jobFile);
        const auto job = cluster.waitForEnd(jobId);
        QVERIFY2(job.value(QStringLiteral("state")).toString() == u"finished", qPrintable(cluster.log(QStringLiteral("python"))));
        QVERIFY(fetched(cluster, jobId, cluster.path(QStringLiteral("docs.jsonl"))) == local);
        for (const auto& value : cluster.nodes()) {
            const auto record = value.toObject();
            qInfo("%s: done %lld, verified %lld", qPrintable(record.value(QStringLiteral("name")).toString()),
                record.value(QStringLiteral("shardsDone")).toInteger(), record.value(QStringLiteral("verified")).toInteger());
            QVERIFY2(record.value(QStringLiteral("verified")).toInteger() > 0, qPrintable(cluster.log(QStringLiteral("python"))));
            QCOMPARE(record.value(QStringLiteral("disputesLost")).toInteger(), 0);
            QCOMPARE(record.value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
        }
    }

    // A gpt trained on the network, then a generate job that names it (model.fromJob): 24 prompts
    // of a prompts file (uploaded, counted, read by each node) in shards of 4, completions that end
    // at "%\n" or 40 tokens, drawn with each prompt's seed.
    // The result equals infer-local's on the fetched weights, with the text added; the cheater
    // (one token changed per shard) is slashed.
    void aGenerationJobOnAFinishedJobsWeightsEqualsTheLocalRun()
    {
        const QString trainFile = m_dir.filePath(QStringLiteral("lm-train.json"));
        Cluster::writeFile(trainFile, QStringLiteral(R"({
    "name": "small gpt", "model": { "zoo": "gpt", "layers": 1, "heads": 2, "width": 32, "context": 32 },
    "dataset": { "builtin": "fortunes" }, "optimizer": { "kind": "adamw", "lr": 0.003 },
    "training": { "rounds": 1, "shardsPerRound": 1, "localSteps": 100, "batchSize": 32, "seed": 3 },
    "aggregation": { "compression": "none" }, "budget": "100"
})"));
        Cluster cluster;
        startNetwork(cluster);
        const QString trainId = cluster.submit(trainFile);
        QVERIFY(!trainId.isEmpty());
        QCOMPARE(cluster.waitForEnd(trainId).value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        const QString weights = m_dir.filePath(QStringLiteral("lm.pt"));
        QVERIFY(!fetched(cluster, trainId, weights).isEmpty());

        const QString inference = QStringLiteral(R"(
    "kind": "inference", "name": "fortunes",
    "inference": { "task": "generate", "prompts": { "file": "prompts.txt" }, "maxTokens": 40, "temperature": 0.8,
                   "seed": 11, "stop": [ "%\n" ], "samplesPerShard": 4 },
    "budget": "100", "verification": { "rate": 1.0 }
})");
        // Every third prompt is an empty line (a prompt too: it starts from "\n").
        QFile promptsFile(m_dir.filePath(QStringLiteral("prompts.txt")));
        QVERIFY(promptsFile.open(QIODevice::WriteOnly));
        for (int i = 0; i < 24; ++i)
            promptsFile.write(i % 3 == 0 ? QByteArray("\n") : QStringLiteral("Fortune %1: \n").arg(i).toUtf8());
        promptsFile.close();
        const QString networkFile = m_dir.filePath(QStringLiteral("generate.json"));
        Cluster::writeFile(networkFile, QStringLiteral(R"({ "model": { "fromJob": "%1" },)").arg(trainId) + inference);
        const QString localFile = m_dir.filePath(QStringLiteral("generate-local.json"));
        Cluster::writeFile(localFile,
            QStringLiteral(R"({ "model": { "zoo": "gpt", "layers": 1, "heads": 2, "width": 32, "context": 32,
                 "initialWeights": { "file": "lm.pt" } }, "dataset": { "builtin": "fortunes" },)")
                + inference);
        const auto local = inferLocally(localFile, QStringLiteral("generate-local"));
        QCOMPARE(local.count('\n'), 24);
        QVERIFY(local.contains("\"text\":"));

        const QString jobId = cluster.submit(networkFile);
        QVERIFY(!jobId.isEmpty());
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        const auto result = fetched(cluster, jobId, cluster.path(QStringLiteral("fortunes.jsonl")));
        QCOMPARE(QString::fromUtf8(result), QString::fromUtf8(local));
        onlyTheCheaterLost(cluster);
        QVERIFY(cluster.ledgerConsistent());
        // The verdict names the token where the cheater's completion parted from the referee's.
        bool named = false;
        for (const auto& value : cluster.checks(jobId))
            named
                = named || value.toObject().value(QStringLiteral("detail")).toString().contains(QStringLiteral("part at token"));
        QVERIFY(named);
    }

    // inference.determinism portable (docs/DETERMINISM.md, "Inference in portable mode"): nodes
    // that make other kernel choices (ATen capability, OpenBLAS core type, the portable matmul's
    // SIMD width) and allow fewer threads than the job names check each other's lines byte for
    // byte, with no tolerance; a labelling job and a generation job end on infer-local's bytes,
    // and the cheater (one line changed per shard) is slashed.
    void aPortableJobGivesTheSameLinesOnEveryCpu()
    {
        Cluster::writeFile(m_dir.filePath(QStringLiteral("lm-portable.json")), QStringLiteral(R"({
    "name": "small gpt", "model": { "zoo": "gpt", "layers": 1, "heads": 2, "width": 32, "context": 32 },
    "dataset": { "builtin": "fortunes" }, "optimizer": { "kind": "adamw", "lr": 0.003 },
    "training": { "rounds": 1, "shardsPerRound": 1, "localSteps": 60, "batchSize": 32, "seed": 4 }, "budget": "10"
})"));
        const auto trained = node({ QStringLiteral("train-local"), m_dir.filePath(QStringLiteral("lm-portable.json")),
            QStringLiteral("--out"), m_dir.filePath(QStringLiteral("lmp")) });
        QVERIFY2(trained.exitCode == 0, qPrintable(trained.output));
        const QString classifyFile = m_dir.filePath(QStringLiteral("classify-portable.json"));
        Cluster::writeFile(classifyFile, QStringLiteral(R"({
    "name": "label portably", "kind": "inference",
    "model": { "zoo": "mlp", "hidden": [64], "initialWeights": { "file": "mlp/model.pt" } },
    "dataset": { "builtin": "fashion-mnist" },
    "inference": { "task": "classify", "batchSize": 100, "samplesPerShard": 2500, "threads": 2, "determinism": "portable" },
    "budget": "100", "verification": { "rate": 1.0 }
})"));
        const QString generateFile = m_dir.filePath(QStringLiteral("generate-portable.json"));
        Cluster::writeFile(generateFile, QStringLiteral(R"({
    "name": "fortunes portably", "kind": "inference",
    "model": { "zoo": "gpt", "layers": 1, "heads": 2, "width": 32, "context": 32, "initialWeights": { "file": "lmp/model.pt" } },
    "dataset": { "builtin": "fortunes" },
    "inference": { "task": "generate", "prompts": { "text": "Fortune ", "count": 12 }, "maxTokens": 40, "temperature": 0.8,
                   "seed": 5, "stop": [ "%\n" ], "samplesPerShard": 3, "determinism": "portable" },
    "budget": "100", "verification": { "rate": 1.0 }
})"));
        const auto labels = inferLocally(classifyFile, QStringLiteral("classify-portable-local"));
        const auto completions = inferLocally(generateFile, QStringLiteral("generate-portable-local"));
        QCOMPARE(labels.count('\n'), 10000);
        QCOMPARE(completions.count('\n'), 12);

        Cluster cluster;
        cluster.startBroker({}, QStringLiteral("MinDeadlineSeconds=900\nSelfVerifyAfterSeconds=900\n"));
        cluster.startCheater(QStringLiteral("one-line"), { QStringLiteral("ATEN_CPU_CAPABILITY=avx2") });
        cluster.startNode(1, {}, Cluster::FirstStart::SkipBenchmark, QStringLiteral("MaxThreads=1\n"), Cluster::olderCpu());
        cluster.startNode(2, {}, Cluster::FirstStart::SkipBenchmark, QStringLiteral("MaxThreads=2\n"), Cluster::newerCpu());
        QVERIFY(QTest::qWaitFor([&] { return cluster.nodes().size() == 3; }, 120'000));
        const QString classifyId = cluster.submit(classifyFile), generateId = cluster.submit(generateFile);
        QVERIFY(!classifyId.isEmpty() && !generateId.isEmpty());
        for (const auto& [jobId, local, name] : { std::tuple { classifyId, labels, QStringLiteral("labels-portable.jsonl") },
                 std::tuple { generateId, completions, QStringLiteral("completions-portable.jsonl") } }) {
            QCOMPARE(cluster.waitForEnd(jobId).value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
            QCOMPARE(QString::fromUtf8(fetched(cluster, jobId, cluster.path(name))), QString::fromUtf8(local));
            // Every check compared bytes: none with the tolerance across runtime profiles.
            for (const auto& value : cluster.checks(jobId)) {
                const auto detail = value.toObject().value(QStringLiteral("detail")).toString();
                QVERIFY2(!detail.contains(QStringLiteral("runtime profile")), qPrintable(detail));
            }
        }
        QSet<QString> profiles;
        for (const auto& value : cluster.nodes())
            profiles.insert(value.toObject().value(QStringLiteral("runtimeProfile")).toString());
        QVERIFY2(profiles.size() >= 2, "the nodes registered one runtime profile: nothing differed");
        onlyTheCheaterLost(cluster);
        QVERIFY(cluster.ledgerConsistent());
    }
};

QTEST_GUILESS_MAIN(InferenceTest)
#include "tst_inference.moc"
