// Scale on a real broker and two nodes (docs/PERFORMANCE.md, "Scale"). A 37 M-parameter MLP
// (147 MB of weights) trains with verification as shipped (every result of a new node is
// re-executed by the other). The job must finish, no node may go silent while it works (the broker
// would re-issue its shards: a livelock at this size before), and a node keeps one training state
// per result, so its cache holds at most two model-sized files per result (the state and the
// result's weights) besides the rounds' weights; round 1's weights reach the nodes as their int8
// change from round 0's. And a job of 1,000 shards, whose listings all
// answer and whose broker keeps only what docs/BROKER.md, "Disk", says.

#include "cluster.h"

#include <QElapsedTimer>

#include <QDirIterator>
#include <QFileInfo>

using namespace tessera::tests::e2e;

namespace {

// A zoo MLP job of `rounds` x `shards` on Fashion-MNIST, run to its end on a broker and two nodes;
// the job's final status.
QJsonObject trainToTheEnd(Cluster& cluster, const QString& hidden, int rounds, int shards, int steps, int batch)
{
    cluster.startBroker();
    cluster.startNode(1);
    cluster.startNode(2);
    const QString jobFile = cluster.path(QStringLiteral("job.json"));
    Cluster::writeFile(jobFile,
        QStringLiteral(R"({"version": 1, "name": "scale", "model": {"zoo": "mlp", "hidden": %1},
            "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
            "training": {"rounds": %2, "shardsPerRound": %3, "localSteps": %4, "batchSize": %5, "seed": 1, "threads": 1},
            "budget": "1000"})")
            .arg(hidden)
            .arg(rounds)
            .arg(shards)
            .arg(steps)
            .arg(batch));
    const QString jobId = cluster.submit(jobFile);
    return jobId.isEmpty() ? QJsonObject {} : cluster.waitForEnd(jobId);
}

} // namespace

class ScaleTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void aFortyMillionParameterJobFinishesAndNoNodeGoesSilent()
    {
        constexpr int Rounds = 2;
        constexpr std::int64_t ModelBytes = 147'000'000; // 36.8 M float32 parameters
        Cluster cluster;
        const auto job = trainToTheEnd(cluster, QStringLiteral("[4096, 4096, 4096]"), Rounds, 2, 20, 32);
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QVERIFY(cluster.ledgerConsistent());

        const QString silent = QStringLiteral("went silent");
        QCOMPARE(cluster.log(QStringLiteral("broker")).count(silent), 0);
        // Round 1's weights come as their int8 change to nodes that hold round 0's (both do: each
        // trained or checked a shard of it), and each change gives them exactly.
        int rebuilt = 0;
        for (int node = 1; node <= 2; ++node) {
            const QString log = cluster.log(QStringLiteral("node%1").arg(node));
            rebuilt += int(log.count(QStringLiteral("rebuilt the round's weights from its change")));
            QCOMPARE(log.count(QStringLiteral("did not give its weights")), 0);
        }
        QVERIFY(rebuilt >= 1);
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

    // A long job (1,000 shards) on a broker and two nodes: every listing still answers (LIST,
    // NODES, VERIFICATIONS and STATUS, paginated), and the broker's disk follows docs/BROKER.md,
    // "Disk": the newest Broker/KeepRounds rounds' weights and the initial ones, whatever the number
    // of rounds, and no shard uploads of aggregated rounds.
    void aLongJobKeepsItsListsAndItsDiskInBounds()
    {
        constexpr int Rounds = 250, Shards = 4;
        Cluster cluster;
        const auto job = trainToTheEnd(cluster, QStringLiteral("[16]"), Rounds, Shards, 2, 8);
        const QString jobId = job.value(QStringLiteral("jobId")).toString();
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QVERIFY(cluster.ledgerConsistent());
        for (const auto& command : QList<QStringList> {
                 { QStringLiteral("list"), QStringLiteral("--all") },
                 { QStringLiteral("nodes"), QStringLiteral("--all") },
                 { QStringLiteral("verifications"), jobId },
                 { QStringLiteral("status"), jobId },
             }) {
            const auto answered = cluster.job(command, 60'000);
            QVERIFY2(answered.exitCode == 0, qPrintable(command.join(u' ') + QStringLiteral(": ") + answered.output));
        }
        // The ledger's log of the whole job, replayed by tessera-job audit, agrees with every balance,
        // stake and escrow the broker reports (docs/LEDGER.md, "Audit").
        QElapsedTimer audit;
        audit.start();
        const auto audited = cluster.job({ QStringLiteral("audit") }, 300'000);
        QVERIFY2(audited.exitCode == 0 && audited.output.contains(QStringLiteral("all agree")), qPrintable(audited.output));
        qInfo("%s (%lld ms)", qPrintable(audited.output.trimmed()), audit.elapsed());

        // The newest 3 rounds' weights (Broker/KeepRounds) and the initial ones stay, not the 247
        // older rounds'; the 1,000 shard uploads and the re-executions' do not (one round's worth
        // may, for the round in progress: none here).
        QVERIFY(cluster.job({ QStringLiteral("fetch"), jobId, QStringLiteral("-o"), cluster.path(QStringLiteral("model.pt")) })
                    .exitCode
            == 0);
        qint64 blobs = 0;
        int files = 0;
        for (QDirIterator it(cluster.path(QStringLiteral("broker/blobs")), QDir::Files, QDirIterator::Subdirectories);
             it.hasNext();) {
            it.next();
            blobs += it.fileInfo().size();
            ++files;
        }
        const qint64 model = QFileInfo(cluster.path(QStringLiteral("model.pt"))).size();
        qInfo(
            "broker blobs: %d files, %lld bytes; model %lld bytes, %d rounds", files, qlonglong(blobs), qlonglong(model), Rounds);
        QVERIFY(model > 0);
        constexpr int KeepRounds = 3;
        QVERIFY2(blobs <= (KeepRounds + 1 + Shards) * model * 11 / 10, "more than the retention rule keeps");
    }
};

QTEST_GUILESS_MAIN(ScaleTest)
#include "tst_scale.moc"
