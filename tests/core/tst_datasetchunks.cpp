#include <core/datasetchunks.h>
#include <core/decomposition.h>
#include <core/jobspec.h>
#include <core/shardtask.h>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSet>
#include <QTest>

using namespace tessera::core;

namespace {

DatasetManifest manifestOf(const QList<std::int64_t>& samples)
{
    DatasetManifest manifest;
    manifest.kind = DatasetManifest::Kind::Tokens;
    manifest.sampleShape = { 16 };
    manifest.classes = 256;
    for (qsizetype i = 0; i < samples.size(); ++i)
        manifest.chunks.append({ Digest::ofBytes(QByteArray::number(i)), samples[i], 1000 + i, QStringLiteral("c%1.pt").arg(i) });
    return manifest;
}

ShardTask taskOf(std::int64_t begin, std::int64_t end, std::int64_t steps, std::int64_t batch)
{
    ShardTask task;
    task.jobId = QStringLiteral("j");
    task.seed = 11;
    task.round = 3;
    task.shard = 1;
    task.sampleBegin = begin;
    task.sampleEnd = end;
    task.localSteps = steps;
    task.batchSize = batch;
    return task;
}

} // namespace

class DatasetChunksTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void aManifestRoundTrips()
    {
        const auto manifest = manifestOf({ 5, 7, 9 });
        const auto read = DatasetManifest::fromJson(manifest.toJson());
        QVERIFY2(read.ok(), qPrintable(read.ok() ? QString() : read.error().toString()));
        QCOMPARE(*read, manifest);
        QCOMPARE(read->sampleCount(), 21);
    }

    void aWrongManifestIsRefusedByField_data()
    {
        QTest::addColumn<QByteArray>("json");
        QTest::addColumn<QString>("field");
        const QJsonObject chunk { { QStringLiteral("sha256"), Digest::ofBytes("a").toHex() }, { QStringLiteral("samples"), 4 },
            { QStringLiteral("bytes"), 10 } };
        auto manifest = [](const QString& kind, const QJsonArray& shape, const QJsonArray& chunks) {
            return QJsonDocument(
                QJsonObject { { QStringLiteral("format"), QStringLiteral("tessera-dataset-chunks") },
                    { QStringLiteral("version"), 1 }, { QStringLiteral("kind"), kind }, { QStringLiteral("sampleShape"), shape },
                    { QStringLiteral("classes"), 256 }, { QStringLiteral("chunks"), chunks } })
                .toJson();
        };
        auto with = [&](const QString& key, const QJsonValue& value) {
            QJsonObject changed = chunk;
            changed.insert(key, value);
            return QJsonArray { changed };
        };
        const QString tokens = QStringLiteral("tokens"), samples = QStringLiteral("samples");
        QTest::newRow("not json") << QByteArray("{chunks") << QStringLiteral("manifest");
        QTest::newRow("format") << QJsonDocument(QJsonObject { { QStringLiteral("format"), QStringLiteral("zip") } }).toJson()
                                << QStringLiteral("manifest.format");
        QTest::newRow("kind") << manifest(QStringLiteral("pixels"), { 16 }, { chunk }) << QStringLiteral("manifest.kind");
        QTest::newRow("token windows of two dimensions")
            << manifest(tokens, { 4, 4 }, { chunk }) << QStringLiteral("manifest.sampleShape");
        QTest::newRow("no chunks") << manifest(tokens, { 16 }, {}) << QStringLiteral("manifest.chunks");
        QTest::newRow("an empty chunk") << manifest(tokens, { 16 }, with(QStringLiteral("samples"), 0))
                                        << QStringLiteral("manifest.chunks[0].samples");
        QTest::newRow("a chunk over 1 GiB") << manifest(samples, { 3, 4 }, with(QStringLiteral("bytes"), 2'000'000'000.0))
                                            << QStringLiteral("manifest.chunks[0].bytes");
        QTest::newRow("a hash that is none") << manifest(samples, { 3 }, with(QStringLiteral("sha256"), QStringLiteral("xyz")))
                                             << QStringLiteral("manifest.chunks[0].sha256");
        QTest::newRow("a chunk listed twice")
            << manifest(samples, { 3 }, QJsonArray { chunk, chunk }) << QStringLiteral("manifest.chunks[1].sha256");
        QTest::newRow("a path out of its folder")
            << manifest(samples, { 3 }, with(QStringLiteral("file"), QStringLiteral("../../home/me/.ssh/id_ed25519")))
            << QStringLiteral("manifest.chunks[0].file");
        QTest::newRow("an absolute path") << manifest(samples, { 3 }, with(QStringLiteral("file"), QStringLiteral("/etc/shadow")))
                                          << QStringLiteral("manifest.chunks[0].file");
        QTest::newRow("an unknown field") << manifest(samples, { 3 }, with(QStringLiteral("url"), QStringLiteral("http://x")))
                                          << QStringLiteral("manifest.chunks[0].url");
    }

    void aWrongManifestIsRefusedByField()
    {
        QFETCH(QByteArray, json);
        QFETCH(QString, field);
        const auto read = DatasetManifest::fromJson(json);
        QVERIFY(!read.ok());
        QCOMPARE(read.error().field, field);
    }

    void everyPassVisitsTheSliceOnce()
    {
        const QList<std::int64_t> samples { 40, 13, 27, 50, 8, 62 };
        // The slice starts and ends inside chunks; 3 passes and a bit.
        ChunkedOrder order(taskOf(30, 130, 21, 16), samples);
        QList<ChunkedOrder::Row> stream;
        for (int step = 0; step < 21; ++step)
            stream += order.rowsOfStep(step);
        QCOMPARE(stream.size(), 21 * 16);
        QSet<QPair<qsizetype, std::int64_t>> first;
        for (int pass = 0; pass < 3; ++pass) {
            QSet<QPair<qsizetype, std::int64_t>> seen;
            for (int i = pass * 100; i < (pass + 1) * 100; ++i) {
                const auto& row = stream[i];
                QVERIFY(row.index >= 0 && row.index < samples[row.chunk]);
                seen.insert({ row.chunk, row.index });
            }
            QCOMPARE(seen.size(), 100); // each sample of the slice once
            if (pass == 0)
                first = seen;
            QCOMPARE(seen, first); // the same slice, another order
        }
        QCOMPARE(order.chunksRead(21), order.chunksRead(7)); // 7 steps of 16 cover the slice of 100
    }

    void theFirstStepsReadTheFirstSegmentsOnly()
    {
        // A corpus of 200 chunks of 1000 samples, 4 shards: a shard's slice spans 50 chunks, but
        // 10 steps of 32 read 320 samples, from at most 2 of them.
        const QList<std::int64_t> samples(200, 1000);
        ShardTask task = taskOf(50'000, 100'000, 10, 32);
        ChunkedOrder order(task, samples);
        const auto read = order.chunksRead(10);
        QVERIFY2(read.size() >= 1 && read.size() <= 2, qPrintable(QString::number(read.size())));
        QSet<qsizetype> used;
        for (int step = 0; step < 10; ++step) {
            for (const auto& row : order.rowsOfStep(step))
                used.insert(row.chunk);
        }
        QCOMPARE(QSet<qsizetype>(read.begin(), read.end()), used);
        QCOMPARE(chunksOfTask(task, manifestOf(samples)).size(), read.size());
        // Another round reads other chunks.
        task.round += 1;
        QVERIFY(ChunkedOrder(task, samples).chunksRead(10) != read);
    }

    // The bound a broker checks a job against: no shard reads more chunks than it says.
    void noShardReadsMoreChunksThanTheBound()
    {
        const QList<std::int64_t> samples { 40, 3, 27, 50, 8, 62, 5, 5, 90, 1, 30 };
        const auto manifest = manifestOf(samples);
        for (const std::int64_t steps : { 1, 2, 5, 9, 40 }) {
            for (std::int64_t shard = 0; shard < 3; ++shard) {
                for (std::int64_t round = 0; round < 20; ++round) {
                    auto task = taskOf(shard * 107, (shard + 1) * 107, steps, 7);
                    task.shard = shard;
                    task.round = round;
                    const auto read = ChunkedOrder(task, samples).chunksRead(steps);
                    QVERIFY(read.size() <= mostChunksRead(manifest, steps * 7));
                }
            }
        }
        QCOMPARE(mostChunksRead(manifest, 1), 1);
        QCOMPARE(mostChunksRead(manifest, 2), 2); // one sample at the end of a chunk, one of the next
        QCOMPARE(mostChunksRead(manifest, 10'000), samples.size());
    }

    void aThirdPartyReadsTheSameRowsFromTheDocs()
    {
        const QList<std::int64_t> samples { 40, 13, 27, 50, 8, 62 };
        const auto task = taskOf(30, 130, 9, 16);
        ChunkedOrder order(task, samples);
        QJsonArray expected;
        for (int step = 0; step < 9; ++step) {
            QJsonArray batch;
            for (const auto& row : order.rowsOfStep(step))
                batch.append(QJsonArray { qint64(row.chunk), qint64(row.index) });
            expected.append(batch);
        }
        QJsonArray counts;
        for (const auto count : samples)
            counts.append(qint64(count));
        const QJsonObject request { { QStringLiteral("seed"), 11 }, { QStringLiteral("round"), 3 },
            { QStringLiteral("shard"), 1 }, { QStringLiteral("sampleBegin"), 30 }, { QStringLiteral("sampleEnd"), 130 },
            { QStringLiteral("batchSize"), 16 }, { QStringLiteral("steps"), 9 }, { QStringLiteral("chunkSamples"), counts } };
        QProcess python;
        python.start(
            QStringLiteral("/usr/bin/python3"), { QStringLiteral(TESSERA_SOURCE_DIR "/tests/core/python/chunked_order.py") });
        QVERIFY(python.waitForStarted());
        python.write(QJsonDocument(request).toJson());
        python.closeWriteChannel();
        QVERIFY(python.waitForFinished(120'000));
        QVERIFY2(python.exitCode() == 0, python.readAllStandardError().constData());
        QCOMPARE(QJsonDocument::fromJson(python.readAllStandardOutput()).array(), expected);
    }

    void aTaskCarriesItsChunks()
    {
        const QString text
            = QStringLiteral(R"({"name": "c", "model": {"zoo": "gpt", "layers": 1, "heads": 1, "width": 8, "context": 16},
            "dataset": {"chunks": {"manifestSha256": "%1", "testSha256": "%2", "trainSamples": 3000}},
            "optimizer": {"kind": "adamw", "lr": 0.001},
            "training": {"rounds": 2, "shardsPerRound": 3, "localSteps": 4, "batchSize": 8, "seed": 1}, "budget": "1"})")
                  .arg(Digest::ofBytes("m").toHex(), Digest::ofBytes("t").toHex());
        auto spec = JobSpec::fromJsonText(text.toUtf8());
        QVERIFY2(spec.ok(), qPrintable(spec.ok() ? QString() : spec.error().toString()));
        const auto manifest = manifestOf(QList<std::int64_t>(30, 100));
        auto task = decomposeShard(QStringLiteral("j"), *spec, 1, 2, {});
        task.dataChunks = chunksOfTask(task, manifest);
        QVERIFY(!task.dataChunks.isEmpty() && task.dataChunks.size() <= 2);
        const auto read = ShardTask::fromJson(task.toJson());
        QVERIFY2(read.ok(), qPrintable(read.ok() ? QString() : read.error().toString()));
        QCOMPARE(*read, task);
        // What a node fetches: the manifest, the test file and the task's chunks, nothing else.
        QCOMPARE(task.inputBlobs(), (QList<Digest> { Digest::ofBytes("m"), Digest::ofBytes("t") } + task.dataChunks));
        // Chunks only with a chunked dataset.
        auto json = task.toJson();
        json.insert(QStringLiteral("dataset"), QJsonObject { { QStringLiteral("builtin"), QStringLiteral("fortunes") } });
        QCOMPARE(ShardTask::fromJson(json).error().field, QStringLiteral("dataChunks"));
    }

    void aChunkedJobNeedsItsTestFile()
    {
        auto spec = JobSpec::fromJsonText(R"({"name": "c", "model": {"zoo": "mlp"},
            "dataset": {"chunks": {"manifestFile": "m.json", "trainSamples": 3000}},
            "optimizer": {"kind": "sgd", "lr": 0.1}, "training": {"rounds": 1}, "budget": "1"})");
        QVERIFY(!spec.ok());
        QCOMPARE(spec.error().field, QStringLiteral("dataset.chunks.testFile"));
    }
};

QTEST_GUILESS_MAIN(DatasetChunksTest)
#include "tst_datasetchunks.moc"
