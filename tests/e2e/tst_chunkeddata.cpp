// A chunked dataset end to end (docs/JOBS.md, "Chunked datasets"): tessera-job cuts a folder of
// text into content-addressed chunks and a manifest, a broker and two nodes train on it to
// train-local's bits, and each node holds only the chunks its shards read; hostile owners who name
// someone else's chunks, or a manifest that lies, are refused.

#include "cluster.h"

#include <core/datasetchunks.h>
#include <core/decomposition.h>
#include <core/jobspec.h>
#include <core/readfile.h>

#include <QDirIterator>
#include <QSet>

using namespace tessera::tests::e2e;
using namespace tessera;

namespace {

const QString ChunkedJob
    = QStringLiteral(R"({"name": "chunked text", "model": {"zoo": "gpt", "layers": 1, "heads": 2, "width": 16, "context": 16},
    "dataset": {"chunks": {"manifestFile": "chunks/manifest.json", "testFile": "chunks/test.pt", "trainSamples": %1}},
    "optimizer": {"kind": "adamw", "lr": 0.003},
    "training": {"rounds": 2, "shardsPerRound": 2, "localSteps": 6, "batchSize": 8, "seed": 9, "threads": 1,
                 "determinism": "portable", "checkpointInterval": 3},
    "budget": "20"})");

// The names (SHA-256 hex) of the blobs under a folder: a blob store names its files so.
QSet<QString> blobsUnder(const QString& folder)
{
    QSet<QString> names;
    QDirIterator it(folder, QDir::Files, QDirIterator::Subdirectories);
    while (it.hasNext())
        names.insert(QFileInfo(it.next()).fileName());
    return names;
}

} // namespace

class ChunkedDataTest : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    core::DatasetManifest m_manifest;
    QString m_jobFile;

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        const QString corpus = m_dir.filePath(QStringLiteral("corpus"));
        QVERIFY(QDir().mkpath(corpus + QStringLiteral("/more")));
        QVERIFY(QFile::copy(QStringLiteral("/usr/share/games/fortunes/science"), corpus + QStringLiteral("/science")));
        QVERIFY(QFile::copy(QStringLiteral("/usr/share/games/fortunes/linux"), corpus + QStringLiteral("/more/linux")));
        const auto chunked = run(Bin + QStringLiteral("/tessera-job"),
            { QStringLiteral("chunk"), corpus, QStringLiteral("-o"), m_dir.filePath(QStringLiteral("chunks")),
                QStringLiteral("--context"), QStringLiteral("16"), QStringLiteral("--chunk-mib"), QStringLiteral("0.01"),
                QStringLiteral("--test-windows"), QStringLiteral("256") });
        QVERIFY2(chunked.exitCode == 0, qPrintable(chunked.output));
        const auto text = core::readFile(m_dir.filePath(QStringLiteral("chunks/manifest.json")));
        QVERIFY(text.ok());
        auto manifest = core::DatasetManifest::fromJson(*text);
        QVERIFY2(manifest.ok(), qPrintable(manifest.ok() ? QString() : manifest.error().toString()));
        m_manifest = *manifest;
        // (58,496 + 129,991 bytes - 1) / 16 windows, 256 of them held out, 616 to a chunk of 0.01 MiB.
        QCOMPARE(m_manifest.sampleCount(), (58'496 + 129'991 - 1) / 16 - 256);
        QCOMPARE(m_manifest.chunks.size(), 19);
        m_jobFile = m_dir.filePath(QStringLiteral("job.json"));
        Cluster::writeFile(m_jobFile, ChunkedJob.arg(m_manifest.sampleCount()));
    }

    void nodesTrainToTrainLocalsBitsHoldingOnlyTheChunksTheyRead()
    {
        const auto baseline = run(Bin + QStringLiteral("/tessera-node"),
            { QStringLiteral("--config"), QStringLiteral("/dev/null"), QStringLiteral("train-local"), m_jobFile,
                QStringLiteral("--out"), m_dir.filePath(QStringLiteral("local")) });
        QFile report(m_dir.filePath(QStringLiteral("local/report.json")));
        QVERIFY2(baseline.exitCode == 0 && report.open(QIODevice::ReadOnly), qPrintable(baseline.output));
        const QString localHash
            = QJsonDocument::fromJson(report.readAll()).object().value(QStringLiteral("finalWeightsHash")).toString();

        Cluster cluster;
        cluster.startBroker();
        cluster.startNode(1);
        cluster.startNode(2);
        const QString jobId = cluster.submit(m_jobFile);
        QVERIFY(!jobId.isEmpty());
        const auto end = cluster.waitForEnd(jobId);
        QCOMPARE(end.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(end.value(QStringLiteral("weightsHash")).toString(), localHash);

        // What the shards of both rounds read, by the order of docs/DETERMINISM.md.
        auto spec = core::JobSpec::fromJsonText(core::readFile(m_jobFile).value());
        QVERIFY(spec.ok());
        QSet<QString> read;
        for (std::int64_t round = 0; round < 2; ++round) {
            for (const auto& task : core::decomposeRound(QStringLiteral("j"), *spec, round, {})) {
                for (const auto& chunk : core::chunksOfTask(task, m_manifest))
                    read.insert(chunk.toHex());
            }
        }
        QSet<QString> all;
        for (const auto& chunk : m_manifest.chunks)
            all.insert(chunk.sha256.toHex());
        QVERIFY2(read.size() < all.size() / 2, qPrintable(QString::number(read.size())));
        QSet<QString> held;
        for (int i = 1; i <= 2; ++i) {
            const auto chunks = blobsUnder(cluster.path(QStringLiteral("node%1").arg(i))) & all;
            QVERIFY2(chunks.size() <= read.size() && (chunks - read).isEmpty(), qPrintable(QString::number(chunks.size())));
            held |= chunks;
        }
        QVERIFY(!held.isEmpty());
        qInfo("the nodes hold %lld of the corpus's %lld chunks; the shards read %lld", qint64(held.size()), qint64(all.size()),
            qint64(read.size()));
    }

    void manifestsThatLieOrNameOthersChunksAreRefused()
    {
        // Under CURVE, where the broker knows who asks (on plaintext loopback everyone is its operator).
        Cluster cluster;
        const QString keys = cluster.path(QStringLiteral("broker.key"));
        cluster.startBroker({ QStringLiteral("--keys"), keys });
        QVERIFY(QTest::qWaitFor([&] { return QFile::exists(keys); }, 60'000));
        const QString address = cluster.curveAddress(keys);
        auto as
            = [&](const QString& who, const QStringList& arguments) { return cluster.jobAs(who, arguments, 120'000, address); };
        QVERIFY(QTest::qWaitFor([&] { return as(QStringLiteral("owner"), { QStringLiteral("list") }).exitCode == 0; }, 60'000));
        // The owner's chunks and manifest are on the broker (the job is refused for its count).
        const QString wrongCount = m_dir.filePath(QStringLiteral("wrong-count.json"));
        Cluster::writeFile(wrongCount, ChunkedJob.arg(m_manifest.sampleCount() + 1));
        auto refused = as(QStringLiteral("owner"), { QStringLiteral("submit"), wrongCount });
        QVERIFY2(refused.exitCode != 0 && refused.output.contains(QStringLiteral("dataset.chunks.trainSamples")),
            qPrintable(refused.output));

        // A stranger names the owner's manifest by its hash: not theirs.
        const QString manifestHash
            = core::Digest::ofBytes(core::readFile(m_dir.filePath(QStringLiteral("chunks/manifest.json"))).value()).toHex();
        QString named = ChunkedJob.arg(m_manifest.sampleCount());
        named.replace(QStringLiteral(R"("manifestFile": "chunks/manifest.json", "testFile": "chunks/test.pt")"),
            QStringLiteral(R"("manifestSha256": "%1", "testFile": "chunks/test.pt")").arg(manifestHash));
        const QString byHash = m_dir.filePath(QStringLiteral("by-hash.json"));
        Cluster::writeFile(byHash, named);
        refused = as(QStringLiteral("stranger"), { QStringLiteral("submit"), byHash });
        QVERIFY2(refused.exitCode != 0 && refused.output.contains(manifestHash), qPrintable(refused.output));
        // Nor ask for a quote, whose answer would tell the shape and size of the owner's data.
        refused = as(QStringLiteral("stranger"), { QStringLiteral("submit"), byHash, QStringLiteral("--estimate") });
        QVERIFY2(refused.exitCode != 0 && refused.output.contains(manifestHash), qPrintable(refused.output));

        // A manifest of their own that lists the owner's chunks: uploaded (as a file of another
        // job), then named by its hash. The broker reads it and refuses the chunks.
        const QString evil = m_dir.filePath(QStringLiteral("evil.json"));
        Cluster::writeFile(evil, QString::fromUtf8(m_manifest.toJson()));
        const QString carrier = m_dir.filePath(QStringLiteral("carrier.json"));
        Cluster::writeFile(carrier, QStringLiteral(R"({"name": "carrier", "model": {"zoo": "mlp"},
            "dataset": {"tensors": {"trainFile": "evil.json", "trainSamples": 10}},
            "optimizer": {"kind": "sgd", "lr": 0.1}, "training": {"rounds": 1}, "budget": "1"})"));
        as(QStringLiteral("stranger"), { QStringLiteral("submit"), carrier });
        QString evilJob = named;
        evilJob.replace(manifestHash, core::Digest::ofBytes(core::readFile(evil).value()).toHex());
        Cluster::writeFile(byHash, evilJob);
        refused = as(QStringLiteral("stranger"), { QStringLiteral("submit"), byHash });
        QVERIFY2(
            refused.exitCode != 0 && refused.output.contains(QStringLiteral("which is not yours")), qPrintable(refused.output));

        // A chunk changed after its manifest was made: tessera-job says so and uploads nothing more.
        QFile chunk(m_dir.filePath(QStringLiteral("chunks/") + m_manifest.chunks[3].file));
        QVERIFY(chunk.open(QIODevice::ReadWrite));
        QVERIFY(chunk.seek(chunk.size() - 100));
        chunk.write("tampered");
        chunk.close();
        refused = as(QStringLiteral("owner"), { QStringLiteral("submit"), m_jobFile });
        QVERIFY2(refused.exitCode != 0 && refused.output.contains(QStringLiteral("build the manifest again")),
            qPrintable(refused.output));
        QCOMPARE(as(QStringLiteral("owner"), { QStringLiteral("ledger") }).exitCode, 0); // the books balance
    }
};

QTEST_GUILESS_MAIN(ChunkedDataTest)
#include "tst_chunkeddata.moc"
