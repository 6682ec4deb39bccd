#include <core/deviceinfo.h>
#include <core/nodeinfo.h>
#include <core/shardresult.h>
#include <core/shardtask.h>

#include <QJsonArray>
#include <QTest>

using namespace tessera::core;

namespace {

ShardTask sampleTask()
{
    ShardTask task;
    task.jobId = QStringLiteral("job-1");
    task.round = 3;
    task.shard = 2;
    task.sampleBegin = 40000;
    task.sampleEnd = 60000;
    task.localSteps = 100;
    task.batchSize = 64;
    task.seed = 42;
    task.threads = 2;
    task.checkpointInterval = 10;
    task.model.zoo = QStringLiteral("mlp");
    task.model.hidden = { 256, 128 };
    task.dataset.builtin = QStringLiteral("fashion-mnist");
    task.optimizer.momentum = 0.9;
    task.startWeights = Digest::ofBytes("w3");
    return task;
}

ShardResult sampleResult()
{
    ShardResult result;
    result.jobId = QStringLiteral("job-1");
    result.round = 3;
    result.shard = 2;
    for (int i = 0; i <= 10; ++i)
        result.checkpointHashes.append(Digest::ofBytes(QByteArray::number(i)));
    result.finalHash = result.checkpointHashes.last();
    result.weightsSha256 = Digest::ofBytes("blob");
    result.losses = { 2.31, 1.2, 0.75 };
    result.samplesProcessed = 6400;
    result.wallTimeMs = 1234;
    result.runtimeProfile = QStringLiteral("libtorch=1.13.0;blas=openblas-openmp;threads=2;cpu=avx2;device=cpu");
    return result;
}

DeviceInfo sampleGpu()
{
    DeviceInfo device;
    device.kind = DeviceInfo::Kind::Cuda;
    device.index = 1;
    device.name = QStringLiteral("NVIDIA GeForce RTX 3060");
    device.vendor = QStringLiteral("NVIDIA");
    device.memoryBytes = 12LL << 30;
    device.cores = 28;
    device.computeCapability = QStringLiteral("8.6");
    device.pciBusId = QStringLiteral("0000:01:00.0");
    device.driverVersion = QStringLiteral("535.104");
    device.temperatureCelsius = 61;
    device.powerWatts = 170;
    device.usable = false;
    device.unusableReason = QStringLiteral("this LibTorch build has no CUDA");
    return device;
}

} // namespace

class DomainTypesTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void shardTaskRoundTrips()
    {
        const auto task = sampleTask();
        QVERIFY(task.validate().ok());
        const auto again = ShardTask::fromJson(task.toJson());
        QVERIFY2(again.ok(), qPrintable(again.ok() ? QString() : again.error().toString()));
        QCOMPARE(*again, task);
        QCOMPARE(task.checkpointCount(), 11);
        QVERIFY(!task.toJson().contains(QStringLiteral("optimizerState"))); // reset, as tasks were before
        auto carrying = task;
        carrying.carriesOptimizer = true;
        QCOMPARE(carrying.toJson().value(QStringLiteral("optimizerState")).toString(), QStringLiteral("averaged"));
        QCOMPARE(*ShardTask::fromJson(carrying.toJson()), carrying);
        auto json = task.toJson();
        json.insert(QStringLiteral("optimizerState"), QStringLiteral("kept"));
        QCOMPARE(ShardTask::fromJson(json).error().field, QStringLiteral("optimizerState"));
        auto portable = task;
        portable.portable = true;
        QCOMPARE(portable.toJson().value(QStringLiteral("determinism")).toString(), QStringLiteral("portable"));
        QCOMPARE(*ShardTask::fromJson(portable.toJson()), portable);
        QVERIFY(!task.toJson().contains(QStringLiteral("determinism")));
    }

    // A node reproduces a result of its own profile family (any thread count), and every
    // portable result, but not another CPU's fast one.
    void whoReproducesWhichResults()
    {
        const QString avx2 = QStringLiteral("libtorch=1.13.0;blas=openblas-openmp;threads=1;cpu=avx2;device=cpu");
        const QString avx2Four = QStringLiteral("libtorch=1.13.0;blas=openblas-openmp;threads=4;cpu=avx2;device=cpu");
        const QString plain = QStringLiteral("libtorch=1.13.0;blas=openblas-openmp;threads=1;cpu=default;device=cpu");
        QVERIFY(reproduces(avx2, avx2Four));
        QVERIFY(!reproduces(plain, avx2));
        QVERIFY(reproduces(plain, PortableProfile));
        QVERIFY(reproduces(avx2, PortableProfile));
        // No node registers as the portable profile (it would pass for every CPU's).
        NodeInfo node;
        node.nodeId = QStringLiteral("n");
        node.softwareVersion = QStringLiteral("1");
        node.maxThreads = 1;
        node.runtimeProfile = avx2;
        QVERIFY(NodeInfo::fromJson(node.toJson()));
        for (const auto& claimed : { PortableProfile, PortableProfile + QStringLiteral(";threads=2") }) {
            node.runtimeProfile = claimed;
            const auto read = NodeInfo::fromJson(node.toJson());
            QVERIFY(!read);
            QCOMPARE(read.error().field, QStringLiteral("runtimeProfile"));
        }
    }

    void shardTaskValidation()
    {
        auto task = sampleTask();
        task.sampleEnd = task.sampleBegin;
        QCOMPARE(task.validate().error().field, QStringLiteral("sampleEnd"));
        task = sampleTask();
        task.batchSize = 30000;
        QCOMPARE(task.validate().error().field, QStringLiteral("batchSize"));
        auto json = sampleTask().toJson();
        json.insert(QStringLiteral("startWeights"), QStringLiteral("zz"));
        QCOMPARE(ShardTask::fromJson(json).error().field, QStringLiteral("startWeights"));
        json = sampleTask().toJson();
        json.remove(QStringLiteral("model"));
        QCOMPARE(ShardTask::fromJson(json).error().field, QStringLiteral("model"));
    }

    void checkpointCountCoversTheLastPartialInterval()
    {
        auto task = sampleTask();
        task.localSteps = 25;
        task.checkpointInterval = 10;
        QCOMPARE(task.checkpointCount(), 4); // steps 0, 10, 20, 25
    }

    void shardResultRoundTripsAndCommits()
    {
        const auto result = sampleResult();
        const auto again = ShardResult::fromJson(result.toJson());
        QVERIFY2(again.ok(), qPrintable(again.ok() ? QString() : again.error().toString()));
        QCOMPARE(*again, result);

        const auto commitment = result.commitment();
        QCOMPARE(commitment.finalHash, result.finalHash);
        auto other = result;
        other.checkpointHashes[4] = Digest::ofBytes("forged");
        QVERIFY(other.commitment().chainRoot != commitment.chainRoot);
    }

    void shardResultRejectsInconsistentChains()
    {
        // The chain starts at the round's weights; its later entries hash whole training states, so its
        // last entry is not the final weights' hash, but it cannot be empty.
        auto json = sampleResult().toJson();
        json.insert(QStringLiteral("checkpointHashes"), QJsonArray {});
        const auto result = ShardResult::fromJson(json);
        QVERIFY(!result.ok());
        QCOMPARE(result.error().field, QStringLiteral("checkpointHashes"));

        json = sampleResult().toJson();
        auto chain = json.value(QStringLiteral("checkpointHashes")).toArray();
        chain[3] = 12;
        json.insert(QStringLiteral("checkpointHashes"), chain);
        QCOMPARE(ShardResult::fromJson(json).error().field, QStringLiteral("checkpointHashes[3]"));
    }

    void failedResultsSayWhy()
    {
        ShardResult failed;
        failed.jobId = QStringLiteral("job-1");
        failed.outcome = ShardResult::Outcome::Failed;
        failed.failure = QStringLiteral("loss became NaN at step 17");
        const auto again = ShardResult::fromJson(failed.toJson());
        QVERIFY(again.ok());
        QCOMPARE(*again, failed);

        auto json = failed.toJson();
        json.insert(QStringLiteral("failure"), QString());
        QCOMPARE(ShardResult::fromJson(json).error().field, QStringLiteral("failure"));
    }

    void deviceInfoRoundTrips()
    {
        const auto gpu = sampleGpu();
        const auto again = DeviceInfo::fromJson(gpu.toJson());
        QVERIFY2(again.ok(), qPrintable(again.ok() ? QString() : again.error().toString()));
        QCOMPARE(*again, gpu);

        auto json = gpu.toJson();
        json.remove(QStringLiteral("unusableReason"));
        QCOMPARE(DeviceInfo::fromJson(json).error().field, QStringLiteral("unusableReason"));
        json = gpu.toJson();
        json.insert(QStringLiteral("kind"), QStringLiteral("tpu"));
        QCOMPARE(DeviceInfo::fromJson(json).error().field, QStringLiteral("kind"));
    }

    void nodeInfoRoundTrips()
    {
        NodeInfo node;
        node.nodeId = QStringLiteral("a1b2");
        node.name = QStringLiteral("garage box");
        node.softwareVersion = QStringLiteral("0.1.0");
        node.runtimeProfile = QStringLiteral("libtorch=1.13.0;blas=openblas-openmp;threads=2;cpu=avx2;device=cpu");
        DeviceInfo cpu;
        cpu.name = QStringLiteral("AMD Ryzen 5");
        cpu.cores = 12;
        cpu.features = { QStringLiteral("avx2"), QStringLiteral("fma") };
        cpu.usable = true;
        node.devices = { cpu, sampleGpu() };
        node.benchmarkSamplesPerSecond = 5321.5;
        node.maxThreads = 8;
        node.capabilities = { QStringLiteral("int8"), QStringLiteral("a-later-one") };
        const auto again = NodeInfo::fromJson(node.toJson());
        QVERIFY2(again.ok(), qPrintable(again.ok() ? QString() : again.error().toString()));
        QCOMPARE(*again, node);

        auto json = node.toJson();
        auto devices = json.value(QStringLiteral("devices")).toArray();
        auto second = devices[1].toObject();
        second.remove(QStringLiteral("name"));
        devices[1] = second;
        json.insert(QStringLiteral("devices"), devices);
        QCOMPARE(NodeInfo::fromJson(json).error().field, QStringLiteral("devices[1].name"));

        // A newer node's field is ignored, not refused, and not kept.
        auto newer = node.toJson();
        newer.insert(QStringLiteral("aLaterField"), QStringLiteral("x"));
        const auto read = NodeInfo::fromJson(newer);
        QVERIFY(read.ok());
        QCOMPARE(*read, node);
        QVERIFY(!read->toJson().contains(QStringLiteral("aLaterField")));
    }
};

QTEST_GUILESS_MAIN(DomainTypesTest)
#include "tst_domaintypes.moc"
