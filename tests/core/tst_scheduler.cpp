// The scheduler on its own, in memory: which shard goes to which node, in what order, and what
// happens to a shard whose node fails, gives it back, goes or is late.

#include <core/broker/scheduler.h>

#include <QTest>

using namespace tessera::core;
using namespace tessera::core::broker;

namespace {

Scheduler::Round round(const QString& jobId, int shards, int threads = 1)
{
    Scheduler::Round r;
    r.jobId = jobId;
    r.spec.training.shardsPerRound = shards;
    r.spec.training.threads = threads;
    r.round = 0;
    return r;
}

// Picks a shard for the node and hands it out as assignment `id`, due at `deadline`.
std::optional<std::int64_t> take(
    Scheduler& scheduler, const QString& node, const QString& id, std::int64_t now, std::int64_t deadline, int maxThreads = 1)
{
    auto pick = scheduler.pick(node, maxThreads, now);
    if (!pick)
        return std::nullopt;
    scheduler.handedOut(pick->round->jobId, id, pick->shard, node, deadline);
    return pick->shard;
}

} // namespace

class SchedulerTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void shardsGoOutInOrderAndJobsInSubmissionOrder()
    {
        Scheduler scheduler;
        scheduler.add(round(QStringLiteral("first"), 2));
        scheduler.add(round(QStringLiteral("second"), 1));
        QCOMPARE(take(scheduler, QStringLiteral("a"), QStringLiteral("1"), 0, 100), 0);
        QCOMPARE(take(scheduler, QStringLiteral("b"), QStringLiteral("2"), 0, 100), 1);
        auto third = scheduler.pick(QStringLiteral("c"), 1, 0);
        QVERIFY(third);
        QCOMPARE(third->round->jobId, QStringLiteral("second"));
    }

    void aNodeGetsOnlyJobsItHasThreadsFor()
    {
        Scheduler scheduler;
        scheduler.add(round(QStringLiteral("wide"), 1, 4));
        QVERIFY(!scheduler.pick(QStringLiteral("small"), 2, 0));
        QVERIFY(scheduler.pick(QStringLiteral("big"), 4, 0));
    }

    void aReleasedShardGoesOutFirst()
    {
        Scheduler scheduler;
        scheduler.add(round(QStringLiteral("j"), 3));
        QCOMPARE(take(scheduler, QStringLiteral("a"), QStringLiteral("1"), 0, 100), 0);
        QCOMPARE(take(scheduler, QStringLiteral("b"), QStringLiteral("2"), 0, 100), 1);
        scheduler.release(QStringLiteral("j"), QStringLiteral("2")); // failed or given back
        QVERIFY(!scheduler.isOut(QStringLiteral("j"), QStringLiteral("2")));
        QCOMPARE(take(scheduler, QStringLiteral("c"), QStringLiteral("3"), 0, 100), 1);
        QCOMPARE(take(scheduler, QStringLiteral("c"), QStringLiteral("4"), 0, 100), 2);
    }

    void aLostNodesShardsGoToOthers()
    {
        Scheduler scheduler;
        scheduler.add(round(QStringLiteral("j"), 2));
        QCOMPARE(take(scheduler, QStringLiteral("gone"), QStringLiteral("1"), 0, 100), 0);
        QCOMPARE(take(scheduler, QStringLiteral("gone"), QStringLiteral("2"), 0, 100), 1);
        scheduler.nodeLost(QStringLiteral("gone"));
        QCOMPARE(take(scheduler, QStringLiteral("b"), QStringLiteral("3"), 0, 100), 0);
        QCOMPARE(take(scheduler, QStringLiteral("b"), QStringLiteral("4"), 0, 100), 1);
    }

    void aLateShardGoesToASecondNodeOnlyOnceEveryShardIsOut()
    {
        Scheduler scheduler;
        scheduler.add(round(QStringLiteral("j"), 2));
        QCOMPARE(take(scheduler, QStringLiteral("slow"), QStringLiteral("1"), 0, 100), 0);
        QCOMPARE(take(scheduler, QStringLiteral("fast"), QStringLiteral("2"), 0, 500), 1);
        // Before the deadline nothing is handed out twice.
        QVERIFY(!scheduler.pick(QStringLiteral("third"), 1, 50));
        // After it, the late shard goes to another node, but not back to the one that holds it.
        QVERIFY(!scheduler.pick(QStringLiteral("slow"), 1, 200));
        QCOMPARE(take(scheduler, QStringLiteral("third"), QStringLiteral("3"), 200, 300), 0);
        // Held in time by the second node now: nobody else gets it.
        QVERIFY(!scheduler.pick(QStringLiteral("fourth"), 1, 250));
        // The first answer wins; the late assignment is forgotten, the shard stays answered.
        scheduler.answered(QStringLiteral("j"), QStringLiteral("3"), 0);
        scheduler.forget(QStringLiteral("j"), QStringLiteral("1"));
        scheduler.release(QStringLiteral("j"), QStringLiteral("1"));
        QVERIFY(!scheduler.pick(QStringLiteral("fourth"), 1, 250));
    }

    void aNewRoundStartsOverAndARejectedShardIsTrainedAgain()
    {
        Scheduler scheduler;
        scheduler.add(round(QStringLiteral("j"), 2), { 0 }); // shard 0 answered before a restart
        QCOMPARE(take(scheduler, QStringLiteral("a"), QStringLiteral("1"), 0, 100), 1);
        scheduler.answered(QStringLiteral("j"), QStringLiteral("1"), 1);
        QVERIFY(!scheduler.pick(QStringLiteral("a"), 1, 0));
        // A sampled result of this round lost its check: the shard goes out again.
        scheduler.reopen(QStringLiteral("j"), 0, 1);
        QCOMPARE(take(scheduler, QStringLiteral("b"), QStringLiteral("2"), 0, 100), 1);
        // A check of an older round changes nothing.
        scheduler.reopen(QStringLiteral("j"), 7, 0);
        QVERIFY(!scheduler.pick(QStringLiteral("c"), 1, 0));
        scheduler.advance(QStringLiteral("j"), 1, Digest::ofBytes("w1"), Digest::ofBytes("b1"));
        QCOMPARE(scheduler.find(QStringLiteral("j"))->round, 1);
        QCOMPARE(scheduler.find(QStringLiteral("j"))->weightsHash, Digest::ofBytes("w1"));
        QVERIFY(!scheduler.isOut(QStringLiteral("j"), QStringLiteral("2")));
        QCOMPARE(take(scheduler, QStringLiteral("c"), QStringLiteral("3"), 0, 100), 0);
        scheduler.remove(QStringLiteral("j"));
        QVERIFY(!scheduler.hasWork());
    }

    void deadlinesFollowTheNodesBenchmark()
    {
        BrokerOptions options;
        options.minDeadlineMs = 30'000;
        options.deadlineSlack = 4.0;
        ShardTask task;
        task.localSteps = 1000;
        task.batchSize = 100;
        task.threads = 1;
        NodeInfo fast;
        fast.benchmarkSamplesPerSecond = 10'000.0; // 10 s of work: 40 s
        QCOMPARE(Scheduler::deadlineFor(task, fast, options, 1'000), 41'000);
        NodeInfo faster;
        faster.benchmarkSamplesPerSecond = 1'000'000.0; // 0.1 s: the minimum
        QCOMPARE(Scheduler::deadlineFor(task, faster, options, 0), 30'000);
        NodeInfo unknown; // no benchmark: assumed slow (1000 samples/s), 400 s
        QCOMPARE(Scheduler::deadlineFor(task, unknown, options, 0), 400'000);
    }
};

QTEST_GUILESS_MAIN(SchedulerTest)
#include "tst_scheduler.moc"
