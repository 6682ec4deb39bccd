// The broker's state machine with a fake clock and stand-in arithmetic (a fake is fine here: the
// real arithmetic is tested in tests/compute and end to end in tests/e2e).

#include <core/broker/broker.h>
#include <core/signing.h>

#include <QHash>

#include <QTemporaryDir>
#include <QTest>

using namespace tessera::core;
using namespace tessera::core::broker;

namespace {

class FakeClock final : public Clock {
public:
    std::int64_t now = 1'000'000;
    std::int64_t nowMs() const override { return now; }
};

// Weights are plain bytes whose "canonical hash" is their SHA-256; aggregation concatenates the
// shards' weights in the order it is given them, so the test can see that order.
class FakeMath final : public TrainingMath {
public:
    QList<QList<std::int64_t>> aggregationOrders;

    Result<Weights> initialWeights(const JobSpec&) override { return Weights { "w0", Digest::ofBytes("w0") }; }
    Result<Digest> canonicalHash(const QByteArray& weights) override { return Digest::ofBytes(weights); }
    Result<Aggregated> aggregate(
        const AggregationSpec&, const QByteArray& global, const QList<Update>& updates, const QByteArray&) override
    {
        QByteArray next = global + "|";
        QList<std::int64_t> order;
        for (const auto& update : updates) {
            next += update.weights;
            order.append(update.shard);
        }
        aggregationOrders.append(order);
        return Aggregated { { next, Digest::ofBytes(next) }, {} };
    }
    Result<Evaluation> evaluate(const JobSpec&, const QByteArray&) override { return Evaluation { 0.5, 0.9 }; }
};

JobSpec job(std::int64_t rounds = 2, std::int64_t shards = 3)
{
    JobSpec spec;
    spec.name = QStringLiteral("broker test");
    spec.model.zoo = QStringLiteral("mlp");
    spec.dataset.builtin = QStringLiteral("fashion-mnist");
    spec.training.rounds = rounds;
    spec.training.shardsPerRound = shards;
    spec.training.localSteps = 10;
    spec.training.checkpointInterval = 5;
    spec.budget = *Credits::fromCredits(100);
    return spec;
}

SigningKeys& keysOf(const QString& nodeId)
{
    static QHash<QString, SigningKeys> keys;
    if (!keys.contains(nodeId))
        keys.insert(nodeId, SigningKeys::generate());
    return keys[nodeId];
}

NodeInfo node(const QString& id, int threads = 4)
{
    NodeInfo info;
    info.signingKey = QString::fromLatin1(keysOf(id).publicKey.toBase64());
    info.nodeId = id;
    info.softwareVersion = QStringLiteral("test");
    info.runtimeProfile = QStringLiteral("p");
    info.maxThreads = threads;
    info.benchmarkSamplesPerSecond = 1000;
    return info;
}

// What an honest node would answer for an assignment, with its weights uploaded.
ShardResult answer(Broker& broker, const Assignment& assignment, const QByteArray& weights)
{
    ShardResult result;
    result.jobId = assignment.task.jobId;
    result.round = assignment.task.round;
    result.shard = assignment.task.shard;
    result.weightsSha256 = *broker.blobs().put(weights);
    result.finalHash = Digest::ofBytes(weights);
    result.checkpointHashes = { assignment.task.startWeights, Digest::ofBytes("mid"), result.finalHash };
    result.losses = { 1.0, 0.5 };
    return result;
}

// What a node does with a finished shard: commit to it (signed), then reveal it.
Result<Verdict> deliver(Broker& broker, const QString& nodeId, const QString& assignmentId, const ShardResult& result)
{
    if (result.outcome == ShardResult::Outcome::Completed) {
        const auto commitment = result.commitment();
        const auto document
            = signDocument({ { QStringLiteral("assignment"), assignmentId }, { QStringLiteral("jobId"), result.jobId },
                               { QStringLiteral("round"), static_cast<qint64>(result.round) },
                               { QStringLiteral("shard"), static_cast<qint64>(result.shard) },
                               { QStringLiteral("finalHash"), commitment.finalHash.toHex() },
                               { QStringLiteral("chainRoot"), commitment.chainRoot.toHex() } },
                keysOf(nodeId));
        (void)broker.commit(nodeId, document); // refusals show up as the result's error
    }
    return broker.acceptResult(nodeId, assignmentId, result);
}

} // namespace

class BrokerTest : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    FakeClock m_clock;
    FakeMath m_math;

    std::unique_ptr<Broker> open(const QString& name = QStringLiteral("b"), bool faucet = true)
    {
        Broker::Options options;
        options.minDeadlineMs = 10'000;
        options.maxShardFailures = 2;
        options.faucet = faucet;
        auto broker = Broker::open(m_dir.filePath(name), m_math, m_clock, options);
        if (!broker)
            qFatal("%s", qPrintable(broker.error().toString()));
        return std::move(broker).value();
    }

private Q_SLOTS:
    void roundsAdvanceWhenEveryShardIsIn()
    {
        auto broker = open(QStringLiteral("rounds"));
        const auto jobId = *broker->submit(job(2, 3));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("b"))).ok());

        for (int round = 0; round < 2; ++round) {
            QList<Assignment> out;
            for (const auto* id : { "a", "b", "a" })
                out.append(**broker->assign(QString::fromLatin1(id)));
            QVERIFY(!broker->assign(QStringLiteral("b"))->has_value()); // all three are out, in time
            QCOMPARE(out[0].task.round, round);
            // Results arrive out of order; aggregation still goes by shard.
            for (int i : { 2, 0, 1 })
                QCOMPARE(*deliver(*broker, QString::fromLatin1(i == 1 ? "b" : "a"), out[i].id,
                             answer(*broker, out[i], QByteArray::number(round) + QByteArray::number(out[i].task.shard))),
                    Verdict::Accepted);
        }
        QCOMPARE(m_math.aggregationOrders.last(), (QList<std::int64_t> { 0, 1, 2 }));
        const auto status = *broker->status(jobId);
        QCOMPARE(status.state, QStringLiteral("finished"));
        QCOMPARE(status.history.size(), 2);
        QCOMPARE(status.history[1].testAccuracy, 0.9);
        QCOMPARE(status.history[0].trainLoss, 0.75);
        QCOMPARE(*broker->blobs().read(status.weightsBlob), QByteArray("w0|000102|101112"));
        QVERIFY(!broker->assign(QStringLiteral("a"))->has_value());
    }

    void stragglersAreReissuedAndTheFirstValidResultWins()
    {
        auto broker = open(QStringLiteral("stragglers"));
        (void)*broker->submit(job(1, 1));
        QVERIFY(broker->registerNode(node(QStringLiteral("slow"))).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("fast"))).ok());
        const auto first = **broker->assign(QStringLiteral("slow"));
        QVERIFY(!broker->assign(QStringLiteral("fast"))->has_value());
        m_clock.now = first.deadlineMs + 1; // the slow node misses its deadline
        const auto second = **broker->assign(QStringLiteral("fast"));
        QCOMPARE(second.task.shard, first.task.shard);
        QVERIFY(second.id != first.id);
        QCOMPARE(*deliver(*broker, QStringLiteral("fast"), second.id, answer(*broker, second, "fast")), Verdict::Accepted);
        // The straggler's late answer is not counted twice.
        QCOMPARE(*deliver(*broker, QStringLiteral("slow"), first.id, answer(*broker, first, "slow")), Verdict::Stale);
        QCOMPARE(*deliver(*broker, QStringLiteral("fast"), second.id, answer(*broker, second, "fast")), Verdict::Stale);
    }

    void invalidResultsAreNotCounted()
    {
        auto broker = open(QStringLiteral("invalid"));
        (void)*broker->submit(job(1, 4));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("b"))).ok());
        // A node's first commitment binds it, so each kind of bad result gets its own assignment.
        QList<Assignment> out;
        for (int i = 0; i < 4; ++i)
            out.append(**broker->assign(QStringLiteral("a")));

        auto lie = answer(*broker, out[0], "w");
        lie.finalHash = Digest::ofBytes("not the weights");
        lie.checkpointHashes.last() = lie.finalHash;
        QCOMPARE(deliver(*broker, QStringLiteral("a"), out[0].id, lie).error().field, QStringLiteral("finalHash"));
        auto shortChain = answer(*broker, out[1], "w");
        shortChain.checkpointHashes.removeAt(1);
        QCOMPARE(deliver(*broker, QStringLiteral("a"), out[1].id, shortChain).error().field, QStringLiteral("checkpointHashes"));
        auto noWeights = answer(*broker, out[2], "w");
        noWeights.weightsSha256 = Digest::ofBytes("never uploaded");
        QCOMPARE(deliver(*broker, QStringLiteral("a"), out[2].id, noWeights).error().field, QStringLiteral("weightsSha256"));
        QVERIFY(!deliver(*broker, QStringLiteral("b"), out[3].id, answer(*broker, out[3], "w")).ok()); // not b's
        QVERIFY(!deliver(*broker, QStringLiteral("a"), QStringLiteral("nonsense"), answer(*broker, out[3], "w")).ok());
        // After all that, an honest answer still counts.
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), out[3].id, answer(*broker, out[3], "w")), Verdict::Accepted);
    }

    void failedShardsGoElsewhereAndEndTheJobAfterTooMany()
    {
        auto broker = open(QStringLiteral("failures"));
        const auto jobId = *broker->submit(job(1, 1));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("b"))).ok());
        for (const auto* id : { "a", "b" }) {
            const auto assignment = **broker->assign(QString::fromLatin1(id));
            ShardResult failed;
            failed.jobId = assignment.task.jobId;
            failed.round = assignment.task.round;
            failed.shard = assignment.task.shard;
            failed.outcome = ShardResult::Outcome::Failed;
            failed.failure = QStringLiteral("loss became NaN");
            QCOMPARE(*deliver(*broker, QString::fromLatin1(id), assignment.id, failed), Verdict::Failed);
        }
        const auto status = *broker->status(jobId);
        QCOMPARE(status.state, QStringLiteral("failed"));
        QVERIFY(status.failure.contains(QStringLiteral("NaN")));
        // Their record follows them: a node that failed ranks below its benchmark.
        QVERIFY(broker->schedulingScore(QStringLiteral("a")) < Broker::expectedSamplesPerSecond(node(QStringLiteral("a"))));
        const auto known = *broker->nodes();
        QCOMPARE(known.size(), 2);
        QCOMPARE(known[0].value(QStringLiteral("shardsFailed")).toInt(), 1);
        QVERIFY(!broker->assign(QStringLiteral("a"))->has_value());
    }

    void shardsOfALostNodeAndOfACrashedBrokerAreReissued()
    {
        {
            auto broker = open(QStringLiteral("recovery"));
            (void)*broker->submit(job(1, 2));
            QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
            QVERIFY(broker->registerNode(node(QStringLiteral("b"))).ok());
            const auto lost = **broker->assign(QStringLiteral("a"));
            broker->nodeLost(QStringLiteral("a"));
            QCOMPARE((**broker->assign(QStringLiteral("b"))).task.shard, lost.task.shard); // at once, no deadline to wait for
            (void)**broker->assign(QStringLiteral("b"));
        } // the broker dies with both shards out
        auto broker = open(QStringLiteral("recovery"));
        QVERIFY(broker->registerNode(node(QStringLiteral("c"))).ok());
        QVERIFY(broker->assign(QStringLiteral("c"))->has_value());
        QVERIFY(broker->assign(QStringLiteral("c"))->has_value());
    }

    void nodesGetOnlyWhatTheyCanRun()
    {
        auto broker = open(QStringLiteral("threads"));
        auto spec = job(1, 1);
        spec.training.threads = 8;
        (void)*broker->submit(spec);
        QVERIFY(broker->registerNode(node(QStringLiteral("small"), 2)).ok());
        QVERIFY(!broker->assign(QStringLiteral("small"))->has_value());
        QVERIFY(!broker->assign(QStringLiteral("unregistered")).ok());
    }

    void moneyMovesWithTheWork()
    {
        auto broker = open(QStringLiteral("money"));
        const auto jobId = *broker->submit(job(1, 2), QStringLiteral("owner"));
        auto status = *broker->status(jobId);
        QCOMPARE(status.escrow, *Credits::fromCredits(100));
        QCOMPARE(status.pricePerShard, Credits::fromMicro(100'000)); // 1 work unit at 0.1 credit
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QCOMPARE((*broker->account(QStringLiteral("a"))).value(QStringLiteral("stake")).toString(), QStringLiteral("10"));
        const auto first = **broker->assign(QStringLiteral("a"));
        const auto second = **broker->assign(QStringLiteral("a"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), first.id, answer(*broker, first, "x")), Verdict::Accepted);
        QCOMPARE(*broker->ledger().balance(ledger::accounts::balance(QStringLiteral("a"))), Credits::fromMicro(100'000));
        // A retried or duplicated answer pays nothing more.
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), first.id, answer(*broker, first, "x")), Verdict::Stale);
        QCOMPARE(*broker->ledger().balance(ledger::accounts::balance(QStringLiteral("a"))), Credits::fromMicro(100'000));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), second.id, answer(*broker, second, "y")), Verdict::Accepted);
        // The job is done: the unspent budget went back to its owner.
        status = *broker->status(jobId);
        QCOMPARE(status.state, QStringLiteral("finished"));
        QCOMPARE(status.escrow, Credits {});
        QCOMPARE(*broker->ledger().balance(ledger::accounts::balance(QStringLiteral("owner"))), Credits::fromMicro(99'800'000));
        QVERIFY(broker->ledger().checkInvariants().ok());

        // Each payment has a receipt the broker signed; a changed one does not verify.
        auto receipt = *broker->receipt(QStringLiteral("pay:%1/0/%2").arg(jobId).arg(first.task.shard));
        QVERIFY(verifyDocument(receipt).ok());
        QCOMPARE(receipt.value(QStringLiteral("amount")).toString(), QStringLiteral("0.1"));
        QCOMPARE(receipt.value(QStringLiteral("credit")).toString(), QStringLiteral("balance:a"));
        QCOMPARE(QByteArray::fromBase64(receipt.value(QStringLiteral("signer")).toString().toLatin1()), broker->signingKey());
        receipt.insert(QStringLiteral("amount"), QStringLiteral("100"));
        QVERIFY(!verifyDocument(receipt).ok());
        QVERIFY(!broker->receipt(QStringLiteral("pay:nothing")).ok());
    }

    void budgetsAndStakeAreEnforced()
    {
        auto broker = open(QStringLiteral("strict"), false);
        auto cheap = job(1, 1);
        cheap.budget = Credits::fromMicro(1);
        const auto tooCheap = broker->submit(cheap);
        QVERIFY(!tooCheap.ok());
        QVERIFY2(tooCheap.error().message.contains(QStringLiteral("do not pay for the training")),
            qPrintable(tooCheap.error().message));
        const auto broke = broker->submit(job(1, 1), QStringLiteral("nobody")); // no faucet, no balance
        QVERIFY(!broke.ok());
        QCOMPARE(broke.error().field, QStringLiteral("budget"));
        (void)broker->ledger().mint(
            ledger::accounts::balance(QStringLiteral("payer")), *Credits::fromCredits(100), QStringLiteral("buy"), 1);
        const auto jobId = broker->submit(job(1, 1), QStringLiteral("payer"));
        QVERIFY(jobId.ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("unstaked"))).ok());
        const auto refused = broker->assign(QStringLiteral("unstaked"));
        QVERIFY(!refused.ok());
        QCOMPARE(refused.error().field, QStringLiteral("stake"));
        QVERIFY(broker->cancel(*jobId).ok());
        QCOMPARE(*broker->ledger().balance(ledger::accounts::balance(QStringLiteral("payer"))), *Credits::fromCredits(100));
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    void resultsMustMatchASignedCommitment()
    {
        auto broker = open(QStringLiteral("commitments"));
        (void)*broker->submit(job(1, 1));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        const auto assignment = **broker->assign(QStringLiteral("a"));
        const auto result = answer(*broker, assignment, "w");
        // No commitment: refused.
        QCOMPARE(broker->acceptResult(QStringLiteral("a"), assignment.id, result).error().field, QStringLiteral("commitment"));
        // A commitment signed by another key: refused.
        const auto commitment = result.commitment();
        QJsonObject fields { { QStringLiteral("assignment"), assignment.id },
            { QStringLiteral("finalHash"), commitment.finalHash.toHex() },
            { QStringLiteral("chainRoot"), commitment.chainRoot.toHex() } };
        QVERIFY(!broker->commit(QStringLiteral("a"), signDocument(fields, SigningKeys::generate())).ok());
        // A commitment to other hashes binds the node: the real result no longer matches it.
        auto other = fields;
        other.insert(QStringLiteral("finalHash"), Digest::ofBytes("something else").toHex());
        QVERIFY(broker->commit(QStringLiteral("a"), signDocument(other, keysOf(QStringLiteral("a")))).ok());
        QVERIFY(broker->commit(QStringLiteral("a"), signDocument(fields, keysOf(QStringLiteral("a"))))
                    .ok()); // ignored: the first binds
        const auto refused = broker->acceptResult(QStringLiteral("a"), assignment.id, result);
        QVERIFY(!refused.ok());
        QVERIFY(refused.error().message.contains(QStringLiteral("does not match the node's commitment")));
    }

    void cancelledJobsHandOutNothing()
    {
        auto broker = open(QStringLiteral("cancel"));
        const auto jobId = *broker->submit(job());
        QVERIFY(broker->cancel(jobId).ok());
        QVERIFY(!broker->cancel(jobId).ok());
        QVERIFY(!broker->cancel(QStringLiteral("nope")).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(!broker->assign(QStringLiteral("a"))->has_value());
        QCOMPARE(broker->list()->size(), 1);
    }
};

QTEST_GUILESS_MAIN(BrokerTest)
#include "tst_broker.moc"
