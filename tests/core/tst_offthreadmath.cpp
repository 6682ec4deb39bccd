// The broker's arithmetic on a worker thread (core::broker::OffThreadMath): each call runs on
// another thread while the caller's hook keeps being called, results and errors come back as they
// were, a call made from inside the hook runs inline, and weights in a file are read there too.

#include <core/broker/offthreadmath.h>

#include <support/fakemath.h>

#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <atomic>
#include <thread>

using namespace tessera::core;
using namespace tessera::core::broker;

namespace {

// Aggregation that waits until the caller's hook has run a few times: it cannot finish unless the
// hook runs while it computes, on another thread.
class WaitingMath final : public TrainingMath {
public:
    std::atomic<int> hooks { 0 };
    std::thread::id ranOn;
    std::thread::id aggregatedOn;
    tessera::tests::FakeMath fake;

    Result<Weights> initialWeights(const JobSpec& spec) override { return fake.initialWeights(spec); }
    Result<Digest> canonicalHash(const QByteArray& weights) override
    {
        ranOn = std::this_thread::get_id();
        return fake.canonicalHash(weights);
    }
    Result<Aggregated> aggregate(const AggregationSpec& spec, const QString& global, const QList<Update>& updates,
        const QByteArray& outer, const QString& weightsOut) override
    {
        aggregatedOn = std::this_thread::get_id();
        while (hooks.load() < 3)
            std::this_thread::yield();
        return fake.aggregate(spec, global, updates, outer, weightsOut);
    }
    Result<Evaluation> evaluate(const JobSpec& spec, QByteArray weights) override
    {
        return fake.evaluate(spec, std::move(weights));
    }
    Result<Replay> replay(const ShardTask& task, std::int64_t from, const QByteArray& state, const Digest& expected,
        std::int64_t to, const QByteArray& round) override
    {
        return fake.replay(task, from, state, expected, to, round);
    }
    Result<double> distance(const QByteArray& a, const QByteArray& b, const QByteArray& round) override
    {
        return fake.distance(a, b, round);
    }
};

} // namespace

class OffThreadMathTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void callsRunOnAnotherThreadWhileTheHookRuns()
    {
        WaitingMath inner;
        OffThreadMath math(inner);
        int nested = 0;
        math.setWhileWaiting([&] {
            ++inner.hooks;
            // A call from inside the hook runs inline, on this thread.
            if (nested++ == 0) {
                QVERIFY(math.canonicalHash("w").ok());
                QCOMPARE(inner.ranOn, std::this_thread::get_id());
            }
        });
        QTemporaryDir folder;
        QFile global(folder.filePath(QStringLiteral("global")));
        QVERIFY(global.open(QIODevice::WriteOnly) && global.write("g") == 1);
        global.close();
        const QString out = folder.filePath(QStringLiteral("out"));
        const auto aggregated = math.aggregate({}, global.fileName(), { { 0, 1, "a", {} }, { 1, 1, "b", {} } }, {}, out);
        QVERIFY(aggregated.ok());
        QCOMPARE(aggregated->weights.sha256, Digest::ofBytes("g|ab"));
        QFile written(out);
        QVERIFY(written.open(QIODevice::ReadOnly));
        QCOMPARE(written.readAll(), QByteArray("g|ab"));
        QVERIFY(inner.aggregatedOn != std::this_thread::get_id());
        QVERIFY(inner.hooks.load() >= 3);
        // Errors come back as they were.
        inner.fake.replayFails = true;
        ShardTask task;
        QCOMPARE(
            math.replay(task, 0, "s", Digest::ofBytes("s"), 1, {}).error().message, QStringLiteral("loss became NaN at step 3"));
        QCOMPARE(math.canonicalHash("unreadable").error().field, QStringLiteral("weights"));
    }

    // Weights in a file are read by the worker (a large model's are not read on the caller's loop).
    void aFilesWeightsAreReadAndHashedOnTheWorker()
    {
        WaitingMath inner;
        OffThreadMath math(inner);
        QTemporaryDir dir;
        QFile file(dir.filePath(QStringLiteral("weights")));
        QVERIFY(file.open(QIODevice::WriteOnly) && file.write("w1") == 2);
        file.close();
        const auto hash = math.canonicalHashOfFile(file.fileName());
        QVERIFY(hash.ok());
        QCOMPARE(*hash, Digest::ofBytes("w1"));
        QVERIFY(inner.ranOn != std::this_thread::get_id());
        QVERIFY(!math.canonicalHashOfFile(dir.filePath(QStringLiteral("gone"))).ok());
    }
};

QTEST_GUILESS_MAIN(OffThreadMathTest)
#include "tst_offthreadmath.moc"
