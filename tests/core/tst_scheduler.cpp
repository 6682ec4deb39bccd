// The scheduler on its own, in memory: which shard goes to which node, in what order, and what
// happens to a shard whose node fails, gives it back, goes or is late.

#include <core/broker/scheduler.h>
#include <core/pricing.h>

#include <QTest>

#include <limits>

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
    scheduler.handedOut(pick->round->jobId, id, pick->shard, node, deadline, now);
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

    // Deadlines grow with the work: the same node and steps, a model with 100x the FLOPs per sample,
    // a 100x longer deadline (not the same 30 s floor); once the node answered a shard, its deadline
    // follows what it delivered (on the broker's clock), not what it claimed.
    void deadlinesFollowTheWorkAndTheNodesObservedThroughput()
    {
        BrokerOptions options;
        options.minDeadlineMs = 30'000;
        options.deadlineSlack = 4.0;
        ShardTask task;
        task.localSteps = 20;
        task.batchSize = 32;
        task.threads = 1;
        NodeInfo node;
        node.nodeId = QStringLiteral("n");
        node.benchmarkSamplesPerSecond = 2'000.0;
        Scheduler scheduler;
        const double small = benchmarkFlopsPerSample(); // the benchmark's own model: 640 samples, 0.32 s, the floor
        QCOMPARE(scheduler.deadline(task, small, node, options, 0), 30'000);
        QCOMPARE(scheduler.deadline(task, 0.0, node, options, 0), Scheduler::deadlineFor(task, node, options, 0));
        // 100x the FLOPs: 32 s of work, x4.
        QCOMPARE(scheduler.deadline(task, 100.0 * small, node, options, 0), 128'000);

        // The node answers a shard of a job with 100x the FLOPs in 64 s: half the speed it claimed.
        auto job = round(QStringLiteral("big"), 2);
        job.spec.training.localSteps = 20;
        job.spec.training.batchSize = 32;
        job.flopsPerSample = 100.0 * small;
        scheduler.add(job);
        QCOMPARE(take(scheduler, QStringLiteral("n"), QStringLiteral("a"), 1'000, 999'999), 0);
        QCOMPARE(scheduler.observedFlopsPerMs(QStringLiteral("n"), 1), 0.0);
        scheduler.answered(QStringLiteral("big"), QStringLiteral("a"), 0, 65'000);
        QVERIFY(scheduler.observedFlopsPerMs(QStringLiteral("n"), 1) > 0.0);
        QCOMPARE(scheduler.observedFlopsPerMs(QStringLiteral("n"), 4), 0.0); // another thread count: not observed
        QCOMPARE(scheduler.deadline(task, 100.0 * small, node, options, 0), 256'000);
        // Another node's deadline still follows its own claim.
        NodeInfo other = node;
        other.nodeId = QStringLiteral("m");
        QCOMPARE(scheduler.deadline(task, 100.0 * small, other, options, 0), 128'000);
    }

    // A benchmark is a claim: a node that says it is absurdly slow gets the ceiling, not 406 years,
    // and no size of task overflows.
    void noClaimStretchesADeadlinePastTheCeiling()
    {
        BrokerOptions options;
        options.maxDeadlineMs = 3'600'000;
        ShardTask task;
        task.localSteps = 1000;
        task.batchSize = 100;
        task.threads = 1;
        NodeInfo crawler;
        crawler.benchmarkSamplesPerSecond = 2.5e-8; // held at 50 samples/s: 2,000 s x 4, then the ceiling
        QCOMPARE(Scheduler::deadlineFor(task, crawler, options, 1'000), 3'601'000);
        task.localSteps = std::numeric_limits<std::int64_t>::max();
        task.batchSize = std::numeric_limits<std::int64_t>::max();
        task.threads = 4096;
        QCOMPARE(Scheduler::deadlineFor(task, crawler, options, 0), 3'600'000);
        options.maxClaimedSamplesPerSecond = 1e300;
        crawler.benchmarkSamplesPerSecond = 1e300;
        task.localSteps = 0;
        QCOMPARE(Scheduler::deadlineFor(task, crawler, options, 0), options.minDeadlineMs);
    }

    // A shard out four times as long as the job's shards usually take goes to a second node, however
    // long the deadline its first node was given.
    void aStragglerGoesToASecondNodeOnceTheJobsShardsUsuallyTakeLess()
    {
        Scheduler scheduler(4.0);
        scheduler.add(round(QStringLiteral("j"), 5));
        QCOMPARE(take(scheduler, QStringLiteral("holder"), QStringLiteral("h"), 0, 1'000'000'000), 0);
        for (int i = 1; i <= 3; ++i) {
            const auto id = QString::number(i);
            QCOMPARE(take(scheduler, QStringLiteral("b"), id, 100 * i, 1'000'000'000), i);
            scheduler.answered(QStringLiteral("j"), id, i, 100 * i + 100);
        }
        QCOMPARE(scheduler.usualMs(QStringLiteral("j")), 100);
        QCOMPARE(take(scheduler, QStringLiteral("b"), QStringLiteral("4"), 400, 1'000'000'000), 4);
        QCOMPARE(scheduler.heldBy(QStringLiteral("b")), 1);
        QCOMPARE(scheduler.heldBy(QStringLiteral("holder")), 1);
        // Out 400 ms (4 x usual): not yet late; after that, it goes to another node, not back to its holder.
        QVERIFY(!scheduler.pick(QStringLiteral("c"), 1, 400));
        QVERIFY(!scheduler.pick(QStringLiteral("holder"), 1, 401));
        QCOMPARE(take(scheduler, QStringLiteral("c"), QStringLiteral("5"), 401, 1'000'000'000), 0);
    }

    // A node that reports a shard as failed does not get it back in this round; others do.
    void aFailedShardGoesToADifferentNode()
    {
        Scheduler scheduler;
        scheduler.add(round(QStringLiteral("j"), 2));
        QCOMPARE(take(scheduler, QStringLiteral("liar"), QStringLiteral("1"), 0, 100), 0);
        scheduler.release(QStringLiteral("j"), QStringLiteral("1"), Scheduler::Release::Failed);
        QCOMPARE(scheduler.failedBy(QStringLiteral("j"), 0), QList<QString> { QStringLiteral("liar") });
        QCOMPARE(take(scheduler, QStringLiteral("liar"), QStringLiteral("2"), 0, 100), 1);
        scheduler.release(QStringLiteral("j"), QStringLiteral("2"), Scheduler::Release::Failed);
        QVERIFY(!scheduler.pick(QStringLiteral("liar"), 1, 0));
        QCOMPARE(take(scheduler, QStringLiteral("honest"), QStringLiteral("3"), 0, 100), 0);
        QCOMPARE(take(scheduler, QStringLiteral("honest"), QStringLiteral("4"), 0, 100), 1);
        // Late, it still does not go back to the node that failed it.
        QVERIFY(!scheduler.pick(QStringLiteral("liar"), 1, 1'000));
        // Three failed shards in a round: no more of that round for the node.
        Scheduler many;
        many.add(round(QStringLiteral("k"), 5));
        for (int i = 0; i < Scheduler::MaxFailuresPerRound; ++i) {
            const auto id = QStringLiteral("f%1").arg(i);
            QCOMPARE(take(many, QStringLiteral("liar"), id, 0, 100), i);
            many.release(QStringLiteral("k"), id, Scheduler::Release::Failed);
        }
        QVERIFY(!many.pick(QStringLiteral("liar"), 1, 0));
        QVERIFY(many.pick(QStringLiteral("honest"), 1, 0));
        // A new round forgets who failed what.
        scheduler.advance(QStringLiteral("j"), 1, Digest::ofBytes("w1"), Digest::ofBytes("b1"));
        QVERIFY(scheduler.failedBy(QStringLiteral("j"), 0).isEmpty());
        QCOMPARE(take(scheduler, QStringLiteral("liar"), QStringLiteral("5"), 0, 100), 0);
    }
};

QTEST_GUILESS_MAIN(SchedulerTest)
#include "tst_scheduler.moc"
