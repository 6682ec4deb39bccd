// The compute thread: queue, pause and resume (also across a restart), cancel, finish-then-pause,
// thread limit, CPU duty cycle, and failures that leave it serving. A test that acts on a running
// shard first holds it at a known step (ComputeThread::holdAt), so no case depends on how fast the
// machine trains. Every case runs twice (CMakeLists.txt): training on the thread itself, and with
// TESSERA_TEST_SANDBOX=1 in sandboxed tessera-compute workers (Compute/Sandbox), where each must
// behave the same.

#include <compute/engine/pipelinerun.h>
#include <compute/engine/shardrun.h>
#include <compute/engine/weights.h>
#include <compute/pickle/tensorwriter.h>
#include <compute/supervisor/computethread.h>
#include <core/datasetchunks.h>
#include <core/decomposition.h>
#include <core/memoryestimate.h>
#include <core/readfile.h>
#include <core/smalljobs.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <sys/time.h>

#include <ctime>
#include <thread>

using namespace tessera;
using compute::ComputeThread;
using compute::ShardOutput;

namespace {

core::JobSpec job(std::int64_t steps)
{
    auto spec = core::smallMlpJob(QStringLiteral("thread test"), { 128 });
    spec.model.dropout = 0.2;
    spec.training.shardsPerRound = 4;
    spec.training.localSteps = steps;
    spec.training.batchSize = 64;
    spec.training.seed = 21;
    spec.training.checkpointInterval = 10;
    return spec;
}

struct Fixture {
    compute::Weights start;
    QList<core::ShardTask> tasks;
};

Fixture fixture(std::int64_t steps)
{
    const auto spec = job(steps);
    auto start = compute::initialWeights(spec, {});
    if (!start)
        qFatal("%s", qPrintable(start.error().toString()));
    return { *start, core::decomposeRound(QStringLiteral("job-a"), spec, 0, start->canonicalHash) };
}

ShardOutput outputOf(const QSignalSpy& spy, int index)
{
    return spy.at(index).at(0).value<ShardOutput>();
}

bool sandboxed()
{
    return qEnvironmentVariableIntValue("TESSERA_TEST_SANDBOX") == 1;
}

// The workers' scratch folders, looked at by the tests that count workers.
const QString& scratchRoot()
{
    static QTemporaryDir root;
    static const QString path = root.path();
    return path;
}

QStringList workerFolders()
{
    return QDir(scratchRoot()).entryList({ QStringLiteral("tessera-worker-*") }, QDir::Dirs);
}

void configure(ComputeThread& thread)
{
    if (!sandboxed())
        return;
    ComputeThread::Sandbox sandbox;
    sandbox.enabled = true;
    sandbox.program = QStringLiteral(TESSERA_COMPUTE_WORKER);
    sandbox.scratchRoot = scratchRoot();
    // The thread's rules, not the worker's priority: at its default (19, the lowest) the worker of
    // a test on a busy machine would wait for every other process (shared/tools/under-load).
    sandbox.nice = 0;
    thread.setSandbox(sandbox);
}

// A pipeline shard of 2 stages of a small gpt, and the file of its round's weights (as a node's
// cache keeps it).
struct StageFixture {
    core::JobSpec spec;
    compute::Weights start;
    core::ShardTask shard;
    std::unique_ptr<QTemporaryDir> dir = std::make_unique<QTemporaryDir>();
    QString file;
    core::ShardTask stage(std::int64_t s) const { return core::stageTaskOf(shard, s, 2); }
};

StageFixture stageFixture()
{
    StageFixture f;
    f.spec = core::smallGptJob(QStringLiteral("stages"), 4, 2, 256, 16);
    f.spec.model.tied = false;
    f.spec.optimizer = core::OptimizerSpec {};
    f.spec.optimizer.kind = core::OptimizerSpec::Kind::AdamW;
    f.spec.training.determinism = core::TrainingSpec::Determinism::Portable;
    f.spec.training.shardsPerRound = 1;
    f.spec.training.localSteps = 2;
    f.spec.training.checkpointInterval = 1;
    f.spec.training.batchSize = 2;
    f.spec.training.pipeline = { 2, 2 };
    if (!f.spec.validate())
        qFatal("the stage fixture's spec is invalid");
    auto start = compute::initialWeights(f.spec, {});
    if (!start)
        qFatal("%s", qPrintable(start.error().toString()));
    f.start = *start;
    f.shard = core::decomposeShard(QStringLiteral("job-s"), f.spec, 0, 0, f.start.canonicalHash);
    f.file = f.dir->filePath(QStringLiteral("round.pt"));
    QFile out(f.file);
    if (!out.open(QIODevice::WriteOnly) || out.write(f.start.bytes) != f.start.bytes.size())
        qFatal("cannot write the round's weights");
    return f;
}

// Stage s of the fixture run in this process over `links`, to its end; nullopt when it failed (the
// links are closed then, so that its partner stops too).
// link: instead of the stage's own link of `links` (one that wraps it).
std::optional<compute::ShardOutput> runStageHere(
    const StageFixture& f, compute::LocalStageLinks& links, std::int64_t s, compute::StageLink* link = nullptr)
{
    auto run = compute::ShardRun::start(f.stage(s), f.start.bytes, {});
    if (!run) {
        links.close(run.error().message);
        return std::nullopt;
    }
    (*run)->setStageLink(link ? link : &links.of(s));
    while (!(*run)->finished()) {
        if (!(*run)->step()) {
            links.close(QStringLiteral("stage %1 failed").arg(s));
            return std::nullopt;
        }
    }
    return (*run)->finish();
}

std::shared_ptr<compute::StageLink> borrowed(compute::StageLink& link)
{
    return std::shared_ptr<compute::StageLink>(&link, [](compute::StageLink*) {});
}

bool waitForState(ComputeThread& thread, ComputeThread::State state)
{
    return QTest::qWaitFor([&] { return thread.state() == state; }, 120'000);
}

// Waits until the shard that holdAt() named is held at its step: it is running, and stays so until
// the test acts.
bool waitUntilHeld(const QSignalSpy& held)
{
    return QTest::qWaitFor([&] { return held.count() == 1; }, 120'000);
}

} // namespace

class ComputeThreadTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void runsQueuedShardsInOrder()
    {
        const auto f = fixture(20);
        ComputeThread thread({}, compute::inThreadCompute());
        configure(thread);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        QSignalSpy progress(&thread, &ComputeThread::progress);
        thread.submit(f.tasks[0], f.start.bytes);
        thread.submit(f.tasks[1], f.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 2; }, 120'000));
        QCOMPARE(outputOf(finished, 0).result.shard, 0);
        QCOMPARE(outputOf(finished, 1).result.shard, 1);
        QCOMPARE(outputOf(finished, 0).result.finalHash, compute::runShard(f.tasks[0], f.start.bytes, {}).result.finalHash);
        QVERIFY(progress.count() >= 2); // at least the last step of each shard
        const auto last = progress.last().at(0).value<compute::ShardProgress>();
        QCOMPARE(last.step, 20);
        QCOMPARE(last.steps, 20);
        QVERIFY(last.samplesPerSecond > 0);
        QVERIFY(waitForState(thread, ComputeThread::State::Idle));
    }

    void pausedShardResumesToTheSameBits()
    {
        const auto f = fixture(40);
        const auto straight = compute::runShard(f.tasks[2], f.start.bytes, {});
        ComputeThread thread({}, compute::inThreadCompute());
        configure(thread);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        QSignalSpy paused(&thread, &ComputeThread::shardPaused);
        QSignalSpy held(&thread, &ComputeThread::held);
        thread.holdAt(QStringLiteral("job-a"), 2, 15);
        thread.submit(f.tasks[2], f.start.bytes);
        QVERIFY(waitUntilHeld(held));
        thread.pause();
        QVERIFY(QTest::qWaitFor([&] { return paused.count() == 1; }, 120'000));
        QVERIFY(waitForState(thread, ComputeThread::State::Paused));
        QCOMPARE(finished.count(), 0);
        QCOMPARE(thread.queuedCount(), 1); // the suspended shard waits at the front
        thread.resume();
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 120'000));
        QCOMPARE(outputOf(finished, 0).result.finalHash, straight.result.finalHash);
        QCOMPARE(outputOf(finished, 0).result.checkpointHashes, straight.result.checkpointHashes);
    }

    // A dispute's state is re-created between two steps of the running shard (before it
    // finishes), changes none of its bits, and is served while paused too.
    void aDisputesStateIsRecreatedBetweenStepsAndWhilePaused()
    {
        const auto f = fixture(40); // checkpoints every 10 steps: 1..3 interior, 2 kept
        const auto trained = compute::runShard(f.tasks[0], f.start.bytes, {});
        const auto other = compute::runShard(f.tasks[1], f.start.bytes, {});
        QTemporaryDir dir;
        const auto write = [&](const QString& name, const QByteArray& bytes) {
            QFile file(dir.filePath(name));
            return file.open(QIODevice::WriteOnly) && file.write(bytes) == bytes.size() ? file.fileName() : QString();
        };
        const QString start = write(QStringLiteral("start.pt"), f.start.bytes);
        const QString kept = write(QStringLiteral("kept.pt"), trained.keptState);
        QVERIFY(!start.isEmpty() && !kept.isEmpty());

        ComputeThread thread({}, compute::inThreadCompute());

        configure(thread);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        QSignalSpy recreated(&thread, &ComputeThread::stateRecreated);
        QSignalSpy held(&thread, &ComputeThread::held);
        QList<QString> order;
        connect(&thread, &ComputeThread::shardFinished, this, [&] { order.append(QStringLiteral("finished")); });
        connect(&thread, &ComputeThread::stateRecreated, this, [&] { order.append(QStringLiteral("recreated")); });
        thread.holdAt(QStringLiteral("job-a"), 1, 15);
        thread.submit(f.tasks[1], f.start.bytes);
        QVERIFY(waitUntilHeld(held));
        thread.recreateState({ QStringLiteral("dispute-1"), f.tasks[0], { core::DisputeQuestion::Want::State, 3 }, start, kept });
        thread.releaseHold();
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1 && recreated.count() == 1; }, 120'000));
        QCOMPARE(order, QList<QString>({ QStringLiteral("recreated"), QStringLiteral("finished") }));
        QCOMPARE(outputOf(finished, 0).result.finalHash, other.result.finalHash);
        QCOMPARE(recreated.at(0).at(0).toString(), QStringLiteral("dispute-1"));
        QCOMPARE(recreated.at(0).at(2).toString(), QString());
        const auto& chain = trained.result.checkpointHashes;
        const auto next
            = compute::replayShard(f.tasks[0], 3, recreated.at(0).at(1).toByteArray(), chain[3], 4, f.start.bytes, {});
        QVERIFY(next.ok());
        QCOMPARE(next->checkpoints.first(), chain[4]);

        thread.pause();
        QVERIFY(waitForState(thread, ComputeThread::State::Paused));
        thread.recreateState(
            { QStringLiteral("dispute-2"), f.tasks[0], { core::DisputeQuestion::Want::State, 1 }, start, QString() });
        thread.recreateState({ QStringLiteral("dispute-3"), f.tasks[0], { core::DisputeQuestion::Want::State, 1 },
            dir.filePath(QStringLiteral("missing.pt")), QString() });
        QVERIFY(QTest::qWaitFor([&] { return recreated.count() == 3; }, 120'000));
        QCOMPARE(recreated.at(1).at(2).toString(), QString());
        QVERIFY(compute::replayShard(f.tasks[0], 1, recreated.at(1).at(1).toByteArray(), chain[1], 2, {}, {}).ok());
        QVERIFY(recreated.at(2).at(2).toString().contains(QStringLiteral("cannot read")));
        QCOMPARE(thread.state(), ComputeThread::State::Paused);
    }

    void pausedShardSurvivesARestart()
    {
        const auto f = fixture(40);
        const auto straight = compute::runShard(f.tasks[3], f.start.bytes, {});
        QByteArray saved;
        {
            ComputeThread first({}, compute::inThreadCompute());
            configure(first);
            QSignalSpy paused(&first, &ComputeThread::shardPaused);
            QSignalSpy held(&first, &ComputeThread::held);
            first.holdAt(QStringLiteral("job-a"), 3, 25);
            first.submit(f.tasks[3], f.start.bytes);
            QVERIFY(waitUntilHeld(held));
            first.pause();
            QVERIFY(QTest::qWaitFor([&] { return paused.count() == 1; }, 120'000));
            saved = paused.at(0).at(1).toByteArray();
        }
        ComputeThread second({}, compute::inThreadCompute());
        configure(second);
        QSignalSpy finished(&second, &ComputeThread::shardFinished);
        second.submitSuspended(f.tasks[3], saved, f.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 120'000));
        QCOMPARE(outputOf(finished, 0).result.finalHash, straight.result.finalHash);
    }

    void stoppingMidShardHandsOverItsState()
    {
        const auto f = fixture(40);
        QList<QByteArray> states;
        {
            ComputeThread thread({}, compute::inThreadCompute());
            configure(thread);
            QSignalSpy held(&thread, &ComputeThread::held);
            connect(
                &thread, &ComputeThread::shardPaused, this,
                [&](const core::ShardTask&, const QByteArray& state) { states.append(state); }, Qt::DirectConnection);
            thread.holdAt(QStringLiteral("job-a"), 0, 5);
            thread.submit(f.tasks[0], f.start.bytes);
            QVERIFY(waitUntilHeld(held));
        } // the destructor stops the held shard at its step boundary
        QCOMPARE(states.size(), 1);
        QVERIFY(!states.first().isEmpty());
    }

    void cancelDropsTheJobAndGoesOn()
    {
        const auto f = fixture(40);
        auto other = fixture(10).tasks[0];
        other.jobId = QStringLiteral("job-b");
        ComputeThread thread({}, compute::inThreadCompute());
        configure(thread);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        QSignalSpy cancelled(&thread, &ComputeThread::shardCancelled);
        QSignalSpy held(&thread, &ComputeThread::held);
        thread.holdAt(QStringLiteral("job-a"), 0, 5);
        thread.submit(f.tasks[0], f.start.bytes);
        thread.submit(f.tasks[1], f.start.bytes);
        thread.submit(other, fixture(10).start.bytes);
        QVERIFY(waitUntilHeld(held));
        thread.cancelJob(QStringLiteral("job-a"));
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 120'000));
        QCOMPARE(cancelled.count(), 1);
        QCOMPARE(outputOf(finished, 0).result.jobId, QStringLiteral("job-b"));
    }

    void finishCurrentThenPause()
    {
        const auto f = fixture(40);
        ComputeThread thread({}, compute::inThreadCompute());
        configure(thread);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        QSignalSpy held(&thread, &ComputeThread::held);
        thread.holdAt(QStringLiteral("job-a"), 0, 5);
        thread.submit(f.tasks[0], f.start.bytes);
        thread.submit(f.tasks[1], f.start.bytes);
        QVERIFY(waitUntilHeld(held));
        thread.finishCurrentThenPause();
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 120'000));
        QVERIFY(waitForState(thread, ComputeThread::State::Paused));
        QCOMPARE(outputOf(finished, 0).result.shard, 0);
        QCOMPARE(outputOf(finished, 0).result.outcome, core::ShardResult::Outcome::Completed);
        QCOMPARE(thread.queuedCount(), 1);
        thread.resume();
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 2; }, 120'000));
        QCOMPARE(outputOf(finished, 1).result.shard, 1);
    }

    void aHoldEndsWhenReleased()
    {
        const auto f = fixture(20);
        ComputeThread thread({}, compute::inThreadCompute());
        configure(thread);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        QSignalSpy held(&thread, &ComputeThread::held);
        thread.holdAt(QStringLiteral("job-a"), 1, 0);
        thread.submit(f.tasks[1], f.start.bytes);
        QVERIFY(waitUntilHeld(held));
        QCOMPARE(held.at(0).at(1).toLongLong(), 0);
        QCOMPARE(thread.state(), ComputeThread::State::Working);
        QCOMPARE(finished.count(), 0);
        thread.releaseHold();
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 120'000));
        QCOMPARE(outputOf(finished, 0).result.outcome, core::ShardResult::Outcome::Completed);
    }

    void failuresLeaveTheThreadServing()
    {
        const auto f = fixture(10);
        auto missingData = f.tasks[0];
        compute::ComputeEnvironment nowhere;
        nowhere.fashionMnistDirectory = QStringLiteral("/nonexistent");
        auto nan = f.tasks[1];
        nan.optimizer.lr = 100.0;
        nan.optimizer.momentum = 0.99;
        auto tooManyThreads = f.tasks[2];
        tooManyThreads.threads = 2;

        ComputeThread broken(nowhere, compute::inThreadCompute());

        configure(broken);
        QSignalSpy brokenFinished(&broken, &ComputeThread::shardFinished);
        broken.submit(missingData, f.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return brokenFinished.count() == 1; }, 120'000));
        QVERIFY(outputOf(brokenFinished, 0).result.failure.contains(QStringLiteral("dataset-fashion-mnist")));

        ComputeThread thread({}, compute::inThreadCompute());

        configure(thread);
        thread.setMaxThreads(1);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        thread.submit(nan, f.start.bytes);
        thread.submit(tooManyThreads, f.start.bytes);
        thread.submit(f.tasks[3], QByteArray("not weights"));
        thread.submit(f.tasks[3], f.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 4; }, 120'000));
        QVERIFY(outputOf(finished, 0).result.failure.contains(QStringLiteral("NaN")));
        QVERIFY(outputOf(finished, 1).result.failure.contains(QStringLiteral("Compute/MaxThreads")));
        QCOMPARE(outputOf(finished, 1).result.outcome, core::ShardResult::Outcome::Returned); // the node's own setting
        QCOMPARE(outputOf(finished, 2).result.outcome, core::ShardResult::Outcome::Failed);
        QCOMPARE(outputOf(finished, 3).result.outcome, core::ShardResult::Outcome::Completed);
    }

    // Compute/MaxMemoryMiB: a shard estimated larger (core::estimateShardMemory: here the 55 MB of
    // Fashion-MNIST and the model) is given back before it trains, saying why; one that fits trains.
    // A chunked dataset's tokens take about 24 bytes of memory for each stored byte once loaded
    // (uint8 tokens widened to int64 inputs and targets): a 1 MiB chunk counts as 24 MiB of data.
    void aChunkOfTokensCountsAsItIsHeldNotAsItIsStored()
    {
        QTemporaryDir dir;
        QHash<core::Digest, QString> files;
        auto store = [&](const QString& name, const QByteArray& bytes) {
            QFile file(dir.filePath(name));
            if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size())
                qFatal("cannot write %s", qPrintable(name));
            const auto digest = core::Digest::ofBytes(bytes);
            files.insert(digest, file.fileName());
            return digest;
        };
        auto tokens = [](std::int64_t rows) {
            QByteArray bytes(rows * 129, Qt::Uninitialized);
            for (qsizetype i = 0; i < bytes.size(); ++i)
                bytes[i] = char('a' + i % 26);
            return compute::pickle::writeTensorFile(
                { { QStringLiteral("tokens"), compute::pickle::DType::UInt8, { rows, 129 }, bytes } });
        };
        core::DatasetManifest manifest;
        manifest.kind = core::DatasetManifest::Kind::Tokens;
        manifest.sampleShape = { 128 };
        manifest.classes = 256;
        const QByteArray chunk = tokens(8200); // 1.01 MiB
        manifest.chunks.append({ store(QStringLiteral("chunk.pt"), chunk), 8200, chunk.size(), {} });
        auto spec = core::smallMlpJob(QStringLiteral("chunked"));
        spec.model = core::ModelSpec {};
        spec.model.zoo = QStringLiteral("gpt");
        spec.model.layers = 1;
        spec.model.heads = 1;
        spec.model.width = 8;
        spec.model.context = 128;
        spec.dataset = core::DatasetSpec {};
        spec.dataset.source = core::DatasetSpec::Source::Chunks;
        spec.dataset.manifestSha256 = store(QStringLiteral("manifest.json"), manifest.toJson());
        spec.dataset.testSha256 = store(QStringLiteral("test.pt"), tokens(10));
        spec.dataset.trainSamples = 8200;
        spec.training.shardsPerRound = 1;
        spec.training.localSteps = 2;
        spec.training.batchSize = 4;
        spec.training.checkpointInterval = 1;
        compute::ComputeEnvironment environment;
        environment.blobPath = [files](const core::Digest& digest) -> std::optional<QString> {
            return files.contains(digest) ? std::optional<QString>(files.value(digest)) : std::nullopt;
        };
        const auto start = compute::initialWeights(spec, environment);
        QVERIFY2(start.ok(), qPrintable(start.ok() ? QString() : start.error().toString()));
        auto task = core::decomposeShard(QStringLiteral("job-c"), spec, 0, 0, start->canonicalHash);
        task.dataChunks = core::chunksOfTask(task, manifest);
        QCOMPARE(task.dataChunks.size(), 1);

        ComputeThread thread(environment, compute::inThreadCompute());
        configure(thread);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        thread.setMaxMemoryMiB(20); // the file (1 MiB) fits; what it becomes does not
        thread.submit(task, start->bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 120'000));
        const auto refused = outputOf(finished, 0).result;
        QCOMPARE(refused.outcome, core::ShardResult::Outcome::Returned);
        QVERIFY2(refused.failure.contains(QStringLiteral("data 24")), qPrintable(refused.failure));
        thread.setMaxMemoryMiB(256);
        thread.submit(task, start->bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 2; }, 120'000));
        QVERIFY2(outputOf(finished, 1).result.outcome == core::ShardResult::Outcome::Completed,
            qPrintable(outputOf(finished, 1).result.failure));
    }

    // A pipeline stage is measured by its part (core::estimateStageMemory): a node whose
    // Compute/MaxMemoryMiB gives back the whole shard takes a stage of it, started from the file
    // of the round's weights as a node starts one (docs/PERFORMANCE.md, "Pipeline stages"), and
    // trains it with its partner to the pipeline's bits.
    void aStageIsMeasuredByItsShareOfTheModel()
    {
        const auto f = stageFixture();
        const auto whole = core::estimateShardMemory(f.spec.model, f.spec.optimizer, f.spec.training.batchSize,
            f.start.bytes.size(), core::builtinDatasetBytes(f.spec.dataset.builtin));
        const auto share = core::estimateStageMemory(f.spec.model, f.spec.optimizer, f.spec.training.batchSize,
            f.spec.training.pipeline.microBatches, 0, 2, false, core::builtinDatasetBytes(f.spec.dataset.builtin));
        QVERIFY(share.totalMiB() + 8 < whole.totalMiB());
        const auto limit = (share.totalMiB() + whole.totalMiB()) / 2;

        ComputeThread thread({}, compute::inThreadCompute());
        configure(thread);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        thread.setMaxMemoryMiB(limit);
        thread.submit(f.shard, f.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 120'000));
        QCOMPARE(outputOf(finished, 0).result.outcome, core::ShardResult::Outcome::Returned);
        QVERIFY2(outputOf(finished, 0).result.failure.contains(QStringLiteral("Compute/MaxMemoryMiB")),
            qPrintable(outputOf(finished, 0).result.failure));

        // Its share, as the file says: a stage is given back below it.
        compute::LocalStageLinks links(2);
        thread.setMaxMemoryMiB(share.totalMiB() - 1);
        thread.submit(f.stage(0), {}, 0, borrowed(links.of(0)), f.file);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 2; }, 120'000));
        QCOMPARE(outputOf(finished, 1).result.outcome, core::ShardResult::Outcome::Returned);
        QVERIFY2(outputOf(finished, 1).result.failure.contains(QStringLiteral("needs about %1 MiB").arg(share.totalMiB())),
            qPrintable(outputOf(finished, 1).result.failure));
        thread.setMaxMemoryMiB(limit);
        std::thread partner([&] { runStageHere(f, links, 1); });
        thread.submit(f.stage(0), {}, 0, borrowed(links.of(0)), f.file);
        const bool ended = QTest::qWaitFor([&] { return finished.count() == 3; }, 120'000);
        links.close(QStringLiteral("the test ended"));
        partner.join();
        QVERIFY(ended);
        const auto stage = outputOf(finished, 2);
        QVERIFY2(stage.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(stage.result.failure));
        QCOMPARE(stage.result.checkpointHashes.first(), f.start.canonicalHash); // the whole, hashed as it was read
        // The same stage started from the weights in memory, with its partner: the same bits.
        compute::LocalStageLinks again(2);
        std::optional<compute::ShardOutput> reference;
        std::thread other([&] { runStageHere(f, again, 1); });
        reference = runStageHere(f, again, 0);
        other.join();
        QVERIFY(reference);
        QCOMPARE(stage.result.checkpointHashes, reference->result.checkpointHashes);
        QCOMPARE(stage.result.finalHash, reference->result.finalHash);
    }

    // The desktop app runs no LibTorch of its own: its stages run in the compute worker, which asks
    // for each tensor over its pipes (protocol::links). Both stages of a shard so, each in a
    // worker of its own: the bits of the two run here; a broken link gives the stage back.
    void aStageRunsInTheComputeWorkerToTheSameBits()
    {
        if (!sandboxed())
            QSKIP("only with Compute/Sandbox (tst_computethread_sandbox)");
        const auto f = stageFixture();
        compute::LocalStageLinks here(2);
        compute::RecordingStageLink recording(here.of(1));
        std::optional<compute::ShardOutput> reference[2];
        std::thread other([&] { reference[1] = runStageHere(f, here, 1, &recording); });
        reference[0] = runStageHere(f, here, 0);
        other.join();
        QVERIFY(reference[0] && reference[1]);
        const auto inputs = core::Digest::ofBytes(recording.record);
        QFile record(f.dir->filePath(inputs.toHex()));
        QVERIFY(record.open(QIODevice::WriteOnly) && record.write(recording.record) == recording.record.size());
        record.close();
        compute::ComputeEnvironment environment;
        environment.blobPath = [folder = f.dir->path()](const core::Digest& digest) -> std::optional<QString> {
            const QString path = QDir(folder).filePath(digest.toHex());
            return QFile::exists(path) ? std::optional<QString>(path) : std::nullopt;
        };

        std::vector<std::unique_ptr<ComputeThread>> threads;
        std::vector<std::unique_ptr<QSignalSpy>> finished;
        for (int s = 0; s < 2; ++s) {
            threads.push_back(std::make_unique<ComputeThread>(environment, nullptr));
            configure(*threads.back());
            finished.push_back(std::make_unique<QSignalSpy>(threads.back().get(), &ComputeThread::shardFinished));
        }
        QSignalSpy progress(threads[1].get(), &ComputeThread::progress);
        // Twice, so that the second start in the same worker replaces the first one's link to the
        // file rather than writing through it.
        for (int round = 0; round < 2; ++round) {
            compute::LocalStageLinks links(2);
            for (int s = 0; s < 2; ++s)
                threads[s]->submit(f.stage(s), {}, 0, borrowed(links.of(s)), f.file);
            const bool ended = QTest::qWaitFor(
                [&] { return finished[0]->count() == round + 1 && finished[1]->count() == round + 1; }, 120'000);
            links.close(QStringLiteral("the test ended"));
            QVERIFY(ended);
            for (int s = 0; s < 2; ++s) {
                const auto output = outputOf(*finished[s], round);
                QVERIFY2(output.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(output.result.failure));
                QCOMPARE(output.result.checkpointHashes, reference[s]->result.checkpointHashes);
                QCOMPARE(output.result.finalHash, reference[s]->result.finalHash);
                QCOMPARE(output.result.tensorsRoot, reference[s]->result.tensorsRoot);
                QCOMPARE(output.weights, reference[s]->weights);
            }
        }
        QCOMPARE(core::readFile(f.file).value_or(QByteArray()), f.start.bytes);
        QVERIFY(!progress.isEmpty());
        const auto last = progress.last().at(0).value<compute::ShardProgress>();
        QCOMPARE(last.stage, 1);
        QCOMPARE(last.stages, 2);

        // Stage 2 re-executed in a worker from what it received (a check of another node's stage):
        // the same bits, with no link.
        auto replayed = f.stage(1);
        replayed.stageInputs = inputs;
        threads[1]->submit(replayed, {}, 0, {}, f.file);
        QVERIFY(QTest::qWaitFor([&] { return finished[1]->count() == 3; }, 120'000));
        const auto again = outputOf(*finished[1], 2);
        QVERIFY2(again.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(again.result.failure));
        QCOMPARE(again.result.finalHash, reference[1]->result.finalHash);
        QCOMPARE(again.result.tensorsRoot, reference[1]->result.tensorsRoot);

        // A partner that went: the stage in the worker gives its task back, with the link's reason.
        compute::LocalStageLinks broken(2);
        broken.close(QStringLiteral("stage 2 went away"));
        threads[0]->submit(f.stage(0), {}, 0, borrowed(broken.of(0)), f.file);
        QVERIFY(QTest::qWaitFor([&] { return finished[0]->count() == 3; }, 120'000));
        const auto returned = outputOf(*finished[0], 2).result;
        QCOMPARE(returned.outcome, core::ShardResult::Outcome::Returned);
        QVERIFY2(returned.failure.contains(QStringLiteral("stage 2 went away")), qPrintable(returned.failure));
    }

    // A worker is not trusted with the link: each request it makes for a tensor outside its stage's
    // schedule is refused and reaches no partner, and the stage fails by the worker's fault, even
    // when the worker then blames the link. A request in schedule is carried, and a link-error
    // after it gives the task back.
    void aWorkerThatNamesTensorsOutsideItsScheduleIsRefused_data()
    {
        QTest::addColumn<QByteArray>("requests");
        QTest::addColumn<QString>("refusal"); // empty: carried
        const QString schedule = QStringLiteral("outside the stage's schedule");
        QTest::newRow("in schedule") << QByteArray("send 1 activation 0 0 AAAA") << QString();
        QTest::newRow("twice") << QByteArray("send 1 activation 0 0 AAAA\nsend 1 activation 0 0 AAAA")
                               << QStringLiteral("the same tensor twice");
        QTest::newRow("a step past the shard") << QByteArray("send 1 activation 99 0 AAAA") << schedule;
        QTest::newRow("its own stage") << QByteArray("send 0 activation 0 1 AAAA") << schedule;
        QTest::newRow("a stage the shard lacks") << QByteArray("receive 2 gradient 0 0") << schedule;
        QTest::newRow("a micro-batch past the last") << QByteArray("receive 1 gradient 0 7") << schedule;
        QTest::newRow("a gradient forward") << QByteArray("send 1 gradient 0 1 AAAA") << schedule;
        QTest::newRow("squares of micro-batch 1") << QByteArray("send 1 squares 0 1 AAAA") << schedule;
        // Base64 of more than a micro-batch's float32 rows (1 sample x 16 positions x 256).
        QTest::newRow("too large") << QByteArray("send 1 activation 0 1 ") + QByteArray((16 * 256 * 4 / 3 + 1) * 4, 'A')
                                   << QStringLiteral("more than its stage's micro-batch holds");
        QTest::newRow("malformed") << QByteArray("send 1 activation 0 1 A?AA") << QStringLiteral("malformed");
    }
    void aWorkerThatNamesTensorsOutsideItsScheduleIsRefused()
    {
        if (!sandboxed())
            QSKIP("only with Compute/Sandbox (tst_computethread_sandbox)");
        QFETCH(QByteArray, requests);
        QFETCH(QString, refusal);
        QTemporaryDir dir;
        const QString program = dir.filePath(QStringLiteral("forger"));
        QFile script(program);
        QVERIFY(script.open(QIODevice::WriteOnly));
        // Its requests, then what it would say after a receive that failed.
        script.write("#!/bin/sh\n"
                     "echo 'confined landlock=0 memory=0'\n"
                     "while read -r line; do case \"$line\" in\n"
                     "  start) echo 'ok 0' ;;\n"
                     "  step*) cat <<'END'\n"
            + requests
            + "\nlink-error stage 2 went\n"
              "END\n"
              "  ;;\n"
              "  *) exit 0 ;;\n"
              "esac; done\n");
        script.close();
        QVERIFY(script.setPermissions(script.permissions() | QFileDevice::ExeOwner));
        const auto f = stageFixture();
        ComputeThread thread({}, nullptr);
        ComputeThread::Sandbox sandbox;
        sandbox.enabled = true;
        sandbox.program = program;
        sandbox.scratchRoot = scratchRoot();
        thread.setSandbox(sandbox);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        compute::LocalStageLinks links(2);
        thread.submit(f.stage(0), {}, 0, borrowed(links.of(0)), f.file);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 120'000));
        const auto result = outputOf(finished, 0).result;
        if (refusal.isEmpty()) { // carried, then the link failed: given back
            QCOMPARE(result.outcome, core::ShardResult::Outcome::Returned);
            QVERIFY2(result.failure.contains(QStringLiteral("stage 2 went")), qPrintable(result.failure));
            QCOMPARE(links.tensorBytes(), 3);
            return;
        }
        QCOMPARE(result.outcome, core::ShardResult::Outcome::Failed);
        QVERIFY2(result.failure.contains(refusal), qPrintable(result.failure));
        QCOMPARE(links.tensorBytes(), requests.startsWith("send 1 activation 0 0") ? 3 : 0); // "twice": the first went
    }

    void aShardLargerThanTheMemoryLimitIsGivenBackWithTheReason()
    {
        const auto f = fixture(20);
        ComputeThread thread({}, compute::inThreadCompute());
        configure(thread);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        thread.setMaxMemoryMiB(40);
        thread.submit(f.tasks[0], f.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 120'000));
        const auto refused = outputOf(finished, 0).result;
        QCOMPARE(refused.outcome, core::ShardResult::Outcome::Returned);
        QVERIFY2(
            refused.failure.contains(QStringLiteral("Compute/MaxMemoryMiB")) && refused.failure.contains(QStringLiteral("MiB")),
            qPrintable(refused.failure));
        QCOMPARE(refused.losses.size(), 0);
        thread.setMaxMemoryMiB(256);
        thread.submit(f.tasks[0], f.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 2; }, 120'000));
        QCOMPARE(outputOf(finished, 1).result.outcome, core::ShardResult::Outcome::Completed);
    }

    void dutyCycleRestsAsLongAsItWorksAtHalf()
    {
        const auto f = fixture(400); // long enough that the call after which it does not rest (the last) is a small part
        ComputeThread thread({}, compute::inThreadCompute());
        configure(thread);
        thread.setCpuPercent(50);
        QSignalSpy progress(&thread, &ComputeThread::progress);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        thread.submit(f.tasks[0], f.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 120'000));
        const auto last = progress.last().at(0).value<compute::ShardProgress>();
        QVERIFY(last.busyMs > 0);
        // It rests t after each step of t. A rest can only run long, by as much as the machine is busy
        // (a loaded core wakes the thread late), so the upper bound is a loose guard against a rest
        // that never ends, not a measure of the scheduler.
        const double ratio = double(last.throttledMs) / double(last.busyMs);
        QVERIFY2(ratio > 0.85 && ratio < 20.0,
            qPrintable(QStringLiteral("rested %1 ms for %2 ms of work").arg(last.throttledMs).arg(last.busyMs)));
    }

    // Compute/Sandbox: the worker that trained a job's first shard trains its next (LibTorch's
    // start and the data are paid once per job), to the bits of training here, and the worker gives
    // its memory back when the node pauses.
    void oneWorkerTrainsAJobsShardsUntilThePause()
    {
        if (!sandboxed())
            QSKIP("only with Compute/Sandbox (tst_computethread_sandbox)");
        const auto f = fixture(20);
        ComputeThread thread({}, compute::inThreadCompute());
        configure(thread);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        QSignalSpy held(&thread, &ComputeThread::held);
        // The worker's kept state comes as a file beside its scratch folder, never through this
        // process's memory: the first shard's is taken (as the node's executor takes it into its
        // cache), the second's is left, and the compute thread removes it.
        QList<qint64> keptSizes;
        const QString taken = QDir(scratchRoot()).filePath(QStringLiteral("taken.state"));
        QObject::connect(
            &thread, &ComputeThread::shardFinished, &thread,
            [&](const ShardOutput& output) {
                keptSizes.append(output.keptState.isEmpty() ? QFileInfo(output.keptStateFile).size() : -1);
                if (keptSizes.size() == 1)
                    QFile::rename(output.keptStateFile, taken);
            },
            Qt::DirectConnection);
        thread.holdAt(QStringLiteral("job-a"), 0, 1);
        thread.submit(f.tasks[0], f.start.bytes);
        thread.submit(f.tasks[1], f.start.bytes);
        QVERIFY(waitUntilHeld(held));
        const QStringList first = workerFolders();
        QCOMPARE(first.size(), 1);
        thread.releaseHold();
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 2; }, 120'000));
        QCOMPARE(workerFolders(), first); // the same worker, waiting for the job's next shard
        for (int i = 0; i < 2; ++i) {
            const auto output = outputOf(finished, i);
            QVERIFY2(output.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(output.result.failure));
            const auto here = compute::runShard(f.tasks[i], f.start.bytes, {});
            QCOMPARE(output.result.finalHash, here.result.finalHash);
            QCOMPARE(keptSizes.at(i), here.keptState.size()); // it also holds the time it took
        }
        QVERIFY(compute::canonicalHashOf(core::readFile(taken).value_or(QByteArray())).ok()); // a training state
        QVERIFY(QDir(scratchRoot()).entryList({ QStringLiteral("kept-*") }, QDir::Files).isEmpty());
        thread.pause();
        QVERIFY(waitForState(thread, ComputeThread::State::Paused));
        QVERIFY(QTest::qWaitFor([&] { return workerFolders().isEmpty(); }, 60'000));
    }

    // A node whose worker cannot start or confine itself (a broken installation) gives the shard
    // back, counted against nobody, and says why; the scratch folders a crashed run of the node left behind a
    // day ago are swept when it first needs a worker.
    void aNodeThatCannotStartItsWorkerGivesTheShardBack()
    {
        if (!sandboxed())
            QSKIP("only with Compute/Sandbox (tst_computethread_sandbox)");
        const QString stale = QDir(scratchRoot()).filePath(QStringLiteral("tessera-worker-stale"));
        QVERIFY(QDir().mkpath(stale + QStringLiteral("/left")));
        const timeval twoDaysAgo[2] = { { ::time(nullptr) - 2 * 86400, 0 }, { ::time(nullptr) - 2 * 86400, 0 } };
        QCOMPARE(::utimes(QFile::encodeName(stale).constData(), twoDaysAgo), 0);
        const auto f = fixture(20);
        ComputeThread thread({}, compute::inThreadCompute());
        ComputeThread::Sandbox sandbox;
        sandbox.enabled = true;
        sandbox.program = QStringLiteral("/nonexistent/tessera-compute");
        sandbox.scratchRoot = scratchRoot();
        thread.setSandbox(sandbox);
        QSignalSpy finished(&thread, &ComputeThread::shardFinished);
        thread.submit(f.tasks[0], f.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 120'000));
        const auto result = outputOf(finished, 0).result;
        QCOMPARE(result.outcome, core::ShardResult::Outcome::Returned);
        QVERIFY2(result.failure.contains(QStringLiteral("cannot start the compute worker")), qPrintable(result.failure));
        QVERIFY(!QFileInfo::exists(stale));
        // One that starts but dies before it has confined itself (so before any job code ran).
        sandbox.program = QStringLiteral("/bin/false");
        thread.setSandbox(sandbox);
        thread.submit(f.tasks[1], f.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 2; }, 120'000));
        const auto died = outputOf(finished, 1).result;
        QCOMPARE(died.outcome, core::ShardResult::Outcome::Returned);
        QVERIFY2(died.failure.contains(QStringLiteral("did not start")), qPrintable(died.failure));
    }
};

QTEST_GUILESS_MAIN(ComputeThreadTest)
#include "tst_computethread.moc"
