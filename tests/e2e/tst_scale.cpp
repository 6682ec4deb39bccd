// Larger models on a real broker and two nodes (docs/PERFORMANCE.md, "Scale"): a 37 M-parameter MLP
// (147 MB of weights) trains with verification as shipped (every result of a new node is
// re-executed by the other). The job must finish, no node may go silent while it works (the broker
// would re-issue its shards: a livelock at this size before), and a node keeps one training state
// per result, so its cache holds at most two model-sized files per result (the state and the
// result's weights) besides the rounds' weights.

#include "cluster.h"

#include <QDirIterator>

using namespace tessera::tests::e2e;

class ScaleTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void aFortyMillionParameterJobFinishesAndNoNodeGoesSilent()
    {
        constexpr int Rounds = 2;
        constexpr std::int64_t ModelBytes = 147'000'000; // 36.8 M float32 parameters
        Cluster cluster;
        cluster.startBroker();
        cluster.startNode(1);
        cluster.startNode(2);
        const QString jobFile = cluster.path(QStringLiteral("job.json"));
        Cluster::writeFile(jobFile,
            QStringLiteral(R"({"version": 1, "name": "scale", "model": {"zoo": "mlp", "hidden": [4096, 4096, 4096]},
                "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
                "training": {"rounds": %1, "shardsPerRound": 2, "localSteps": 20, "batchSize": 32, "seed": 1, "threads": 1},
                "budget": "1000"})")
                .arg(Rounds));
        const QString jobId = cluster.submit(jobFile);
        QVERIFY(!jobId.isEmpty());
        const auto job = cluster.waitForEnd(jobId);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QVERIFY(cluster.ledgerConsistent());

        const QString silent = QStringLiteral("went silent");
        QCOMPARE(cluster.log(QStringLiteral("broker")).count(silent), 0);
        for (int node = 1; node <= 2; ++node) {
            const QString name = QStringLiteral("node%1").arg(node);
            QCOMPARE(cluster.log(name).count(silent), 0);
            const auto results = QJsonDocument::fromJson(run(Bin + QStringLiteral("/tessera-node"),
                                                             {
                                                                 QStringLiteral("--config"),
                                                                 cluster.path(name + QStringLiteral(".ini")),
                                                                 QStringLiteral("results"),
                                                                 QStringLiteral("--json"),
                                                             })
                                                             .standardOutput.toUtf8())
                                     .array()
                                     .size();
            int large = 0;
            for (QDirIterator it(cluster.path(name), QDir::Files, QDirIterator::Subdirectories); it.hasNext();) {
                it.next();
                large += it.fileInfo().size() >= ModelBytes ? 1 : 0;
            }
            qInfo("%s: %lld results, %d model-sized files in its cache", qPrintable(name), qlonglong(results), large);
            QVERIFY(results >= 1);
            QVERIFY(large <= 2 * results + Rounds);
        }
    }
};

QTEST_GUILESS_MAIN(ScaleTest)
#include "tst_scale.moc"
