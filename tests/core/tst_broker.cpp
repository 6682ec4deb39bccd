// The broker's state machine with a fake clock and stand-in arithmetic (a fake is fine here: the
// real arithmetic is tested in tests/compute and end to end in tests/e2e).

#include <core/broker/broker.h>
#include <core/broker/storemigration.h>
#include <core/capabilities.h>
#include <core/datasetchunks.h>
#include <core/ledger/logrecord.h>
#include <core/memoryestimate.h>
#include <core/pricing.h>
#include <core/signing.h>

#include <support/fakemath.h>
#include <support/teststore.h>

#include <QDir>
#include <QFile>
#include <QHash>

#include <QJsonArray>
#include <QTemporaryDir>
#include <QTest>

using namespace tessera::core;
using namespace tessera::core::broker;
using tessera::tests::FakeMath;

namespace {

class FakeClock final : public Clock {
public:
    std::int64_t now = 1'000'000;
    std::int64_t nowMs() const override { return now; }
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
    spec.verificationRate = 0.0;
    return spec;
}

// A portable, untied gpt of two blocks whose one shard is two stages of four micro-batches.
JobSpec pipelineJob()
{
    auto spec = job(1, 1);
    spec.dataset = DatasetSpec {};
    spec.dataset.builtin = QStringLiteral("fortunes");
    spec.model = ModelSpec {};
    spec.model.zoo = QStringLiteral("gpt");
    spec.model.layers = 2;
    spec.model.heads = 2;
    spec.model.width = 16;
    spec.model.context = 16;
    spec.model.tied = false;
    spec.training.determinism = TrainingSpec::Determinism::Portable;
    spec.training.batchSize = 8;
    spec.training.pipeline = { 2, 4 };
    return spec;
}

// Every tensor of pipelineJob()'s two-stage schedule relayed (10 steps of 4 micro-batches each way,
// activation and gradient bytes as given) for the stages `out` handed to `first` and `second`: the
// roots the two stages' results name.
std::pair<Digest, Digest> relayShard(Broker& broker, const QList<std::pair<QString, Assignment>>& out,
    const QByteArray& activation, const QByteArray& gradient = QByteArray(2048, 'g'))
{
    QList<StageTensor> zero, one;
    const auto a = Digest::ofBytes(activation), g = Digest::ofBytes(gradient);
    for (std::int64_t step = 0; step < 10; ++step) {
        for (std::int64_t micro = 0; micro < 4; ++micro) {
            const auto size = activation.size();
            if (!broker.relayTensor(
                    out[0].first, out[0].second.id, { 1, TensorKind::Activation, step, micro, 0, size }, activation)
                || !broker.relayTensor(
                    out[1].first, out[1].second.id, { 0, TensorKind::Gradient, step, micro, 0, size }, gradient))
                return {};
            zero += { { true, 1, TensorKind::Activation, step, micro, a }, { false, 1, TensorKind::Gradient, step, micro, g } };
            one += { { false, 0, TensorKind::Activation, step, micro, a }, { true, 0, TensorKind::Gradient, step, micro, g } };
        }
    }
    return { stageTensorsRoot(zero), stageTensorsRoot(one) };
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
    info.capabilities = ownCapabilities();
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
    result.runtimeProfile = assignment.task.portable ? PortableProfile : QStringLiteral("p"); // node()'s
    result.weightsSha256 = *broker.blobs().put(weights);
    result.finalHash = Digest::ofBytes(weights);
    result.checkpointHashes = { assignment.task.startWeights, Digest::ofBytes("mid"), result.finalHash };
    result.losses = { 1.0, 0.5 };
    return result;
}

// An honest node's answer (FakeMath's arithmetic). With `lieFrom` >= 1 the chain is honest up to
// checkpoint lieFrom - 1 and made up after it, and so are the weights.
ShardResult honest(Broker& broker, const Assignment& assignment, std::int64_t lieFrom = -1)
{
    const auto& task = assignment.task;
    ShardResult result;
    result.jobId = task.jobId;
    result.round = task.round;
    result.shard = task.shard;
    result.runtimeProfile = assignment.task.portable ? PortableProfile : QStringLiteral("p"); // node()'s
    result.checkpointHashes = { task.startWeights };
    for (std::int64_t k = 1; k < task.checkpointCount(); ++k)
        result.checkpointHashes.append(Digest::ofBytes(
            lieFrom >= 1 && k >= lieFrom ? QByteArray("made up ") + QByteArray::number(k) : FakeMath::state(task, k)));
    const QByteArray weights = lieFrom >= 1 ? QByteArray("made-up weights") : FakeMath::weights(task);
    result.weightsSha256 = *broker.blobs().put(weights);
    result.finalHash = Digest::ofBytes(weights);
    result.losses = { 1.0 };
    return result;
}

// A node's report that it could not train the assignment's shard.
ShardResult failure(const Assignment& assignment, const QString& why, ShardResult::Outcome outcome = ShardResult::Outcome::Failed)
{
    ShardResult result;
    result.jobId = assignment.task.jobId;
    result.round = assignment.task.round;
    result.shard = assignment.task.shard;
    result.outcome = outcome;
    result.failure = why;
    return result;
}

// What a node does with a finished shard: commit to it (signed), then reveal it.
Result<Acceptance> deliver(Broker& broker, const QString& nodeId, const QString& assignmentId, const ShardResult& result)
{
    if (result.outcome == ShardResult::Outcome::Completed) {
        const auto document = signDocument(result.commitmentDocument(assignmentId), keysOf(nodeId));
        (void)broker.commit(nodeId, document); // refusals show up as the result's error
    }
    return broker.acceptResult(nodeId, assignmentId, result);
}

} // namespace

class BrokerTest : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir { QStringLiteral("/tmp/tst_broker_XXXXXX") };
    FakeClock m_clock;
    FakeMath m_math;
    std::vector<std::unique_ptr<BlobStore>> m_blobs; // each broker's, outliving it

    // Sampling is off here; the verification tests below turn it on.
    std::unique_ptr<Broker> open(const QString& name = QStringLiteral("b"), bool faucet = true)
    {
        Broker::Options options;
        options.sampling = { 0, 0.0 };
        options.faucet = faucet;
        return open(name, options);
    }

    static Broker::Options verifyingOptions()
    {
        Broker::Options options;
        options.faucet = true;
        options.selfVerifyAfterMs = -1;
        options.disputeTimeoutMs = 5000;
        options.randomSeed = 7;
        return options;
    }

    std::unique_ptr<Broker> openVerifying(const QString& name) { return open(name, verifyingOptions()); }

    // A verifying broker with one job of one 15-step shard (checkpoints at 0, 5, 10, 15), nodes a
    // and b registered, and the shard assigned to a: the start of every dispute case.
    struct OneShard {
        std::unique_ptr<Broker> broker;
        QString jobId;
        Assignment first;
    };
    enum class Determinism { Fast, Portable };
    OneShard oneShardForAAndB(
        const QString& name, Broker::Options options = verifyingOptions(), Determinism determinism = Determinism::Fast)
    {
        OneShard setup { open(name, options), {}, {} };
        auto spec = job(1, 1);
        spec.training.localSteps = 15;
        if (determinism == Determinism::Portable)
            spec.training.determinism = TrainingSpec::Determinism::Portable;
        setup.jobId = *setup.broker->submit(spec);
        for (const auto* id : { "a", "b" }) {
            if (!setup.broker->registerNode(node(QString::fromLatin1(id))).ok())
                qFatal("node %s could not register", id);
        }
        setup.first = **setup.broker->assign(QStringLiteral("a"));
        return setup;
    }

    std::unique_ptr<Broker> open(const QString& name, Broker::Options options)
    {
        options.minDeadlineMs = 10'000;
        options.maxShardFailures = 2;
        options.maxAssignmentsPerNode = 4; // the tests hand one node several shards
        return openAsIs(name, options);
    }

    std::unique_ptr<Broker> openAsIs(const QString& name, const Broker::Options& options)
    {
        auto blobs = Broker::openBlobs(m_dir.filePath(name));
        if (!blobs)
            qFatal("%s", qPrintable(blobs.error().toString()));
        Broker::Options withStore = options;
        if (withStore.database.isEmpty())
            withStore.database = tessera::tests::TestStore::databaseFor(m_dir.filePath(name));
        auto broker = Broker::open(m_dir.filePath(name), **blobs, m_math, m_clock, withStore);
        m_blobs.push_back(std::move(*blobs));
        if (!broker)
            qFatal("%s", qPrintable(broker.error().toString()));
        return std::move(broker).value();
    }

    // A new blob store in the data folder `name`, outliving the brokers that use it.
    BlobStore& blobsAt(const QString& name)
    {
        m_blobs.push_back(std::move(Broker::openBlobs(m_dir.filePath(name))).value());
        return *m_blobs.back();
    }

    // Options of a broker of the network `network` (several brokers on one PostgreSQL database):
    // a faucet, no sampling, 4 shards a node.
    Broker::Options networkOptions(const QString& network)
    {
        Broker::Options options;
        options.sampling = { 0, 0.0 };
        options.faucet = true;
        options.maxAssignmentsPerNode = 4;
        options.database = tessera::tests::TestStore::databaseFor(m_dir.filePath(network));
        return options;
    }

    // A broker on a data folder of its own and the blob store `blobs` (brokers of one network that
    // share their blobs).
    std::unique_ptr<Broker> openOn(const QString& name, BlobStore& blobs, const Broker::Options& options)
    {
        auto broker = Broker::open(m_dir.filePath(name), blobs, m_math, m_clock, options);
        if (!broker)
            qFatal("%s", qPrintable(broker.error().toString()));
        return std::move(broker).value();
    }

private Q_SLOTS:
    void initTestCase()
    {
        if (QString why; !tessera::tests::TestStore::ready(why))
            QSKIP(qPrintable(why));
    }
    void cleanupTestCase() { tessera::tests::TestStore::shutdown(); }

    void roundsAdvanceWhenEveryShardIsIn()
    {
        auto broker = open(QStringLiteral("rounds"));
        const auto jobId = *broker->submit(job(2, 3));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("b"))).ok());

        QList<Digest> uploads;
        for (int round = 0; round < 2; ++round) {
            QList<Assignment> out;
            for (const auto* id : { "a", "b", "a" })
                out.append(**broker->assign(QString::fromLatin1(id)));
            QVERIFY(!broker->assign(QStringLiteral("b"))->has_value()); // all three are out, in time
            QCOMPARE(out[0].task.round, round);
            // Results arrive out of order; aggregation still goes by shard.
            for (int i : { 2, 0, 1 }) {
                const auto result = answer(*broker, out[i], QByteArray::number(round) + QByteArray::number(out[i].task.shard));
                uploads.append(result.weightsSha256);
                QCOMPARE(*deliver(*broker, QString::fromLatin1(i == 1 ? "b" : "a"), out[i].id, result), Acceptance::Accepted);
            }
        }
        QCOMPARE(m_math.aggregationOrders.last(), (QList<std::int64_t> { 0, 1, 2 }));
        const auto status = *broker->status(jobId);
        QCOMPARE(status.state, JobState::Finished);
        QCOMPARE(status.history.size(), 2);
        QCOMPARE(status.history[1].testAccuracy, 0.9);
        QCOMPARE(status.history[0].trainLoss, 0.75);
        QCOMPARE(*broker->blobs().read(status.weightsBlob), QByteArray("w0|000102|101112"));
        QVERIFY(!broker->assign(QStringLiteral("a"))->has_value());
        // An aggregated round's shard uploads are deleted; every round's weights stay.
        for (const auto& digest : uploads)
            QVERIFY(!broker->blobs().contains(digest));
        for (const auto& round : status.history)
            QVERIFY(broker->blobs().contains(round.weightsBlob));
    }

    // training.evaluateEvery: the broker evaluates every e-th round and the last, nothing else; the
    // history lists the rounds it evaluated.
    // A shard's stages go out together to waiting nodes; the broker relays their tensors and takes
    // a stage's result only with the root of what it relayed; a stage's result is held, unpaid,
    // until every stage of its shard has answered, then each is paid and the round aggregates the
    // stages merged. A stage given back drops its partner's held result, and the shard's stages go
    // out together again.
    void aPipelinesStagesArePaidWhenEveryStageAnswered()
    {
        Broker::Options options;
        options.sampling = { 0, 0.0 };
        options.faucet = true;
        auto broker = open(QStringLiteral("pipeline-on"), options);
        const auto quote = broker->quoteFor(pipelineJob());
        QVERIFY(quote.ok());
        QCOMPARE(quote->shards, 2); // one shard of two stage tasks
        const auto jobId = *broker->submit(pipelineJob(), QStringLiteral("k"));
        for (const auto* id : { "a", "b", "c", "d", "e" }) {
            auto info = node(QString::fromLatin1(id));
            info.capabilities.append(capability::Pipeline);
            QVERIFY(broker->registerNode(info).ok());
        }
        QVERIFY(!broker->assign(QStringLiteral("a"))->has_value()); // never one stage alone
        QVERIFY(broker->assignPipeline({ QStringLiteral("a") })->isEmpty()); // one node of two
        auto out = *broker->assignPipeline({ QStringLiteral("a"), QStringLiteral("b") });
        QCOMPARE(out.size(), 2);
        QCOMPARE(out[0].first, QStringLiteral("a"));
        QCOMPARE(out[1].second.task.stage, 1);
        QCOMPARE(out[1].second.task.shard, 0);
        QVERIFY(broker->assignPipeline({ QStringLiteral("c") })->isEmpty());
        // Stage 1 gives its task back: stage 0 is stopped, and the shard goes out again (not to b
        // for a while).
        QCOMPARE(*broker->acceptResult(QStringLiteral("b"), out[1].second.id,
                     failure(out[1].second, QStringLiteral("disk full"), ShardResult::Outcome::Returned)),
            Acceptance::Failed);
        QVERIFY(broker
                    ->relayTensor(QStringLiteral("a"), out[0].second.id, { 1, TensorKind::Activation, 0, 0, 0, 2048 },
                        QByteArray(2048, 'x'))
                    .error()
                    .field
            == QStringLiteral("assignment"));
        out = *broker->assignPipeline({ QStringLiteral("b"), QStringLiteral("a"), QStringLiteral("c") });
        QCOMPARE(out.size(), 2);
        QCOMPARE(out[0].first, QStringLiteral("a"));
        QCOMPARE(out[1].first, QStringLiteral("c"));
        const QByteArray activation(2048, 'x');
        auto forward = broker->relayTensor(
            QStringLiteral("a"), out[0].second.id, { 1, TensorKind::Activation, 0, 0, 0, 2048 }, activation);
        QVERIFY(forward.ok());
        QCOMPARE(forward->node, QStringLiteral("c"));
        // A stage that answers before it received what its schedule sends it signed a lie.
        const auto digest = Digest::ofBytes(activation);
        auto early = answer(*broker, out[1].second, "stage1");
        early.tensorsRoot = stageTensorsRoot({ { false, 0, TensorKind::Activation, 0, 0, digest } });
        QCOMPARE(deliver(*broker, QStringLiteral("c"), out[1].second.id, early).error().field, QStringLiteral("tensorsRoot"));
        QCOMPARE(broker->account(QStringLiteral("c"))->value(QStringLiteral("stake")).toString(), QStringLiteral("5"));
        out = *broker->assignPipeline({ QStringLiteral("a"), QStringLiteral("b"), QStringLiteral("c"), QStringLiteral("d") });
        QCOMPARE(out.size(), 2);
        QCOMPARE(out[0].first, QStringLiteral("a"));
        QCOMPARE(out[1].first, QStringLiteral("d")); // b gave it back a moment ago; c lost its stake
        const auto [firstRoot, secondRoot] = relayShard(*broker, out, activation);
        QVERIFY(!firstRoot.isNull());
        auto first = answer(*broker, out[0].second, "stage0");
        auto second = answer(*broker, out[1].second, "stage1");
        first.tensorsRoot = firstRoot;
        second.tensorsRoot = secondRoot;
        // Stage 0 answers (held); stage 1's root is not what the broker relayed: refused, the
        // pipeline stopped, stage 0's held result dropped (its node told so), and out again.
        (void)broker->takeNotices();
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), out[0].second.id, first), Acceptance::Held);
        auto lying = second;
        lying.tensorsRoot = stageTensorsRoot({});
        QCOMPARE(deliver(*broker, QStringLiteral("d"), out[1].second.id, lying).error().field, QStringLiteral("tensorsRoot"));
        const auto notices = broker->takeNotices();
        QVERIFY(std::any_of(notices.begin(), notices.end(), [&](const Notice& notice) {
            return notice.nodeId == QStringLiteral("a") && notice.body.value(QStringLiteral("state")).toString() == u"rejected";
        }));
        out = *broker->assignPipeline({ QStringLiteral("c"), QStringLiteral("a"), QStringLiteral("d"), QStringLiteral("e") });
        QCOMPARE(out.size(), 2);
        QCOMPARE(out[1].first, QStringLiteral("e"));
        const auto [zeroRoot, oneRoot] = relayShard(*broker, out, activation);
        QVERIFY(!zeroRoot.isNull());
        // Every activation and gradient of the pipeline has the first one's size.
        QCOMPARE(broker
                     ->relayTensor(
                         QStringLiteral("e"), out[1].second.id, { 0, TensorKind::Gradient, 0, 0, 0, 1024 }, QByteArray(1024, 'g'))
                     .error()
                     .field,
            QStringLiteral("size"));
        first = answer(*broker, out[0].second, "stage0");
        second = answer(*broker, out[1].second, "stage1");
        first.tensorsRoot = zeroRoot;
        second.tensorsRoot = oneRoot;
        const auto balance = [&](const char* id) {
            return broker->account(QString::fromLatin1(id))->value(QStringLiteral("balance")).toString();
        };
        const auto before = balance("a");
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), out[0].second.id, first), Acceptance::Held);
        QCOMPARE(balance("a"), before); // held: its partner has not answered
        // The job's status lists who holds each stage, and which answered; it counts stage tasks.
        const auto running = *broker->status(jobId);
        QCOMPARE(running.shards, 2);
        QCOMPARE(running.pipelines.size(), 1);
        const auto stages = running.pipelines[0].toObject().value(QStringLiteral("stages")).toArray();
        QCOMPARE(stages.size(), 2);
        QCOMPARE(stages[1].toObject().value(QStringLiteral("node")).toString(), QStringLiteral("e"));
        QVERIFY(stages[0].toObject().value(QStringLiteral("answered")).toBool());
        QVERIFY(!stages[1].toObject().value(QStringLiteral("answered")).toBool());
        QCOMPARE(JobStatus::fromJson(running.toJson()).pipelines, running.pipelines);
        QCOMPARE(broker->status(jobId)->state, JobState::Running);
        QCOMPARE(*deliver(*broker, QStringLiteral("e"), out[1].second.id, second), Acceptance::Held);
        QVERIFY(balance("a") != before);
        const auto status = *broker->status(jobId);
        QCOMPARE(status.state, JobState::Finished);
        QCOMPARE(*broker->blobs().read(status.weightsBlob), QByteArray("w0|stage0+stage1")); // merged in stage order
    }

    void onlyTheRoundsAJobAsksForAreEvaluated()
    {
        auto broker = open(QStringLiteral("evaluate-every"));
        auto spec = job(5, 1);
        spec.training.evaluateEvery = 2;
        const auto jobId = *broker->submit(spec);
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        const int before = m_math.evaluations;
        for (int round = 0; round < 5; ++round) {
            const auto out = **broker->assign(QStringLiteral("a"));
            QCOMPARE(*deliver(*broker, QStringLiteral("a"), out.id, honest(*broker, out)), Acceptance::Accepted);
        }
        const auto status = *broker->status(jobId);
        QCOMPARE(status.state, JobState::Finished);
        QCOMPARE(m_math.evaluations - before, 3);
        QList<std::int64_t> listed;
        for (const auto& round : status.history)
            listed.append(round.round);
        QCOMPARE(listed, (QList<std::int64_t> { 1, 3, 4 }));
        QVERIFY(status.history[0].finishedAt > 0); // when the round was aggregated, on the broker's clock
        QCOMPARE(JobStatus::fromJson(status.toJson()).history[0].finishedAt, status.history[0].finishedAt);
        // A restart owes none of the skipped rounds an evaluation.
        broker.reset();
        broker = open(QStringLiteral("evaluate-every"));
        QCOMPARE(m_math.evaluations - before, 3);
    }

    // The new weights go straight into the blob store's staging folder. Where the broker cannot
    // write them (its own disk), the round waits and is tried again on a later tick: the job is
    // not failed for it, and nothing is lost.
    void aRoundWhoseWeightsCannotBeWrittenWaitsAndIsNotFailed()
    {
        auto broker = open(QStringLiteral("unwritable"));
        const auto jobId = *broker->submit(job(1, 1));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        const auto assignment = **broker->assign(QStringLiteral("a"));
        const QString staging = m_blobs.back()->stagingDirectory();
        QVERIFY(QDir(staging).removeRecursively());
        QFile blocker(staging); // a file where the folder should be: nothing can be written there
        QVERIFY(blocker.open(QIODevice::WriteOnly));
        blocker.close();
        const auto result = answer(*broker, assignment, "w");
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), assignment.id, result), Acceptance::Accepted);
        QCOMPARE(broker->status(jobId)->state, JobState::Running);
        QCOMPARE(broker->status(jobId)->history.size(), 0);
        broker->tick();
        QCOMPARE(broker->status(jobId)->state, JobState::Running);
        QVERIFY(QFile::remove(staging));
        broker->tick();
        QCOMPARE(broker->status(jobId)->state, JobState::Finished);
        QCOMPARE(broker->status(jobId)->history.size(), 1);
    }

    // A job's disk does not grow with its rounds (docs/BROKER.md, "Disk"): the newest keepRounds
    // rounds' weights, the initial and the final ones, and the rounds its spec asks for
    // (keepWeightsEvery) stay; every other round's weights are collected once it falls out.
    void oldRoundsWeightsAreCollected()
    {
        Broker::Options options;
        options.sampling = { 0, 0.0 };
        options.faucet = true;
        options.keepRounds = 2;
        auto broker = open(QStringLiteral("retention"), options);
        auto spec = job(8, 1);
        spec.training.keepWeightsEvery = 3;
        const auto jobId = *broker->submit(spec);
        const auto initial = broker->status(jobId)->weightsBlob;
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        for (int round = 0; round < 8; ++round) {
            const auto shard = **broker->assign(QStringLiteral("a"));
            QCOMPARE(shard.task.round, round);
            QVERIFY(broker->blobs().contains(shard.startWeightsBlob)); // a round's start is always there
            QCOMPARE(*deliver(*broker, QStringLiteral("a"), shard.id, answer(*broker, shard, "k" + QByteArray::number(round))),
                Acceptance::Accepted);
        }
        const auto status = *broker->status(jobId);
        QCOMPARE(status.state, JobState::Finished);
        QCOMPARE(status.history.size(), 8);
        QVERIFY(broker->blobs().contains(initial));
        QVERIFY(broker->blobs().contains(status.weightsBlob)); // the final weights
        for (int round = 0; round < 8; ++round) {
            const bool kept = round >= 6 || (round + 1) % 3 == 0; // the newest two; rounds 3 and 6 asked for
            QVERIFY2(broker->blobs().contains(status.history[round].weightsBlob) == kept, qPrintable(QString::number(round)));
        }
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // A SUBMIT named by a request id creates one job however often it is repeated (a client that
    // gave up waiting and asked again): the same job and one escrow; the same name with another
    // spec is refused, and another owner's same name is another job.
    void aRepeatedSubmitGivesTheFirstJob()
    {
        auto broker = open(QStringLiteral("repeat"), false);
        const auto owner = ledger::accounts::balance(QStringLiteral("alice"));
        (void)broker->ledger().mint(owner, *Credits::fromCredits(250), QStringLiteral("buy alice"), 1);
        (void)broker->ledger().mint(
            ledger::accounts::balance(QStringLiteral("bob")), *Credits::fromCredits(250), QStringLiteral("buy bob"), 1);
        const auto first = broker->submit(job(), QStringLiteral("alice"), QStringLiteral("try-1"));
        QVERIFY(first.ok());
        const int built = m_math.initialBuilds;
        const auto again = broker->submit(job(), QStringLiteral("alice"), QStringLiteral("try-1"));
        QVERIFY(again.ok());
        QCOMPARE(*again, *first);
        std::optional<Result<QString>> answered;
        QVERIFY(broker
                    ->submitInBackground(
                        job(), QStringLiteral("alice"), QStringLiteral("try-1"), [&](Result<QString> id) { answered = id; })
                    .ok());
        QVERIFY(answered && answered->ok());
        QCOMPARE(**answered, *first);
        QCOMPARE(m_math.initialBuilds, built); // nothing was built again
        QCOMPARE(*broker->ledger().balance(owner), *Credits::fromCredits(150)); // one escrow of 100
        auto other = job();
        other.name = QStringLiteral("another job");
        const auto clash = broker->submit(other, QStringLiteral("alice"), QStringLiteral("try-1"));
        QVERIFY(!clash.ok());
        QCOMPARE(clash.error().field, QStringLiteral("requestId"));
        const auto bobs = broker->submit(job(), QStringLiteral("bob"), QStringLiteral("try-1"));
        QVERIFY2(bobs.ok(), qPrintable(bobs.ok() ? QString() : bobs.error().toString()));
        QVERIFY(*bobs != *first);
        const auto fresh = broker->submit(job(), QStringLiteral("alice"), QStringLiteral("try-2"));
        QVERIFY(fresh.ok());
        QVERIFY(*fresh != *first);
        QCOMPARE(*broker->ledger().balance(owner), *Credits::fromCredits(50));
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // With int8 compression (the default) each round from round 1 on can be fetched as its change
    // from the previous round's weights; that change is kept while it is the way to the round's
    // weights (a restart too) and collected after. Without compression there is none.
    void eachRoundAfterTheFirstComesAsAChangeFromThePreviousRound()
    {
        QList<Digest> changes;
        {
            auto broker = open(QStringLiteral("change"));
            const auto jobId = *broker->submit(job(3, 1));
            QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
            const auto first = **broker->assign(QStringLiteral("a"));
            QVERIFY(!first.startChange);
            const auto w0 = first.startWeightsBlob;
            QCOMPARE(*deliver(*broker, QStringLiteral("a"), first.id, answer(*broker, first, "r0")), Acceptance::Accepted);
            const auto second = **broker->assign(QStringLiteral("a"));
            QVERIFY(second.startChange);
            QCOMPARE(second.startChange->base, w0);
            QCOMPARE(*broker->blobs().read(second.startChange->blob), "change:" + *broker->blobs().read(second.startWeightsBlob));
            changes.append(second.startChange->blob);
        } // a restart between rounds
        auto broker = open(QStringLiteral("change"));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        const auto second = **broker->assign(QStringLiteral("a"));
        QCOMPARE(second.startChange->blob, changes[0]);
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), second.id, answer(*broker, second, "r1")), Acceptance::Accepted);
        const auto third = **broker->assign(QStringLiteral("a"));
        QCOMPARE(third.startChange->base, second.startWeightsBlob);
        QVERIFY(broker->blobs().contains(third.startChange->blob));
        QVERIFY(!broker->blobs().contains(changes[0]));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), third.id, answer(*broker, third, "r2")), Acceptance::Accepted);
        QVERIFY(!broker->blobs().contains(third.startChange->blob)); // the job is over

        auto plain = job(2, 1);
        plain.aggregation.compression = Compression::None;
        (void)*broker->submit(plain);
        const auto a = **broker->assign(QStringLiteral("a"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a.id, answer(*broker, a, "p0")), Acceptance::Accepted);
        QVERIFY(!(**broker->assign(QStringLiteral("a"))).startChange);
    }

    // Bytes a job names (here a shard's weights equal to the round's own) are never collected.
    void uploadsThatAJobNamesStay()
    {
        auto broker = open(QStringLiteral("named"));
        const auto jobId = *broker->submit(job(2, 1));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        const auto first = **broker->assign(QStringLiteral("a"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), first.id, answer(*broker, first, "r0")), Acceptance::Accepted);
        const auto start = broker->status(jobId)->weightsBlob; // round 1 starts from it
        const auto second = **broker->assign(QStringLiteral("a"));
        const auto same = answer(*broker, second, *broker->blobs().read(start));
        QCOMPARE(same.weightsSha256, start);
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), second.id, same), Acceptance::Accepted);
        QCOMPARE(broker->status(jobId)->state, JobState::Finished);
        QVERIFY(broker->blobs().contains(start));
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
        QCOMPARE(*deliver(*broker, QStringLiteral("fast"), second.id, answer(*broker, second, "fast")), Acceptance::Accepted);
        // The straggler's late answer is not counted twice.
        QCOMPARE(*deliver(*broker, QStringLiteral("slow"), first.id, answer(*broker, first, "slow")), Acceptance::Stale);
        QCOMPARE(*deliver(*broker, QStringLiteral("fast"), second.id, answer(*broker, second, "fast")), Acceptance::Stale);
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
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), out[3].id, answer(*broker, out[3], "w")), Acceptance::Accepted);
    }

    // A shard that failed on every node that could run it fails its job only once the broker's own
    // run fails too: nodes' reports alone never end a job (docs/VERIFICATION.md, "Failures").
    void failedShardsGoElsewhereAndEndTheJobWhenTheBrokerConfirms()
    {
        auto broker = open(QStringLiteral("failures"));
        const auto jobId = *broker->submit(job(1, 1));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("b"))).ok());
        const int replays = m_math.replays;
        for (const auto* id : { "a", "b" }) {
            const auto assignment = **broker->assign(QString::fromLatin1(id));
            const auto failed = failure(assignment, QStringLiteral("loss became NaN"));
            m_math.replayFails = true;
            QCOMPARE(*deliver(*broker, QString::fromLatin1(id), assignment.id, failed), Acceptance::Failed);
            m_math.replayFails = false;
        }
        QCOMPARE(m_math.replays, replays + 1); // once, when no other node is left to try
        const auto status = *broker->status(jobId);
        QCOMPARE(status.state, JobState::Failed);
        QVERIFY(status.failure.contains(QStringLiteral("NaN")));
        QVERIFY2(status.failure.contains(QStringLiteral("on the broker")), qPrintable(status.failure));
        // Their record follows them: a node that failed ranks below its benchmark.
        QVERIFY(broker->schedulingScore(QStringLiteral("a")) < Broker::expectedSamplesPerSecond(node(QStringLiteral("a"))));
        const auto known = *broker->nodes();
        QCOMPARE(known.size(), 2);
        QCOMPARE(known[0].value(QStringLiteral("shardsFailed")).toInt(), 1);
        QVERIFY(!broker->assign(QStringLiteral("a"))->has_value());
    }

    // The job owner's code failing in the nodes' sandboxes (here: a hang stopped at the time limit)
    // is the job's failure: the shard goes elsewhere and the job fails as above, but neither node's
    // record holds it.
    void sandboxFailuresCountAgainstTheJobNotTheNodes()
    {
        auto broker = open(QStringLiteral("sandboxed"));
        const auto jobId = *broker->submit(job(1, 1));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("b"))).ok());
        const double before = broker->schedulingScore(QStringLiteral("a"));
        for (const auto* id : { "a", "b" }) {
            const auto assignment = **broker->assign(QString::fromLatin1(id));
            const auto failed
                = failure(assignment, QStringLiteral("time limit: the shard ran past its 40.0 s and its worker was stopped"));
            m_math.replayFails = true;
            QCOMPARE(*deliver(*broker, QString::fromLatin1(id), assignment.id, failed), Acceptance::Failed);
            m_math.replayFails = false;
        }
        const auto status = *broker->status(jobId);
        QCOMPARE(status.state, JobState::Failed);
        QVERIFY2(status.failure.contains(QStringLiteral("time limit")), qPrintable(status.failure));
        const auto known = *broker->nodes();
        for (const auto& record : known)
            QCOMPARE(record.value(QStringLiteral("shardsFailed")).toInt(), 0);
        QCOMPARE(broker->schedulingScore(QStringLiteral("a")), before);
        // Only those reasons: a node cannot dress any failure up as the job's.
        ShardResult other;
        other.outcome = ShardResult::Outcome::Failed;
        other.failure = QStringLiteral("loss became NaN (time limit: no)");
        QVERIFY(!other.failedInSandbox());
        other.failure = QStringLiteral("out of memory: the shard passed its 4096 MiB (Compute/MaxMemoryMiB)");
        QVERIFY(other.failedInSandbox());
        other.outcome = ShardResult::Outcome::Returned;
        QVERIFY(!other.failedInSandbox());
    }

    // However often a node asks, and however slow it claims to be, it holds at most
    // Options::maxAssignmentsPerNode shards, each due within Options::maxDeadlineMs; the rest go to others.
    void noClaimCapturesARound()
    {
        Broker::Options options;
        options.faucet = true;
        options.sampling = { 0, 0.0 };
        auto broker = openAsIs(QStringLiteral("capture"), options);
        const auto jobId = *broker->submit(job(1, 4));
        auto greedy = node(QStringLiteral("greedy"));
        greedy.benchmarkSamplesPerSecond = 2.5e-8;
        QVERIFY(broker->registerNode(greedy).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("honest"))).ok());
        QList<Assignment> held;
        for (int i = 0; i < 10; ++i) {
            if (auto next = *broker->assign(QStringLiteral("greedy")))
                held.append(*next);
        }
        QCOMPARE(held.size(), options.maxAssignmentsPerNode);
        // 640 samples of this small model's FLOPs at no less than 50 benchmark samples a second, times
        // 4: under the 30 s floor, so 30 s, not 406 years.
        const double seconds = 640.0 * trainingFlopsPerSample(job(1, 4), 0) / (50.0 * benchmarkFlopsPerSample());
        QVERIFY(4.0 * seconds < 30.0);
        for (const auto& assignment : held)
            QCOMPARE(assignment.deadlineMs, m_clock.now + options.minDeadlineMs);
        for (int i = 0; i < 2; ++i) {
            const auto next = **broker->assign(QStringLiteral("honest"));
            m_clock.now += 1'000;
            QCOMPARE(*deliver(*broker, QStringLiteral("honest"), next.id, honest(*broker, next)), Acceptance::Accepted);
        }
        // Greedy's shards are out far longer than the deadline floor: late, they go to the honest node.
        QVERIFY(!broker->assign(QStringLiteral("honest"))->has_value());
        m_clock.now += 60'000;
        for (int i = 0; i < 2; ++i) {
            const auto next = broker->assign(QStringLiteral("honest"));
            QVERIFY(next.ok() && next->has_value());
            QCOMPARE(*deliver(*broker, QStringLiteral("honest"), (*next)->id, honest(*broker, **next)), Acceptance::Accepted);
        }
        QCOMPARE(broker->status(jobId)->state, JobState::Finished);
    }

    // One node that reports failures cannot fail anyone's job: the shard goes to a different node;
    // when no other node could take it, the broker runs it itself, and a failure it disproves costs
    // the liar stake (and with too little left, its work).
    void aLiarsFailuresCostItsStakeAndFailNoJob()
    {
        Broker::Options options = verifyingOptions();
        options.sampling = { 0, 0.0 };
        auto broker = open(QStringLiteral("falsefailures"), options);
        const auto jobId = *broker->submit(job(1, 1));
        QVERIFY(broker->registerNode(node(QStringLiteral("liar"))).ok());
        const auto staked = broker->account(QStringLiteral("liar"))->value(QStringLiteral("stake")).toString();
        const auto assignment = **broker->assign(QStringLiteral("liar"));
        const auto failed = failure(assignment, QStringLiteral("CUDA error (made up)"));
        const int replays = m_math.replays;
        QCOMPARE(*deliver(*broker, QStringLiteral("liar"), assignment.id, failed), Acceptance::Failed);
        QCOMPARE(m_math.replays, replays + 1);
        // The broker's own run is the shard's result: the job goes on (here: finishes) without the liar.
        QCOMPARE(broker->status(jobId)->state, JobState::Finished);
        QVERIFY(broker->account(QStringLiteral("liar"))->value(QStringLiteral("stake")).toString() != staked);
        QVERIFY(!broker->assign(QStringLiteral("liar")).ok()); // too little stake left to take work
        QVERIFY(!*broker->ledger().hasCause(QStringLiteral("pay:%1/0/0").arg(jobId)));
        QVERIFY(broker->ledger().checkInvariants().ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("honest"))).ok());

        // On another runtime profile (another device), a failure the broker's run does not repeat
        // may be that machine's own: recorded, not slashed.
        const auto otherJob = *broker->submit(job(1, 1));
        auto gpu = node(QStringLiteral("gpu"));
        gpu.runtimeProfile = QStringLiteral("p;device=cuda");
        QVERIFY(broker->registerNode(gpu).ok());
        broker->nodeLost(QStringLiteral("honest"));
        const auto gpuStake = broker->account(QStringLiteral("gpu"))->value(QStringLiteral("stake")).toString();
        const auto onGpu = **broker->assign(QStringLiteral("gpu"));
        QCOMPARE(*deliver(*broker, QStringLiteral("gpu"), onGpu.id, failure(onGpu, QStringLiteral("CUDA out of memory"))),
            Acceptance::Failed);
        QCOMPARE(broker->account(QStringLiteral("gpu"))->value(QStringLiteral("stake")).toString(), gpuStake);
        QCOMPARE(broker->status(otherJob)->state, JobState::Finished); // with the broker's run
    }

    // A TorchScript job's initial weights (its owner's code) are built in the background while the
    // broker serves others; the owner gets its answer from pollSubmits(), has one such submit at a
    // time, and nothing is escrowed for a job whose weights could not be built.
    void aJobsInitialWeightsAreBuiltInTheBackground()
    {
        auto broker = open(QStringLiteral("background"));
        FakeMath jobCode;
        broker->setJobCodeMath(&jobCode);
        QFile model(QStringLiteral(TESSERA_SOURCE_DIR "/fuzz/corpus/modelarchive/linear.pt"));
        QVERIFY(model.open(QIODevice::ReadOnly));
        auto scripted = job(1, 1);
        scripted.model = ModelSpec {};
        scripted.model.source = ModelSpec::Source::TorchScript;
        scripted.model.scriptSha256 = *broker->blobs().put(model.readAll());
        std::optional<Result<QString>> answer, repeated;
        QVERIFY(broker
                    ->submitInBackground(
                        scripted, QStringLiteral("owner"), QStringLiteral("r1"), [&](Result<QString> id) { answer = id; })
                    .ok());
        const bool building = broker->submitsInBackground() > 0; // else the first was answered already
        const auto second = broker->submitInBackground(scripted, QStringLiteral("owner"), {}, [](Result<QString>) {});
        if (building)
            QVERIFY(!second.ok());
        // The same submit again (its client gave up waiting): it hears the first one's answer.
        QVERIFY(broker
                    ->submitInBackground(
                        scripted, QStringLiteral("owner"), QStringLiteral("r1"), [&](Result<QString> id) { repeated = id; })
                    .ok());
        QVERIFY(QTest::qWaitFor(
            [&] {
                broker->pollSubmits();
                return answer.has_value() && repeated.has_value();
            },
            10'000));
        QVERIFY2(answer->ok(), qPrintable(answer->ok() ? QString() : answer->error().toString()));
        QVERIFY(repeated->ok());
        QCOMPARE(**repeated, **answer);
        QCOMPARE(broker->status(**answer)->state, JobState::Running);
        QCOMPARE(jobCode.initialBuilds, 1 + int(second.ok()));
        // A zoo model is Tessera's own code: built at once, answered before submitInBackground returns.
        answer.reset();
        QVERIFY(
            broker->submitInBackground(job(1, 1), QStringLiteral("other"), {}, [&](Result<QString> id) { answer = id; }).ok());
        QVERIFY(answer && answer->ok());
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // Uploads no job names are bounded per uploader and removed once they have stayed unnamed for
    // Options::unnamedUploadMs; a named one stays and no longer counts.
    void unnamedUploadsAreBoundedPerUploaderAndCollected()
    {
        Broker::Options options;
        options.faucet = true;
        options.maxUnnamedUploadBytes = 1000;
        options.unnamedUploadMs = 60'000;
        auto broker = open(QStringLiteral("uploads"), options);
        const auto junk = *broker->blobs().put(QByteArray(600, 'j'));
        QVERIFY(broker->recordUpload(junk, QStringLiteral("k"), 600).ok());
        const auto jobId = *broker->submit(job(1, 1), QStringLiteral("k"));
        const auto weights = broker->status(jobId)->weightsBlob;
        QVERIFY(broker->recordUpload(weights, QStringLiteral("k"), 300).ok());
        QVERIFY(broker->admitUpload(QStringLiteral("k"), 100).ok());
        const auto refused = broker->admitUpload(QStringLiteral("k"), 101);
        QVERIFY(!refused.ok());
        QVERIFY2(
            refused.error().message.contains(QStringLiteral("Broker/MaxUnnamedUploadMiB")), qPrintable(refused.error().message));
        QVERIFY(broker->admitUpload(QStringLiteral("other"), 1000).ok()); // each uploader its own
        m_clock.now += 59'000;
        broker->tick();
        QVERIFY(broker->blobs().contains(junk));
        QVERIFY(!broker->admitUpload(QStringLiteral("k"), 401).ok()); // the named one no longer counts; the junk does
        QVERIFY(broker->admitUpload(QStringLiteral("k"), 400).ok());
        m_clock.now += 6'000; // collections run a tenth of the time apart
        broker->tick();
        QVERIFY(!broker->blobs().contains(junk));
        QVERIFY(broker->blobs().contains(weights));
        QVERIFY(broker->admitUpload(QStringLiteral("k"), 1000).ok());
    }

    // A chunked dataset (docs/JOBS.md, "Chunked datasets"): the broker checks the manifest against
    // the job and its store, hands each node the chunks its shard reads (and only those may it
    // read), and once the job names the chunks they are neither collected nor count as uploads.
    void aChunkedDatasetIsCheckedAndItsChunksGoOnlyWhereTheyAreRead()
    {
        Broker::Options options;
        options.faucet = true;
        options.maxUnnamedUploadBytes = 10'000;
        options.unnamedUploadMs = 60'000;
        auto broker = open(QStringLiteral("chunks"), options);
        DatasetManifest manifest;
        manifest.kind = DatasetManifest::Kind::Samples;
        manifest.sampleShape = { 4 };
        manifest.classes = 3;
        for (int i = 0; i < 10; ++i) {
            const QByteArray bytes(500 + i, char('a' + i));
            const auto chunk = *broker->blobs().put(bytes);
            QVERIFY(broker->recordUpload(chunk, QStringLiteral("k"), bytes.size()).ok());
            manifest.chunks.append({ chunk, 100, bytes.size(), {} });
        }
        auto spec = job(1, 2);
        spec.training.batchSize = 8;
        spec.training.localSteps = 5;
        spec.training.checkpointInterval = 5;
        spec.dataset = DatasetSpec {};
        spec.dataset.source = DatasetSpec::Source::Chunks;
        spec.dataset.manifestSha256 = *broker->blobs().put(manifest.toJson());
        spec.dataset.testSha256 = *broker->blobs().put(QByteArray("test"));
        spec.dataset.trainSamples = 999;
        auto refused = broker->submit(spec, QStringLiteral("k"));
        QVERIFY(!refused.ok());
        QCOMPARE(refused.error().field, QStringLiteral("dataset.chunks.trainSamples"));
        auto missing = manifest;
        missing.chunks[4].sha256 = Digest::ofBytes("never uploaded");
        auto lying = spec;
        lying.dataset.manifestSha256 = *broker->blobs().put(missing.toJson());
        lying.dataset.trainSamples = 1000;
        refused = broker->submit(lying, QStringLiteral("k"));
        QVERIFY(!refused.ok());
        QVERIFY2(refused.error().message.contains(QStringLiteral("chunk 4")), qPrintable(refused.error().message));

        spec.dataset.trainSamples = 1000;
        QVERIFY(broker->submit(spec, QStringLiteral("k")).ok());
        auto older = node(QStringLiteral("older")); // a node from before chunked datasets gets none of it
        older.capabilities.removeAll(capability::Chunks);
        QVERIFY(broker->registerNode(older).ok());
        QVERIFY(!broker->assign(QStringLiteral("older"))->has_value());
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        const auto assigned = **broker->assign(QStringLiteral("a"));
        // 40 samples of a slice of 500 (5 chunks): one chunk, or two where the slice starts inside one.
        QVERIFY(assigned.task.dataChunks.size() >= 1 && assigned.task.dataChunks.size() <= 2);
        QCOMPARE(assigned.task.dataChunks, chunksOfTask(assigned.task, manifest));
        for (const auto& chunk : manifest.chunks)
            QCOMPARE(*broker->mayRead(QStringLiteral("a"), chunk.sha256), assigned.task.dataChunks.contains(chunk.sha256));
        QVERIFY(*broker->mayRead(QStringLiteral("a"), spec.dataset.manifestSha256));
        m_clock.now += 66'000;
        broker->tick();
        for (const auto& chunk : manifest.chunks)
            QVERIFY(broker->blobs().contains(chunk.sha256));
        QVERIFY(broker->admitUpload(QStringLiteral("k"), 10'000).ok()); // the job's chunks no longer count
    }

    // A job whose shard fails on every node and on the broker fails, and says why.
    void aShardThatFailsOnTheBrokerTooFailsTheJob()
    {
        auto broker = open(QStringLiteral("failing"));
        const auto jobId = *broker->submit(job(1, 1));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        const auto assignment = **broker->assign(QStringLiteral("a"));
        const auto failed = failure(assignment, QStringLiteral("loss became NaN at step 3"));
        m_math.replayFails = true;
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), assignment.id, failed), Acceptance::Failed);
        m_math.replayFails = false;
        const auto status = *broker->status(jobId);
        QCOMPARE(status.state, JobState::Failed);
        QVERIFY2(status.failure.contains(QStringLiteral("on the broker")), qPrintable(status.failure));
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // A model too large for this broker is refused from its spec, before anything is built; zoo
    // quotes come from arithmetic.
    void modelsAreBoundedAndQuotedFromTheirSpec()
    {
        Broker::Options options;
        options.faucet = true;
        options.maxParameters = 1'000'000;
        auto broker = openAsIs(QStringLiteral("bounded"), options);
        auto huge = job(1, 1);
        huge.model.hidden = { 65536, 65536 };
        const int built = m_math.initialBuilds;
        const auto quote = broker->quoteFor(huge);
        QVERIFY(!quote.ok());
        QCOMPARE(quote.error().field, QStringLiteral("model"));
        QVERIFY(!broker->submit(huge).ok());
        auto small = job(1, 1);
        QVERIFY(broker->quoteFor(small).ok());
        // A TorchScript model is counted from its zip directory: 15 parameters, nothing loaded.
        QFile model(QStringLiteral(TESSERA_SOURCE_DIR "/fuzz/corpus/modelarchive/linear.pt"));
        QVERIFY(model.open(QIODevice::ReadOnly));
        auto scripted = job(1, 1);
        scripted.model = ModelSpec {};
        scripted.model.source = ModelSpec::Source::TorchScript;
        scripted.model.scriptSha256 = *broker->blobs().put(model.readAll());
        const auto priced = broker->quoteFor(scripted);
        QVERIFY2(priced.ok(), qPrintable(priced.ok() ? QString() : priced.error().toString()));
        QCOMPARE(priced->flopsPerSample, 6.0 * 15);
        // Not a zip: refused, not loaded.
        scripted.model.scriptSha256 = *broker->blobs().put("def forward(self): while True: pass");
        QCOMPARE(broker->quoteFor(scripted).error().field, QStringLiteral("model"));
        QCOMPARE(m_math.initialBuilds, built);
    }

    // A node whose disk is full gives its shard back: the shard goes to another node, and neither
    // the shard's failure count (2 here) nor the node's record changes.
    void returnedShardsGoElsewhereAndCountAgainstNobody()
    {
        auto broker = open(QStringLiteral("returned"));
        const auto jobId = *broker->submit(job(1, 1));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("b"))).ok());
        for (int i = 0; i < 3; ++i) {
            const auto assignment = **broker->assign(QStringLiteral("a"));
            const auto returned = failure(assignment, QStringLiteral("the disk is full"), ShardResult::Outcome::Returned);
            QCOMPARE(*deliver(*broker, QStringLiteral("a"), assignment.id, returned), Acceptance::Failed);
            const auto status = *broker->status(jobId);
            QCOMPARE(status.state, JobState::Running);
            // Not straight back to the node that gave it back: another takes it first, and only
            // after ReturnedWaitMs without a taker does it come back.
            QVERIFY(!broker->assign(QStringLiteral("a"))->has_value());
            m_clock.now += Scheduler::ReturnedWaitMs;
        }
        const auto assignment = **broker->assign(QStringLiteral("b"));
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), assignment.id, answer(*broker, assignment, "b")), Acceptance::Accepted);
        const auto status = *broker->status(jobId);
        QCOMPARE(status.state, JobState::Finished);
        const auto known = *broker->nodes();
        QCOMPARE(known.size(), 2);
        for (const auto& record : known)
            QCOMPARE(record.value(QStringLiteral("shardsFailed")).toInt(), 0);
        // On the wire it is its own outcome, and it must say why.
        ShardResult returned;
        returned.jobId = jobId;
        returned.outcome = ShardResult::Outcome::Returned;
        returned.failure = QStringLiteral("the disk is full");
        const auto json = returned.toJson();
        QCOMPARE(json.value(QStringLiteral("outcome")).toString(), QStringLiteral("returned"));
        const auto parsed = ShardResult::fromJson(json);
        QVERIFY(parsed.ok());
        QCOMPARE(parsed->outcome, ShardResult::Outcome::Returned);
        auto silent = json;
        silent.remove(QStringLiteral("failure"));
        QVERIFY(!ShardResult::fromJson(silent).ok());
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

    // Two brokers on one PostgreSQL database (docs/STORE.md, "Several brokers") serve the network
    // at once: each holds the jobs submitted through it, hands out only their shards, takes only
    // their results (another's are refused naming the broker that holds them), and a node earns
    // on both into one balance. The first dies with a shard out and its data folder is lost; once
    // its job's lease lapses the second takes the job over, with the job's blobs and the accepted
    // upload from the database's copy, hands that shard out again, and finishes the job: each
    // shard paid once, the books balanced. The first, started again on a new folder, holds
    // nothing of what the second took.
    void twoBrokersServeTheNetworkAtOnceAndTakeOverEachOthersJobs()
    {
        if (!tessera::tests::TestStore::onPostgres())
            QSKIP("several brokers share a PostgreSQL database only (tst_broker_postgresql)");
        auto options = networkOptions(QStringLiteral("network"));
        // Each broker its own blobs: the second finds the first's in the database.
        options.endpoint = QStringLiteral("tcp://first.example:5555");
        auto first = openOn(QStringLiteral("first"), blobsAt(QStringLiteral("first")), options);
        options.endpoint = QStringLiteral("tcp://second.example:5555");
        auto second = openOn(QStringLiteral("second"), blobsAt(QStringLiteral("second")), options);
        QVERIFY(first->brokerId() != second->brokerId());
        QVERIFY(first->doesChores() != second->doesChores()); // one broker at a time

        const auto jobId = *first->submit(job(1, 2), QStringLiteral("owner"));
        const auto otherId = *second->submit(job(1, 1), QStringLiteral("owner"));
        QVERIFY(first->holds(jobId) && !first->holds(otherId));
        QVERIFY(second->holds(otherId) && !second->holds(jobId));
        for (auto* broker : { first.get(), second.get() })
            QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        const auto other = **second->assign(QStringLiteral("a"));
        QCOMPARE(other.task.jobId, otherId);
        QVERIFY(!second->assign(QStringLiteral("a"))->has_value()); // the first's job is not the second's to hand out
        const auto done = **first->assign(QStringLiteral("a"));
        QCOMPARE(done.task.jobId, jobId);
        (void)**first->assign(QStringLiteral("a")); // in flight when the first broker dies
        const auto elsewhere = deliver(*second, QStringLiteral("a"), done.id, answer(*second, done, "0"));
        QVERIFY(!elsewhere.ok()); // the first holds the job
        QCOMPARE(elsewhere.error().field, QStringLiteral("standby"));
        QVERIFY2(elsewhere.error().message.contains(QStringLiteral("tcp://first.example:5555")),
            qPrintable(elsewhere.error().message));
        const auto cancel = second->cancel(jobId);
        QVERIFY(!cancel.ok() && cancel.error().field == QStringLiteral("standby"));
        QCOMPARE(*deliver(*first, QStringLiteral("a"), done.id, answer(*first, done, "0")), Acceptance::Accepted);
        QCOMPARE(*deliver(*second, QStringLiteral("a"), other.id, answer(*second, other, "0")), Acceptance::Accepted);
        QCOMPARE(second->status(otherId)->state, JobState::Finished);
        // One balance, earned on both brokers, the same through either.
        QCOMPARE(*first->account(QStringLiteral("a")), *second->account(QStringLiteral("a")));
        first.reset(); // killed: its leases stay until they lapse
        QVERIFY(QDir(m_dir.filePath(QStringLiteral("first"))).removeRecursively()); // and its data folder lost, id and all

        m_clock.now += 1000;
        second->tick();
        QVERIFY(!second->holds(jobId));
        m_clock.now += NetworkLease::DefaultMs;
        second->tick();
        QVERIFY(second->holds(jobId));
        QVERIFY(second->doesChores());
        const auto again = **second->assign(QStringLiteral("a"));
        QVERIFY(again.task.shard != done.task.shard);
        QCOMPARE(*deliver(*second, QStringLiteral("a"), again.id, answer(*second, again, "1")), Acceptance::Accepted);
        const auto status = *second->status(jobId);
        QCOMPARE(status.state, JobState::Finished);
        QCOMPARE(*second->blobs().read(status.weightsBlob), QByteArray("w0|01"));
        QVERIFY(second->ledger().checkInvariants().ok());
        int payments = 0;
        const auto history = second->ledger().history(ledger::accounts::balance(QStringLiteral("a")));
        QVERIFY(history.ok());
        for (const auto& transfer : *history)
            payments += transfer.cause.startsWith(QStringLiteral("pay:") + jobId) ? 1 : 0;
        QCOMPARE(payments, 2);

        auto back = openOn(QStringLiteral("first"), blobsAt(QStringLiteral("first")), options);
        QVERIFY(!back->holds(jobId));
        QVERIFY(back->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(!back->assign(QStringLiteral("a"))->has_value());
    }

    // A broker restarted on its data folder (its broker.id) before its jobs' leases lapse holds
    // them again at once: another broker of the network does not take them over.
    void aBrokerRestartedOnItsFolderKeepsItsJobs()
    {
        if (!tessera::tests::TestStore::onPostgres())
            QSKIP("several brokers share a PostgreSQL database only (tst_broker_postgresql)");
        const auto options = networkOptions(QStringLiteral("restarted-network"));
        BlobStore& blobs = blobsAt(QStringLiteral("restarted-first"));
        auto first = openOn(QStringLiteral("restarted-first"), blobs, options);
        auto second = openOn(QStringLiteral("restarted-second"), blobsAt(QStringLiteral("restarted-second")), options);
        const auto jobId = *first->submit(job(1, 1), QStringLiteral("owner"));
        QVERIFY(first->registerNode(node(QStringLiteral("a"))).ok());
        const auto out = **first->assign(QStringLiteral("a")); // the job's one shard
        first.reset();
        m_clock.now += 1000;
        first = openOn(QStringLiteral("restarted-first"), blobs, options);
        QVERIFY(first->holds(jobId));
        m_clock.now += NetworkLease::DefaultMs;
        second->tick();
        first->tick();
        QVERIFY(!second->holds(jobId));
        QVERIFY(first->holds(jobId));
        // What was in flight is handed out again, as after any restart.
        QVERIFY(first->registerNode(node(QStringLiteral("a"))).ok());
        const auto again = **first->assign(QStringLiteral("a"));
        QCOMPARE(again.task.jobId, jobId);
        QCOMPARE(again.task.shard, out.task.shard);
        QVERIFY(again.id != out.id);
    }

    // tessera-broker migrate-store (migrateStore): a broker's SQLite database with a job halfway
    // moved into an empty PostgreSQL database with its blobs; a broker there finishes the job with
    // the owner's account as it was, and a second move into the same database is refused.
    void aSqliteNetworkMovesToPostgresqlAndGoesOn()
    {
        if (!tessera::tests::TestStore::onPostgres())
            QSKIP("moves to a PostgreSQL database (tst_broker_postgresql)");
        auto options = networkOptions(QStringLiteral("moved-to"));
        options.database.clear(); // SQLite first
        BlobStore& blobs = blobsAt(QStringLiteral("moved"));
        QString jobId;
        QJsonObject before;
        {
            auto broker = openOn(QStringLiteral("moved"), blobs, options); // SQLite: no Broker/Database
            QCOMPARE(broker->brokerId().size(), 32);
            jobId = *broker->submit(job(2, 2), QStringLiteral("owner"));
            QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
            for (int i = 0; i < 2; ++i) {
                const auto out = **broker->assign(QStringLiteral("a"));
                QCOMPARE(*deliver(*broker, QStringLiteral("a"), out.id, answer(*broker, out, QByteArray::number(i))),
                    Acceptance::Accepted);
            }
            QCOMPARE(broker->status(jobId)->round, 1);
            before = *broker->account(QStringLiteral("owner"));
        }
        const QString sqlite = m_dir.filePath(QStringLiteral("moved/broker.sqlite"));
        const QString uri = tessera::tests::TestStore::databaseFor(m_dir.filePath(QStringLiteral("moved-to")));
        const auto moved = migrateStore(sqlite, uri, &blobs);
        QVERIFY2(moved.ok(), moved.ok() ? "" : qPrintable(moved.error().toString()));
        QVERIFY(moved->blobs >= 3); // the initial weights, round 0's and its change
        const auto transfers = std::find_if(moved->tables.cbegin(), moved->tables.cend(),
            [](const auto& table) { return table.name == QStringLiteral("ledger_transfers"); });
        QVERIFY(transfers != moved->tables.cend() && transfers->rows > 0);

        options.database = uri;
        auto broker = openOn(QStringLiteral("moved"), blobs, options);
        QVERIFY(broker->holds(jobId)); // moved without a lease: taken at once
        QCOMPARE(*broker->account(QStringLiteral("owner")), before);
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        for (int i = 0; i < 2; ++i) {
            const auto out = **broker->assign(QStringLiteral("a"));
            QCOMPARE(out.task.round, 1);
            QCOMPARE(*deliver(*broker, QStringLiteral("a"), out.id, answer(*broker, out, QByteArray::number(i))),
                Acceptance::Accepted);
        }
        QCOMPARE(broker->status(jobId)->state, JobState::Finished);
        QVERIFY(broker->ledger().checkInvariants().ok());
        const auto again = migrateStore(sqlite, uri, nullptr);
        QVERIFY(!again.ok());
        QVERIFY2(again.error().message.contains(QStringLiteral("not empty")), qPrintable(again.error().message));
    }

    // The leases are renewed while a broker waits on long work (BrokerServer::serveBusy calls
    // keepLease), so another broker does not take a job over in the middle of its aggregation.
    void theLeasesAreKeptDuringLongWork()
    {
        if (!tessera::tests::TestStore::onPostgres())
            QSKIP("several brokers share a PostgreSQL database only (tst_broker_postgresql)");
        const auto options = networkOptions(QStringLiteral("kept"));
        auto first = openOn(QStringLiteral("kept-first"), blobsAt(QStringLiteral("kept-first")), options);
        auto second = openOn(QStringLiteral("kept-second"), blobsAt(QStringLiteral("kept-second")), options);
        const auto jobId = *first->submit(job(1, 2), QStringLiteral("owner"));
        QVERIFY(first->doesChores());
        m_clock.now += NetworkLease::DefaultMs / 2;
        first->keepLease(); // in long work: no tick
        m_clock.now += NetworkLease::DefaultMs * 2 / 3; // past the first renewal's lapse, not the second's
        second->tick();
        QVERIFY(!second->holds(jobId));
        QVERIFY(!second->doesChores());
        QVERIFY(first->holds(jobId));
    }

    // The leases fence every write: a broker whose clock is behind still thinks it holds a job
    // after another took it over, but its transactions are refused (field standby) and change
    // nothing.
    void aBrokerThatLostTheLeaseWritesNothing()
    {
        if (!tessera::tests::TestStore::onPostgres())
            QSKIP("several brokers share a PostgreSQL database only (tst_broker_postgresql)");
        const auto options = networkOptions(QStringLiteral("fenced"));
        auto first = openOn(QStringLiteral("fenced-first"), blobsAt(QStringLiteral("fenced-first")), options);
        const auto jobId = *first->submit(job(1, 2), QStringLiteral("owner"));
        FakeClock ahead; // the second broker's clock, past the first's lease
        ahead.now = m_clock.now + NetworkLease::DefaultMs + 1000;
        auto second = Broker::open(
            m_dir.filePath(QStringLiteral("fenced-second")), blobsAt(QStringLiteral("fenced-second")), m_math, ahead, options);
        QVERIFY(second.ok());
        QVERIFY((*second)->holds(jobId)); // took it over at once, by its clock
        QVERIFY(first->holds(jobId)); // by its own clock, the first still holds it
        const auto cancelled = first->cancel(jobId);
        QVERIFY(!cancelled.ok());
        QCOMPARE(cancelled.error().field, QStringLiteral("standby"));
        QCOMPARE((*second)->status(jobId)->state, JobState::Running);
        // Its next tick tells it what it lost; then it writes again, what is still its own.
        first->tick();
        QVERIFY(!first->holds(jobId));
        QVERIFY(!first->cancel(jobId).ok());
        const auto kept = first->submit(job(1, 2), QStringLiteral("owner"));
        QVERIFY2(kept.ok(), kept.ok() ? "" : qPrintable(kept.error().toString()));
        QVERIFY(first->holds(*kept));
        QVERIFY(first->cancel(*kept).ok());
        QVERIFY((*second)->cancel(jobId).ok());
    }

    // One broker to a data folder (broker.lock): a second one there would hold the network's
    // lease under the same broker.id.
    void aDataFolderHasOneBroker()
    {
        auto first = open(QStringLiteral("locked"));
        auto blobs = Broker::openBlobs(m_dir.filePath(QStringLiteral("locked")));
        QVERIFY(blobs.ok());
        Broker::Options options;
        options.database = tessera::tests::TestStore::databaseFor(m_dir.filePath(QStringLiteral("locked")));
        const auto second = Broker::open(m_dir.filePath(QStringLiteral("locked")), **blobs, m_math, m_clock, options);
        QVERIFY(!second.ok());
        QVERIFY2(second.error().message.contains(QStringLiteral("another tessera-broker")), qPrintable(second.error().message));
        first.reset();
        QVERIFY(Broker::open(m_dir.filePath(QStringLiteral("locked")), **blobs, m_math, m_clock, options).ok());
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

    // A node that says how much memory it gives a shard (Compute/MaxMemoryMiB) is offered no shard
    // estimated larger (core::estimateShardMemory); one that said nothing, or enough, is.
    void nodesGetNoShardLargerThanTheirMemory()
    {
        auto broker = open(QStringLiteral("memory"));
        auto spec = job(1, 2);
        spec.model.hidden = { 4096, 4096 }; // 20 M parameters: 80 MB of weights, about 370 MiB a shard
        (void)*broker->submit(spec);
        auto limited = [](const QString& id, std::int64_t mebibytes) {
            auto info = node(id);
            info.maxMemoryMiB = mebibytes;
            return info;
        };
        QVERIFY(broker->registerNode(limited(QStringLiteral("small"), 256)).ok());
        QVERIFY(broker->registerNode(limited(QStringLiteral("large"), 1024)).ok());
        QVERIFY(broker->registerNode(limited(QStringLiteral("unsaid"), 0)).ok());
        QVERIFY(!broker->assign(QStringLiteral("small"))->has_value());
        QVERIFY(broker->assign(QStringLiteral("large"))->has_value());
        QVERIFY(broker->assign(QStringLiteral("unsaid"))->has_value());
        // The estimate, term by term: the data as held, 4 x the weights (plain SGD), one batch.
        const auto memory = estimateShardMemory(spec.model, spec.optimizer, spec.training.batchSize, 4 * *zooParameterCount(spec),
            builtinDatasetBytes(spec.dataset.builtin));
        QCOMPARE(memory.dataset, 70'000LL * (784 + 8));
        QCOMPARE(memory.model, 4 * 4 * *zooParameterCount(spec));
        QVERIFY(memory.activations > 0 && memory.activations < memory.model / 10);
        QVERIFY(memory.totalMiB() > 256 && memory.totalMiB() < 1024);
        spec.optimizer.momentum = 0.9; // one more buffer per parameter, and in the kept state
        QCOMPARE(estimateShardMemory(spec.model, spec.optimizer, 32, 400, 0).model, 2400);
        spec.optimizer.kind = OptimizerSpec::Kind::Adam;
        QCOMPARE(estimateShardMemory(spec.model, spec.optimizer, 32, 400, 0).model, 3200);
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
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), first.id, answer(*broker, first, "x")), Acceptance::Accepted);
        QCOMPARE(*broker->ledger().balance(ledger::accounts::balance(QStringLiteral("a"))), Credits::fromMicro(100'000));
        // A retried or duplicated answer pays nothing more.
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), first.id, answer(*broker, first, "x")), Acceptance::Stale);
        QCOMPARE(*broker->ledger().balance(ledger::accounts::balance(QStringLiteral("a"))), Credits::fromMicro(100'000));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), second.id, answer(*broker, second, "y")), Acceptance::Accepted);
        // The job is done: the unspent budget went back to its owner.
        status = *broker->status(jobId);
        QCOMPARE(status.state, JobState::Finished);
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
        (void)broker->ledger().mint(
            ledger::accounts::balance(QStringLiteral("local")), *Credits::fromCredits(1), QStringLiteral("buy local"), 1);
        auto cheap = job(1, 1);
        cheap.budget = Credits::fromMicro(1);
        const auto tooCheap = broker->submit(cheap);
        QVERIFY(!tooCheap.ok());
        QVERIFY2(tooCheap.error().message.contains(QStringLiteral("do not pay for the training")),
            qPrintable(tooCheap.error().message));
        // No faucet, no balance: refused before any of the job's code runs (its initial weights).
        const int built = m_math.initialBuilds;
        const auto broke = broker->submit(job(1, 1), QStringLiteral("nobody"));
        QVERIFY(!broke.ok());
        QCOMPARE(broke.error().field, QStringLiteral("budget"));
        QCOMPARE(m_math.initialBuilds, built);
        std::optional<Result<QString>> answered;
        QVERIFY(
            broker->submitInBackground(job(1, 1), QStringLiteral("nobody"), {}, [&](Result<QString> id) { answered = id; }).ok());
        QVERIFY(answered && !answered->ok());
        QCOMPARE(m_math.initialBuilds, built);
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
        const auto fields = result.commitmentDocument(assignment.id);
        QVERIFY(!broker->commit(QStringLiteral("a"), signDocument(fields, SigningKeys::generate())).ok());
        // A document of another kind (or of none), signed by the node: refused, and it binds nothing.
        for (const auto& kind : { QStringLiteral("tessera-stake"), QString() }) {
            auto wrongKind = fields;
            wrongKind.insert(QStringLiteral("finalHash"), Digest::ofBytes("something else").toHex());
            if (kind.isEmpty())
                wrongKind.remove(QStringLiteral("kind"));
            else
                wrongKind.insert(QStringLiteral("kind"), kind);
            const auto refusedKind = broker->commit(QStringLiteral("a"), signDocument(wrongKind, keysOf(QStringLiteral("a"))));
            QVERIFY(!refusedKind.ok());
            QCOMPARE(refusedKind.error().field, QStringLiteral("commitment.kind"));
        }
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

    // --- Verification: sampling, re-execution, disputes, slashing, stake -------------------------

    void sampledResultsWaitForTheirCheckThenPay()
    {
        auto broker = openVerifying(QStringLiteral("verify"));
        const auto jobId = *broker->submit(job(1, 2));
        for (const auto* id : { "a", "b" })
            QVERIFY(broker->registerNode(node(QString::fromLatin1(id))).ok());
        const auto a1 = **broker->assign(QStringLiteral("a"));
        // A new node's results are all sampled: counted, not paid yet.
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1)), Acceptance::Held);
        QVERIFY(!*broker->ledger().hasCause(QStringLiteral("pay:%1/0/0").arg(jobId)));
        // The checked node gets other work, never its own check; another node gets the check.
        const auto a2 = **broker->assign(QStringLiteral("a"));
        QCOMPARE(a2.task.shard, 1);
        auto assigned = broker->assign(QStringLiteral("b"));
        QVERIFY2(assigned.ok() && assigned->has_value(),
            qPrintable(assigned.ok() ? QStringLiteral("none") : assigned.error().toString()));
        const auto b1 = **assigned;
        QCOMPARE(b1.task.shard, 0);
        QCOMPARE(b1.task.startWeights, a1.task.startWeights);
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), b1.id, honest(*broker, b1)), Acceptance::Held);
        QVERIFY(*broker->ledger().hasCause(QStringLiteral("pay:%1/0/0").arg(jobId)));
        auto checks = *broker->verifications(jobId);
        QCOMPARE(checks.size(), 1);
        QCOMPARE(checks[0].value(QStringLiteral("state")).toString(), QStringLiteral("verified"));
        QCOMPARE(checks[0].value(QStringLiteral("outcome")).toString(), QStringLiteral("none"));
        QVERIFY(*broker->ledger().hasCause(QStringLiteral("verify:") + checks[0].value(QStringLiteral("id")).toString()));
        QCOMPARE(broker->status(jobId)->state, JobState::Running); // shard 1 is still being checked

        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a2.id, honest(*broker, a2)), Acceptance::Held);
        const auto b2 = **broker->assign(QStringLiteral("b"));
        QCOMPARE(b2.task.shard, 1);
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), b2.id, honest(*broker, b2)), Acceptance::Held);
        QCOMPARE(broker->status(jobId)->state, JobState::Finished);
        const auto nodes = *broker->nodes();
        QCOMPARE(nodes[0].value(QStringLiteral("verified")).toInteger(), 2);
        QCOMPARE(nodes[1].value(QStringLiteral("verified")).toInteger(), 2);
        QCOMPARE(nodes[0].value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
        bool told = false;
        for (const auto& notice : broker->takeNotices())
            told = told || (notice.nodeId == u"a" && notice.body.value(QStringLiteral("state")).toString() == u"paid");
        QVERIFY(told);
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // docs/VERIFICATION.md, "Pipeline stages": a sampled stage waits for its partners, then is
    // re-executed from what the broker relayed to it (the check's task names the recorded inputs).
    // Stage 0 sent an activation its honest run would not send: its check's sides differ in the
    // tensors' root, the referee replays the stage and agrees with the re-execution, stage 0's
    // node is slashed, and its partner, which computed honestly on what it received, is paid
    // (its own check called off), never slashed. The shard's two stages go out again.
    void aStageThatSentWrongTensorsIsSlashedAndItsPartnerPaid()
    {
        auto broker = openVerifying(QStringLiteral("stage-cheat"));
        auto spec = pipelineJob();
        spec.verificationRate = 1.0;
        const auto jobId = *broker->submit(spec, QStringLiteral("owner"));
        for (const auto* id : { "a", "b", "c" }) {
            auto info = node(QString::fromLatin1(id));
            info.capabilities.append(capability::Pipeline);
            QVERIFY(broker->registerNode(info).ok());
        }
        const auto out = *broker->assignPipeline({ QStringLiteral("a"), QStringLiteral("b") });
        QCOMPARE(out.size(), 2);
        // Stage 0 sends `sent` where an honest stage would send honestSent; stage 1 sends `gradient`.
        const QByteArray sent(2048, 'x'), honestSent(2048, 'y'), gradient(2048, 'g');
        const auto [lyingRoot, partnerRoot] = relayShard(*broker, out, sent, gradient);
        QVERIFY(!lyingRoot.isNull());
        auto first = honest(*broker, out[0].second), second = honest(*broker, out[1].second);
        first.tensorsRoot = lyingRoot;
        second.tensorsRoot = partnerRoot;
        // An honest stage's root from what it received (its recorded inputs).
        m_math.stageRoot = [&](const ShardTask& task) {
            const auto inputs = *StageInputs::parse(*broker->blobs().read(task.stageInputs));
            QList<StageTensor> log;
            for (std::int64_t step = 0; step < 10; ++step) {
                for (std::int64_t micro = 0; micro < 4; ++micro) {
                    const auto activation
                        = task.stage == 0 ? honestSent : inputs.find(0, TensorKind::Activation, step, micro).value();
                    const auto back = task.stage == 0 ? inputs.find(1, TensorKind::Gradient, step, micro).value() : gradient;
                    log += { { task.stage == 0, 1 - task.stage, TensorKind::Activation, step, micro,
                                 Digest::ofBytes(activation) },
                        { task.stage == 1, 1 - task.stage, TensorKind::Gradient, step, micro, Digest::ofBytes(back) } };
                }
            }
            return stageTensorsRoot(log);
        };
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), out[0].second.id, first), Acceptance::Held);
        QVERIFY(broker->verifications(jobId)->isEmpty()); // its partner has not answered
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), out[1].second.id, second), Acceptance::Held);
        QCOMPARE(broker->verifications(jobId)->size(), 2);
        const auto paidFor = [&](std::int64_t unit, const QString& assignment) {
            return *broker->ledger().hasCause(Verifier::payCause(jobId, 0, unit, assignment));
        };
        QVERIFY(!paidFor(1, out[1].second.id)); // sampled: paid once checked
        // Each check goes to a node drawn for it, which re-executes the stage honestly from its
        // recorded inputs: stage 0 the 40 gradients stage 1 sent, stage 1 the 40 activations stage 0
        // sent.
        const int replays = m_math.replays;
        bool stage0Checked = false;
        Digest stage0Inputs;
        for (int ask = 0; ask < 6 && !stage0Checked; ++ask) {
            const QString id = QStringList { QStringLiteral("b"), QStringLiteral("c"), QStringLiteral("a") }[ask % 3];
            auto check = broker->assign(id);
            if (!check.ok() || !check->has_value())
                continue;
            const auto& task = (**check).task;
            QVERIFY(!task.stageInputs.isNull());
            const auto inputs = StageInputs::parse(*broker->blobs().read(task.stageInputs));
            QCOMPARE(inputs->size(), 40);
            QCOMPARE(*inputs->find(1 - task.stage, task.stage == 0 ? TensorKind::Gradient : TensorKind::Activation, 9, 3),
                task.stage == 0 ? gradient : sent);
            auto reexecuted = honest(*broker, **check);
            reexecuted.tensorsRoot = m_math.stageRoot(task);
            QCOMPARE(*deliver(*broker, id, (**check).id, reexecuted), Acceptance::Held);
            stage0Checked = task.stage == 0;
            if (stage0Checked)
                stage0Inputs = task.stageInputs;
        }
        QVERIFY(stage0Checked);
        QVERIFY(!broker->blobs().contains(stage0Inputs)); // decided: what the stage received goes
        QCOMPARE(m_math.replays, replays + 1); // the referee replayed stage 0
        QCOMPARE(broker->account(QStringLiteral("a"))->value(QStringLiteral("stake")).toString(), QStringLiteral("5"));
        QCOMPARE(broker->account(QStringLiteral("b"))->value(QStringLiteral("stake")).toString(), QStringLiteral("10"));
        QVERIFY(paidFor(1, out[1].second.id)); // the partner is paid
        QVERIFY(!paidFor(0, out[0].second.id));
        const auto records = *broker->verifications(jobId);
        for (const auto& record : records) {
            if (record.value(QStringLiteral("shard")).toInteger() == 1) // b's stage
                QVERIFY(record.value(QStringLiteral("state")).toString() != u"rejected");
            else
                QCOMPARE(record.value(QStringLiteral("outcome")).toString(), QStringLiteral("accused"));
        }
        // The shard's stages go out together again, to nodes that still hold a stake; trained
        // honestly and checked, each unit is paid once more (a payment of its own) and the job ends.
        QCOMPARE(broker->status(jobId)->state, JobState::Running);
        const auto again = *broker->assignPipeline({ QStringLiteral("b"), QStringLiteral("c") });
        QCOMPARE(again.size(), 2);
        const auto [zeroRoot, oneRoot] = relayShard(*broker, again, honestSent, gradient);
        first = honest(*broker, again[0].second);
        second = honest(*broker, again[1].second);
        first.tensorsRoot = zeroRoot;
        second.tensorsRoot = oneRoot;
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), again[0].second.id, first), Acceptance::Held);
        QCOMPARE(*deliver(*broker, QStringLiteral("c"), again[1].second.id, second), Acceptance::Held);
        for (int ask = 0; ask < 12 && broker->status(jobId)->state == JobState::Running; ++ask) {
            const QString id = ask % 2 ? QStringLiteral("c") : QStringLiteral("b");
            auto check = broker->assign(id);
            if (!check.ok() || !check->has_value())
                continue;
            auto reexecuted = honest(*broker, **check);
            reexecuted.tensorsRoot = m_math.stageRoot((**check).task);
            QCOMPARE(*deliver(*broker, id, (**check).id, reexecuted), Acceptance::Held);
        }
        QCOMPARE(broker->status(jobId)->state, JobState::Finished);
        QVERIFY(paidFor(1, again[1].second.id) && paidFor(0, again[0].second.id));
        for (const auto* id : { "b", "c" })
            QCOMPARE(broker->account(QString::fromLatin1(id))->value(QStringLiteral("stake")).toString(), QStringLiteral("10"));
        QVERIFY(broker->ledger().checkInvariants().ok());
        m_math.stageRoot = {};
    }

    void aCheatCaughtAtTheFirstCheckpointIsSlashed()
    {
        auto broker = openVerifying(QStringLiteral("cheat1"));
        const auto jobId = *broker->submit(job(1, 1), QStringLiteral("owner"));
        for (const auto* id : { "a", "b" })
            QVERIFY(broker->registerNode(node(QString::fromLatin1(id))).ok());
        const auto a1 = **broker->assign(QStringLiteral("a"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1, 1)), Acceptance::Held);
        const auto b1 = **broker->assign(QStringLiteral("b"));
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), b1.id, honest(*broker, b1)), Acceptance::Held);
        // Checkpoint 1 differs: the referee re-executed from the round's weights, without asking anyone.
        QCOMPARE(m_math.replays > 0, true);
        const auto check = broker->verifications(jobId)->first();
        QCOMPARE(check.value(QStringLiteral("state")).toString(), QStringLiteral("rejected"));
        QCOMPARE(check.value(QStringLiteral("outcome")).toString(), QStringLiteral("accused"));
        QCOMPARE(check.value(QStringLiteral("checkpoint")).toInteger(), 1);
        // Half of a's 10 credits of stake: 2.5 to b, 2.5 burned (never the owner's: no owner profits
        // from a slash); b is also paid for the check.
        QCOMPARE(broker->account(QStringLiteral("a"))->value(QStringLiteral("stake")).toString(), QStringLiteral("5"));
        QCOMPARE(broker->ledger().balance(QStringLiteral("balance:owner"))->toString(), QStringLiteral("0"));
        QCOMPARE(broker->ledger().balance(QStringLiteral("burned"))->toString(), QStringLiteral("2.5"));
        QVERIFY(*broker->ledger().balance(QStringLiteral("balance:b")) > Credits::fromMicro(2'500'000));
        QVERIFY(!*broker->ledger().hasCause(QStringLiteral("pay:%1/0/0").arg(jobId)));
        // The cheat cannot take work any more; the shard is trained again by someone else.
        QVERIFY(!broker->assign(QStringLiteral("a")).ok());
        const auto again = **broker->assign(QStringLiteral("b"));
        QCOMPARE(again.task.shard, 0);
        const auto nodes = *broker->nodes();
        QCOMPARE(nodes[0].value(QStringLiteral("disputesLost")).toInteger(), 1);
        QCOMPARE(nodes[0].value(QStringLiteral("slashed")).toString(), QStringLiteral("5"));
        QCOMPARE(nodes[1].value(QStringLiteral("disputesLost")).toInteger(), 0);
        QVERIFY(broker->schedulingScore(QStringLiteral("a")) < broker->schedulingScore(QStringLiteral("b")));
        QVERIFY(broker->receipt(QStringLiteral("slash:%1:a:honest").arg(check.value(QStringLiteral("id")).toString())).ok());
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // A dispute in the middle of the chain: both sides are asked for the checkpoint they agree on.
    void aMidChainDisputeRefereesOneInterval()
    {
        auto [broker, jobId, a1] = oneShardForAAndB(QStringLiteral("cheat2"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1, 2)), Acceptance::Held);
        const auto b1 = **broker->assign(QStringLiteral("b"));
        (void)broker->takeNotices();
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), b1.id, honest(*broker, b1)), Acceptance::Held);
        auto check = broker->verifications(jobId)->first();
        const QString checkId = check.value(QStringLiteral("id")).toString();
        QCOMPARE(check.value(QStringLiteral("state")).toString(), QStringLiteral("disputed"));
        QCOMPARE(check.value(QStringLiteral("checkpoint")).toInteger(), 2);
        QStringList asked;
        for (const auto& notice : broker->takeNotices()) {
            if (notice.kind == Notice::Kind::CheckpointRequest) {
                asked.append(notice.nodeId);
                QCOMPARE(notice.body.value(QStringLiteral("checkpoint")).toInteger(), 1);
                QCOMPARE(notice.body.value(QStringLiteral("verification")).toString(), checkId);
            }
        }
        asked.sort();
        QCOMPARE(asked, QStringList({ QStringLiteral("a"), QStringLiteral("b") }));
        // A state that does not hash to the agreed checkpoint does not count; a node not asked is refused.
        QVERIFY(broker->registerNode(node(QStringLiteral("c"))).ok());
        QVERIFY(!broker->checkpointDelivered(QStringLiteral("c"), checkId, *broker->blobs().put("x")).ok());
        const auto junk = broker->checkpointDelivered(QStringLiteral("a"), checkId, *broker->blobs().put("not the state"));
        QVERIFY(!junk.ok()); // answered with an ERROR that says why
        QCOMPARE(junk.error().field, QStringLiteral("state"));
        QVERIFY2(junk.error().message.contains(QStringLiteral("does not hash to the agreed checkpoint")),
            qPrintable(junk.error().message));
        QCOMPARE(broker->verifications(jobId)->first().value(QStringLiteral("state")).toString(), QStringLiteral("disputed"));
        // Asked once: a second answer is refused.
        QCOMPARE(broker->checkpointDelivered(QStringLiteral("a"), checkId, *broker->blobs().put(FakeMath::state(a1.task, 1)))
                     .error()
                     .field,
            QStringLiteral("verification"));
        const auto replays = m_math.replays;
        QVERIFY(
            broker->checkpointDelivered(QStringLiteral("b"), checkId, *broker->blobs().put(FakeMath::state(b1.task, 1))).ok());
        QCOMPARE(m_math.replays, replays + 1);
        check = broker->verifications(jobId)->first();
        QCOMPARE(check.value(QStringLiteral("outcome")).toString(), QStringLiteral("accused"));
        const auto nodes = *broker->nodes();
        QCOMPARE(nodes[0].value(QStringLiteral("timeouts")).toInteger(), 1);
        QCOMPARE(nodes[0].value(QStringLiteral("disputesLost")).toInteger(), 1);
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // An honest chain with poisoned weights: the chains agree at every checkpoint, so the dispute
    // is over what was revealed from the last state (one past the chain). Both sides are asked for
    // that state, and the referee reveals the result from it itself.
    void anHonestChainWithPoisonedWeightsLosesOverTheRevealedResult()
    {
        auto [broker, jobId, a1] = oneShardForAAndB(QStringLiteral("poisoned"));
        auto poisoned = honest(*broker, a1);
        poisoned.weightsSha256 = *broker->blobs().put("poisoned weights");
        poisoned.finalHash = Digest::ofBytes("poisoned weights");
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, poisoned), Acceptance::Held);
        const auto b1 = **broker->assign(QStringLiteral("b"));
        (void)broker->takeNotices();
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), b1.id, honest(*broker, b1)), Acceptance::Held);
        auto check = broker->verifications(jobId)->first();
        const QString checkId = check.value(QStringLiteral("id")).toString();
        QCOMPARE(check.value(QStringLiteral("state")).toString(), QStringLiteral("disputed"));
        QCOMPARE(check.value(QStringLiteral("checkpoint")).toInteger(), 4);
        int asked = 0;
        bool toldWhy = false;
        for (const auto& notice : broker->takeNotices()) {
            if (notice.kind == Notice::Kind::CheckpointRequest) {
                ++asked;
                QCOMPARE(notice.body.value(QStringLiteral("checkpoint")).toInteger(), 3); // the last state
            }
            toldWhy = toldWhy || notice.body.value(QStringLiteral("detail")).toString().contains(QStringLiteral("revealed"));
        }
        QCOMPARE(asked, 2);
        QVERIFY(toldWhy);
        QVERIFY(
            broker->checkpointDelivered(QStringLiteral("b"), checkId, *broker->blobs().put(FakeMath::state(b1.task, 3))).ok());
        check = broker->verifications(jobId)->first();
        QCOMPARE(check.value(QStringLiteral("outcome")).toString(), QStringLiteral("accused"));
        QVERIFY2(check.value(QStringLiteral("detail")).toString().contains(QStringLiteral("revealed")),
            qPrintable(check.value(QStringLiteral("detail")).toString()));
        const auto nodes = *broker->nodes();
        QCOMPARE(nodes[0].value(QStringLiteral("disputesLost")).toInteger(), 1);
        QCOMPARE(nodes[1].value(QStringLiteral("disputesLost")).toInteger(), 0);
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // What the broker asks of each node now: the CHECKPOINT bodies it sent, by node.
    static QHash<QString, QJsonObject> questions(Broker& broker)
    {
        QHash<QString, QJsonObject> asked;
        for (const auto& notice : broker.takeNotices()) {
            if (notice.kind == Notice::Kind::CheckpointRequest)
                asked.insert(notice.nodeId, notice.body);
        }
        return asked;
    }

    // A portable job's dispute is narrowed to one instruction (docs/VERIFICATION.md, "Disputes over
    // portable jobs"): both sides give their trace of the differing interval, the referee finds the
    // first differing instruction and runs it alone from the operands one side gives. Nothing is
    // replayed, and no state is asked for.
    void aPortableDisputeIsNarrowedToOneInstruction()
    {
        auto [broker, jobId, a1] = oneShardForAAndB(QStringLiteral("narrow"), verifyingOptions(), Determinism::Portable);
        QVERIFY(a1.task.portable);
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1, 2)), Acceptance::Held);
        const auto b1 = **broker->assign(QStringLiteral("b"));
        (void)broker->takeNotices();
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), b1.id, honest(*broker, b1)), Acceptance::Held);
        const QString checkId = broker->verifications(jobId)->first().value(QStringLiteral("id")).toString();
        auto asked = questions(*broker);
        QCOMPARE(asked.size(), 2);
        for (const auto& body : asked) {
            QCOMPARE(body.value(QStringLiteral("want")).toString(), QStringLiteral("trace"));
            QCOMPARE(body.value(QStringLiteral("checkpoint")).toInteger(), 2);
        }
        const auto comparisons = m_math.comparisons, replays = m_math.replays;
        QVERIFY(broker->checkpointDelivered(QStringLiteral("a"), checkId, *broker->blobs().put("t:a made this up")).ok());
        QCOMPARE(m_math.comparisons, comparisons); // waits for the other trace
        QVERIFY(!broker->checkpointDelivered(QStringLiteral("b"), checkId, Digest::ofBytes("never uploaded")).ok());
        QVERIFY(
            broker->checkpointDelivered(QStringLiteral("b"), checkId, *broker->blobs().put(FakeMath::trace(b1.task, 2))).ok());
        QCOMPARE(m_math.comparisons, comparisons + 1);
        asked = questions(*broker);
        QCOMPARE(asked.size(), 2);
        for (const auto& body : asked) {
            QCOMPARE(body.value(QStringLiteral("want")).toString(), QStringLiteral("operands"));
            QCOMPARE(body.value(QStringLiteral("step")).toInteger(), 7);
            QCOMPARE(body.value(QStringLiteral("instruction")).toInteger(), 5);
            QVERIFY(!body.contains(QStringLiteral("checkpoint")));
        }
        QCOMPARE(broker->verifications(jobId)->first().value(QStringLiteral("state")).toString(), QStringLiteral("disputed"));
        // Operands that are not the agreed values are refused and count as no answer.
        const auto junk = broker->checkpointDelivered(QStringLiteral("a"), checkId, *broker->blobs().put("o:doctored"));
        QVERIFY(!junk.ok());
        QCOMPARE(junk.error().field, QStringLiteral("operands"));
        QVERIFY(broker->checkpointDelivered(QStringLiteral("b"), checkId, *broker->blobs().put(FakeMath::operands(7, 5))).ok());
        QCOMPARE(m_math.instructionsRun, 1);
        QCOMPARE(m_math.replays, replays);
        const auto check = broker->verifications(jobId)->first();
        QCOMPARE(check.value(QStringLiteral("outcome")).toString(), QStringLiteral("accused"));
        QVERIFY2(check.value(QStringLiteral("detail")).toString().contains(QStringLiteral("ran step 7, instruction 5 Sgd")),
            qPrintable(check.value(QStringLiteral("detail")).toString()));
        const auto nodes = *broker->nodes();
        QCOMPARE(nodes[0].value(QStringLiteral("disputesLost")).toInteger(), 1);
        QCOMPARE(nodes[1].value(QStringLiteral("disputesLost")).toInteger(), 0);
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // Who cannot back its result with a trace loses: silence until the deadline, or bytes that
    // are no trace; a batch that differs is decided at once (the referee reads it itself); and a
    // restart asks again what each side still owes.
    void aPortableDisputeIsLostByTheSideWithoutAUsableTrace()
    {
        Broker::Options options = verifyingOptions();
        for (const auto* how : { "silent", "junk", "batch", "oversized" }) {
            const QString name = QStringLiteral("narrow-") + QLatin1String(how);
            auto [broker, jobId, a1] = oneShardForAAndB(name, options, Determinism::Portable);
            QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1, 2)), Acceptance::Held);
            const auto b1 = **broker->assign(QStringLiteral("b"));
            QCOMPARE(*deliver(*broker, QStringLiteral("b"), b1.id, honest(*broker, b1)), Acceptance::Held);
            const QString checkId = broker->verifications(jobId)->first().value(QStringLiteral("id")).toString();
            QVERIFY(broker->checkpointDelivered(QStringLiteral("b"), checkId, *broker->blobs().put(FakeMath::trace(b1.task, 2)))
                        .ok());
            if (QLatin1String(how) == QLatin1String("junk"))
                QVERIFY(broker->checkpointDelivered(QStringLiteral("a"), checkId, *broker->blobs().put("junk")).ok());
            if (QLatin1String(how) == QLatin1String("batch"))
                QVERIFY(
                    broker->checkpointDelivered(QStringLiteral("a"), checkId, *broker->blobs().put("t:other data:batch")).ok());
            if (QLatin1String(how) == QLatin1String("oversized")) // a trace, padded past what the program allows: not read
                QVERIFY(broker
                            ->checkpointDelivered(QStringLiteral("a"), checkId,
                                *broker->blobs().put(FakeMath::trace(a1.task, 2) + QByteArray(5000, ' ')))
                            .ok());
            if (QLatin1String(how) == QLatin1String("silent")) {
                broker.reset();
                broker = openVerifying(name);
                const auto again = questions(*broker);
                QCOMPARE(again.keys(), QList<QString>({ QStringLiteral("a") })); // b gave its trace already
                QCOMPARE(again.value(QStringLiteral("a")).value(QStringLiteral("want")).toString(), QStringLiteral("trace"));
                m_clock.now += options.disputeTimeoutMs * 10;
                broker->tick();
            }
            const auto check = broker->verifications(jobId)->first();
            QCOMPARE(check.value(QStringLiteral("outcome")).toString(), QStringLiteral("accused"));
            const QString detail = check.value(QStringLiteral("detail")).toString();
            QVERIFY2(
                detail.contains(QLatin1String(how) == QLatin1String("silent") || QLatin1String(how) == QLatin1String("oversized")
                        ? QStringLiteral("no trace came")
                        : QLatin1String(how) == QLatin1String("junk") ? QStringLiteral("not a trace")
                                                                      : QStringLiteral("read the batch")),
                qPrintable(detail));
            QVERIFY(broker->ledger().checkInvariants().ok());
        }
    }

    void aDisputeNobodyAnswersIsLostByBoth()
    {
        Broker::Options options = verifyingOptions();
        auto [broker, jobId, a1] = oneShardForAAndB(QStringLiteral("timeout"), options);
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1, 2)), Acceptance::Held);
        const auto b1 = **broker->assign(QStringLiteral("b"));
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), b1.id, honest(*broker, b1)), Acceptance::Held);
        broker->tick();
        QCOMPARE(broker->verifications(jobId)->first().value(QStringLiteral("state")).toString(), QStringLiteral("disputed"));
        m_clock.now += options.disputeTimeoutMs + 1;
        broker->tick();
        const auto check = broker->verifications(jobId)->first();
        QCOMPARE(check.value(QStringLiteral("outcome")).toString(), QStringLiteral("both"));
        QCOMPARE(broker->account(QStringLiteral("a"))->value(QStringLiteral("stake")).toString(), QStringLiteral("5"));
        QCOMPARE(broker->account(QStringLiteral("b"))->value(QStringLiteral("stake")).toString(), QStringLiteral("5"));
        QVERIFY(broker->ledger().checkInvariants().ok());
        // The ruling is in the ledger's log after the slashes it caused (docs/LEDGER.md, "Entries").
        const auto entries = *broker->logEntries(0, 1000);
        QVERIFY(!entries.isEmpty());
        const auto ruling = entries.last();
        QCOMPARE(ruling.value(QStringLiteral("kind")).toString(), QStringLiteral("verdict"));
        QCOMPARE(ruling.value(QStringLiteral("check")).toString(), check.value(QStringLiteral("id")).toString());
        QCOMPARE(ruling.value(QStringLiteral("loser")).toString(), QStringLiteral("both"));
        QCOMPARE(ruling.value(QStringLiteral("job")).toString(), jobId);
        int slashes = 0;
        for (const auto& entry : entries)
            slashes += entry.value(QStringLiteral("cause")).toString().startsWith(QStringLiteral("slash")) ? 1 : 0;
        QVERIFY(slashes >= 2);

        // Node a's portable record shows the lost dispute: a broker that trusts this network
        // credits it nothing; one that does not, or a caller it does not name, is refused.
        const auto head = *broker->log().head(std::int64_t(entries.size()));
        QStringList leaves;
        for (const auto& leaf : broker->log().entriesReply(0, 256)->value(QStringLiteral("entries")).toArray())
            leaves << leaf.toString();
        const auto record = *tessera::core::ledger::makeRecord(QStringLiteral("a"), head, leaves);
        Broker::Options trusting;
        trusting.trustedNetworks = { broker->networkId() + u':' + QString::fromLatin1(broker->signingKey().toBase64()) };
        auto elsewhere = openAsIs(QStringLiteral("elsewhere"), trusting);
        auto credited = elsewhere->creditRecord(QStringLiteral("a"), record);
        QVERIFY2(credited.ok(), credited.ok() ? "" : qPrintable(credited.error().toString()));
        QCOMPARE(credited->value(QStringLiteral("credited")).toInteger(), 0);
        QCOMPARE(credited->value(QStringLiteral("summary")).toObject().value(QStringLiteral("disputesLost")).toInt(), 1);
        QVERIFY(!elsewhere->creditRecord(QStringLiteral("b"), record).ok());
        QVERIFY(!broker->creditRecord(QStringLiteral("a"), record).ok()); // its own network
        auto untrusting = openAsIs(QStringLiteral("untrusting"), Broker::Options {});
        QVERIFY(untrusting->creditRecord(QStringLiteral("a"), record).error().message.contains(QStringLiteral("trusts")));
    }

    // The documented rule: the referee needs one usable state; without one by the deadline, every
    // side that was asked loses, one that answered with an unusable state as much as a silent one.
    void anUnusableStateAndSilenceLoseTogether()
    {
        Broker::Options options = verifyingOptions();
        for (const bool junk : { true, false }) {
            auto [broker, jobId, a1] = oneShardForAAndB(junk ? QStringLiteral("junk") : QStringLiteral("not-kept"), options);
            QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1, 2)), Acceptance::Held);
            const auto b1 = **broker->assign(QStringLiteral("b"));
            QCOMPARE(*deliver(*broker, QStringLiteral("b"), b1.id, honest(*broker, b1)), Acceptance::Held);
            const auto checkId = broker->verifications(jobId)->first().value(QStringLiteral("id")).toString();
            // b, the honest side, sends junk (or says it kept nothing); a stays silent.
            const auto answered
                = broker->checkpointDelivered(QStringLiteral("b"), checkId, junk ? *broker->blobs().put("junk") : Digest {});
            QCOMPARE(answered.ok(), !junk);
            m_clock.now += options.disputeTimeoutMs + 1;
            broker->tick();
            const auto check = broker->verifications(jobId)->first();
            QCOMPARE(check.value(QStringLiteral("outcome")).toString(), QStringLiteral("both"));
            const auto nodes = *broker->nodes();
            for (const auto& record : nodes) {
                QCOMPARE(record.value(QStringLiteral("timeouts")).toInteger(), 1);
                QCOMPARE(record.value(QStringLiteral("disputesLost")).toInteger(), 1);
            }
            QVERIFY(broker->ledger().checkInvariants().ok());
        }
    }

    // Weights are committed to by their canonical hash, not their file: weights the broker cannot
    // read are refused without a slash, and the same weights in a readable container are accepted.
    void unreadableWeightsAreRefusedNotSlashed()
    {
        auto broker = open(QStringLiteral("unreadable"));
        const auto jobId = *broker->submit(job(1, 1));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        const auto assignment = **broker->assign(QStringLiteral("a"));
        auto result = answer(*broker, assignment, "w");
        const auto readable = result.weightsSha256;
        result.weightsSha256 = *broker->blobs().put("unreadable w");
        const auto refused = deliver(*broker, QStringLiteral("a"), assignment.id, result);
        QVERIFY(!refused);
        QCOMPARE(refused.error().field, QStringLiteral("weightsSha256"));
        QCOMPARE(broker->account(QStringLiteral("a"))->value(QStringLiteral("stake")).toString(), QStringLiteral("10"));
        QCOMPARE(broker->nodes()->first().value(QStringLiteral("disputesLost")).toInteger(), 0);
        result.weightsSha256 = *broker->blobs().put("container:w");
        QCOMPARE(*broker->acceptResult(QStringLiteral("a"), assignment.id, result), Acceptance::Accepted);
        Q_UNUSED(readable);
        QCOMPARE(broker->status(jobId)->state, JobState::Finished);
    }

    // The referee checks one checkpoint: a verifier that lied there loses, but that does not prove
    // the checked result right further on, so it goes to another verifier before it is paid.
    void aLyingVerifierIsSlashedAndTheResultCheckedAgain()
    {
        auto broker = openVerifying(QStringLiteral("liar"));
        const auto jobId = *broker->submit(job(1, 1));
        for (const auto* id : { "a", "b", "c" })
            QVERIFY(broker->registerNode(node(QString::fromLatin1(id))).ok());
        const auto a1 = **broker->assign(QStringLiteral("a"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1)), Acceptance::Held);
        const auto b1 = **broker->assign(QStringLiteral("b"));
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), b1.id, honest(*broker, b1, 1)), Acceptance::Held);
        QCOMPARE(broker->verifications(jobId)->at(1).value(QStringLiteral("outcome")).toString(), QStringLiteral("verifier"));
        QCOMPARE(broker->verifications(jobId)->first().value(QStringLiteral("state")).toString(), QStringLiteral("waiting"));
        QCOMPARE(broker->account(QStringLiteral("b"))->value(QStringLiteral("stake")).toString(), QStringLiteral("5"));
        QCOMPARE(broker->account(QStringLiteral("a"))->value(QStringLiteral("stake")).toString(), QStringLiteral("10"));
        QVERIFY(!*broker->ledger().hasCause(QStringLiteral("pay:%1/0/0").arg(jobId)));
        QCOMPARE(broker->status(jobId)->state, JobState::Running);
        // Another node checks it again; now it is verified and paid.
        QVERIFY(!broker->assign(QStringLiteral("a"))->has_value());
        const auto c1 = **broker->assign(QStringLiteral("c"));
        QCOMPARE(c1.task.shard, 0);
        QCOMPARE(*deliver(*broker, QStringLiteral("c"), c1.id, honest(*broker, c1)), Acceptance::Held);
        QVERIFY(*broker->ledger().hasCause(QStringLiteral("pay:%1/0/0").arg(jobId)));
        QCOMPARE(broker->status(jobId)->state, JobState::Finished);
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // Two cheaters: the checked one is honest up to checkpoint 1 and lies after it, its verifier lies
    // from checkpoint 1. The referee sides with the checked one at checkpoint 1, and yet its result is
    // not accepted: an honest re-check exposes it.
    void aCheatCheckedByACheatIsNotAcceptedOnThatAlone()
    {
        auto broker = openVerifying(QStringLiteral("twocheats"));
        auto spec = job(1, 1);
        spec.training.localSteps = 15;
        const auto jobId = *broker->submit(spec);
        for (const auto* id : { "a", "b", "c" })
            QVERIFY(broker->registerNode(node(QString::fromLatin1(id))).ok());
        const auto a1 = **broker->assign(QStringLiteral("a"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1, 2)), Acceptance::Held);
        const auto b1 = **broker->assign(QStringLiteral("b"));
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), b1.id, honest(*broker, b1, 1)), Acceptance::Held);
        QCOMPARE(broker->verifications(jobId)->at(1).value(QStringLiteral("outcome")).toString(), QStringLiteral("verifier"));
        QCOMPARE(broker->verifications(jobId)->first().value(QStringLiteral("state")).toString(), QStringLiteral("waiting"));
        const auto c1 = **broker->assign(QStringLiteral("c"));
        QCOMPARE(*deliver(*broker, QStringLiteral("c"), c1.id, honest(*broker, c1)), Acceptance::Held);
        // a lied at checkpoint 2: c's check disputes it there, and c sends the state at checkpoint 1.
        const auto check = broker->verifications(jobId)->first();
        QCOMPARE(check.value(QStringLiteral("checkpoint")).toInteger(), 2);
        QVERIFY(broker
                    ->checkpointDelivered(QStringLiteral("c"), check.value(QStringLiteral("id")).toString(),
                        *broker->blobs().put(FakeMath::state(c1.task, 1)))
                    .ok());
        QCOMPARE(broker->verifications(jobId)->first().value(QStringLiteral("outcome")).toString(), QStringLiteral("accused"));
        QVERIFY(!*broker->ledger().hasCause(QStringLiteral("pay:%1/0/0").arg(jobId)));
        QCOMPARE(broker->account(QStringLiteral("a"))->value(QStringLiteral("stake")).toString(), QStringLiteral("5"));
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    void signedLiesAreSlashed()
    {
        auto broker = openVerifying(QStringLiteral("lies"));
        (void)*broker->submit(job(1, 2));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("b"))).ok());
        // A commitment that names another round than the assignment's (a stale result passed off as new).
        const auto a1 = **broker->assign(QStringLiteral("a"));
        auto stale = honest(*broker, a1);
        stale.round = a1.task.round + 1;
        QVERIFY(!deliver(*broker, QStringLiteral("a"), a1.id, stale).ok());
        QCOMPARE(broker->account(QStringLiteral("a"))->value(QStringLiteral("stake")).toString(), QStringLiteral("5"));
        // A chain that does not start at the round's weights, under a valid commitment.
        const auto b1 = **broker->assign(QStringLiteral("b"));
        auto elsewhere = honest(*broker, b1);
        elsewhere.checkpointHashes.first() = Digest::ofBytes("old weights");
        QVERIFY(!deliver(*broker, QStringLiteral("b"), b1.id, elsewhere).ok());
        QCOMPARE(broker->account(QStringLiteral("b"))->value(QStringLiteral("stake")).toString(), QStringLiteral("5"));
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // A fresh node bonds before its first REGISTER ("credit, stake bond, run"), when it asks
    // itself; nobody else may bond for it, and unbonding needs a registered key.
    void aFreshNodeBondsBeforeItRegisters()
    {
        auto options = verifyingOptions();
        options.faucet = false;
        auto broker = open(QStringLiteral("freshstake"), options);
        QVERIFY(
            broker->ledger().mint(QStringLiteral("balance:fresh"), *Credits::fromCredits(20), QStringLiteral("grant"), 0).ok());
        const QString brokerKey = QString::fromLatin1(broker->signingKey().toBase64());
        auto request = [&](const QString& action, const QString& nonce) {
            return signDocument({ { QStringLiteral("kind"), QStringLiteral("tessera-stake") },
                                    { QStringLiteral("node"), QStringLiteral("fresh") }, { QStringLiteral("action"), action },
                                    { QStringLiteral("amount"), QStringLiteral("10") }, { QStringLiteral("nonce"), nonce },
                                    { QStringLiteral("broker"), brokerKey },
                                    { QStringLiteral("expires"), static_cast<qint64>(m_clock.now + 60'000) } },
                keysOf(QStringLiteral("fresh")));
        };
        QCOMPARE(broker->stake(request(QStringLiteral("bond"), QStringLiteral("1")), QStringLiteral("stranger")).error().field,
            QStringLiteral("request.node"));
        QCOMPARE(broker->stake(request(QStringLiteral("unbond"), QStringLiteral("2")), QStringLiteral("fresh")).error().field,
            QStringLiteral("request.node"));
        QVERIFY(broker->stake(request(QStringLiteral("bond"), QStringLiteral("3")), QStringLiteral("fresh")).ok());
        QCOMPARE(*broker->ledger().balance(ledger::accounts::stake(QStringLiteral("fresh"))), *Credits::fromCredits(10));
        QVERIFY(
            broker->ledger()
                .mint(ledger::accounts::balance(QStringLiteral("local")), *Credits::fromCredits(100), QStringLiteral("buy"), 0)
                .ok());
        QVERIFY(broker->submit(job(1, 1)).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("fresh"))).ok());
        const auto work = broker->assign(QStringLiteral("fresh"));
        QVERIFY2(work.ok() && work->has_value(), qPrintable(work.ok() ? QString() : work.error().toString()));
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // A node that declares fewer capabilities than a job needs (docs/PROTOCOL.md, "Capabilities";
    // none: a node from before them) gets none of that job's shards; a job it can run it gets.
    void nodesGetOnlyJobsTheirCapabilitiesRun()
    {
        auto broker = open(QStringLiteral("capabilities"));
        (void)*broker->submit(job(1, 1)); // int8, the default
        auto old = node(QStringLiteral("old"));
        old.capabilities.clear();
        QVERIFY(broker->registerNode(old).ok());
        QVERIFY(!broker->assign(QStringLiteral("old"))->has_value());
        auto plain = job(1, 1);
        plain.aggregation.compression = Compression::None;
        const auto plainId = *broker->submit(plain);
        const auto work = **broker->assign(QStringLiteral("old"));
        QCOMPARE(work.task.jobId, plainId);
        auto portable = job(1, 1);
        portable.aggregation.compression = Compression::None;
        portable.training.determinism = TrainingSpec::Determinism::Portable;
        (void)*broker->submit(portable);
        auto someInt8 = node(QStringLiteral("int8-only"));
        someInt8.capabilities = { QStringLiteral("int8"), QStringLiteral("a-later-one") };
        QVERIFY(broker->registerNode(someInt8).ok());
        const auto first = **broker->assign(QStringLiteral("int8-only")); // the int8 job's shard
        QCOMPARE(first.task.compression, Compression::Int8);
        QVERIFY(!broker->assign(QStringLiteral("int8-only"))->has_value()); // never the portable one
    }

    // A node that declared int8 and reveals whole weights for an int8 task is refused at RESULT
    // (field compression), not slashed, and gets no more of that job: the shard goes to another.
    void aResultInTheWrongFormIsRefusedNotSlashed()
    {
        auto broker = open(QStringLiteral("wrong-form"));
        const auto jobId = *broker->submit(job(1, 1)); // int8, the default
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("b"))).ok());
        const auto assignment = **broker->assign(QStringLiteral("a"));
        QCOMPARE(assignment.task.compression, Compression::Int8);
        const auto refused = deliver(*broker, QStringLiteral("a"), assignment.id, answer(*broker, assignment, "whole:a"));
        QVERIFY(!refused.ok());
        QCOMPARE(refused.error().field, Verifier::WrongFormField);
        m_clock.now += Scheduler::ReturnedWaitMs; // not even once nobody else has taken it
        QVERIFY(!broker->assign(QStringLiteral("a"))->has_value());
        const auto again = **broker->assign(QStringLiteral("b"));
        QCOMPARE(again.task.shard, assignment.task.shard);
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), again.id, answer(*broker, again, "b")), Acceptance::Accepted);
        QCOMPARE(broker->status(jobId)->state, JobState::Finished);
        const auto known = *broker->nodes();
        for (const auto& record : known)
            QCOMPARE(record.value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    void stakeBondsAndUnbondsAfterADelay()
    {
        auto options = verifyingOptions();
        options.faucet = false;
        options.unbondingDelayMs = 60'000;
        auto broker = open(QStringLiteral("stake"), options);
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(broker->ledger().mint(QStringLiteral("balance:a"), *Credits::fromCredits(30), QStringLiteral("grant"), 0).ok());
        const QString brokerKey = QString::fromLatin1(broker->signingKey().toBase64());
        auto requestFor = [&](const QString& action, const QString& amount, const QString& nonce, const SigningKeys& keys,
                              const QString& forBroker, std::int64_t expires) {
            return broker->stake(signDocument(
                { { QStringLiteral("kind"), QStringLiteral("tessera-stake") }, { QStringLiteral("node"), QStringLiteral("a") },
                    { QStringLiteral("action"), action }, { QStringLiteral("amount"), amount },
                    { QStringLiteral("nonce"), nonce }, { QStringLiteral("broker"), forBroker },
                    { QStringLiteral("expires"), static_cast<qint64>(expires) } },
                keys));
        };
        auto request = [&](const QString& action, const QString& amount, const QString& nonce, const SigningKeys& keys) {
            return requestFor(action, amount, nonce, keys, brokerKey, m_clock.now + 60'000);
        };
        const auto& keys = keysOf(QStringLiteral("a"));
        // Bound to a broker and a time: another broker's request, an expired one, one valid for
        // more than a day, or one that names no broker are refused.
        const QString otherBroker = QString::fromLatin1(SigningKeys::generate().publicKey.toBase64());
        QCOMPARE(
            requestFor(QStringLiteral("bond"), QStringLiteral("1"), QStringLiteral("x"), keys, otherBroker, m_clock.now + 60'000)
                .error()
                .field,
            QStringLiteral("request.broker"));
        QCOMPARE(requestFor(QStringLiteral("bond"), QStringLiteral("1"), QStringLiteral("x"), keys, brokerKey, m_clock.now - 1)
                     .error()
                     .field,
            QStringLiteral("request.expires"));
        QCOMPARE(requestFor(QStringLiteral("bond"), QStringLiteral("1"), QStringLiteral("x"), keys, brokerKey,
                     m_clock.now + 2 * 24 * 3600 * 1000LL)
                     .error()
                     .field,
            QStringLiteral("request.expires"));
        QVERIFY(
            !broker
                 ->stake(signDocument(
                     { { QStringLiteral("kind"), QStringLiteral("tessera-stake") },
                         { QStringLiteral("node"), QStringLiteral("a") }, { QStringLiteral("action"), QStringLiteral("bond") },
                         { QStringLiteral("amount"), QStringLiteral("1") }, { QStringLiteral("nonce"), QStringLiteral("x") } },
                     keys))
                 .ok());
        QVERIFY(!broker->assign(QStringLiteral("a")).ok()); // nothing bonded
        QVERIFY(!request(QStringLiteral("bond"), QStringLiteral("20"), QStringLiteral("1"), SigningKeys::generate()).ok());
        QVERIFY(!request(QStringLiteral("bond"), QStringLiteral("31"), QStringLiteral("1"), keys).ok());
        QVERIFY(!request(QStringLiteral("give"), QStringLiteral("1"), QStringLiteral("1"), keys).ok());
        auto bonded = request(QStringLiteral("bond"), QStringLiteral("20"), QStringLiteral("1"), keys);
        QVERIFY2(bonded.ok(), qPrintable(bonded.ok() ? QString() : bonded.error().toString()));
        QCOMPARE(bonded->value(QStringLiteral("stake")).toString(), QStringLiteral("20"));
        QVERIFY(request(QStringLiteral("bond"), QStringLiteral("20"), QStringLiteral("1"), keys).ok()); // a replay: no effect
        QCOMPARE(broker->account(QStringLiteral("a"))->value(QStringLiteral("balance")).toString(), QStringLiteral("10"));
        QVERIFY(broker->assign(QStringLiteral("a")).ok());
        auto unbonded = request(QStringLiteral("unbond"), QStringLiteral("15"), QStringLiteral("2"), keys);
        QVERIFY(unbonded.ok());
        QCOMPARE(unbonded->value(QStringLiteral("unbonding")).toString(), QStringLiteral("15"));
        broker->tick();
        QCOMPARE(broker->account(QStringLiteral("a"))->value(QStringLiteral("balance")).toString(), QStringLiteral("10"));
        m_clock.now += 60'001;
        broker->tick();
        broker->tick();
        QCOMPARE(broker->account(QStringLiteral("a"))->value(QStringLiteral("balance")).toString(), QStringLiteral("25"));
        QCOMPARE(broker->account(QStringLiteral("a"))->value(QStringLiteral("stake")).toString(), QStringLiteral("5"));
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    void aSampleNobodyCanCheckIsReExecutedByTheBroker()
    {
        auto options = verifyingOptions();
        options.selfVerifyAfterMs = 1000;
        auto broker = open(QStringLiteral("self"), options);
        const auto jobId = *broker->submit(job(1, 1));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        const auto a1 = **broker->assign(QStringLiteral("a"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1)), Acceptance::Held);
        QVERIFY(!broker->assign(QStringLiteral("a"))->has_value()); // its own check is not for it
        broker->tick();
        QCOMPARE(broker->status(jobId)->state, JobState::Running);
        m_clock.now += 1001;
        broker->tick();
        QCOMPARE(broker->status(jobId)->state, JobState::Finished);
        QVERIFY(*broker->ledger().hasCause(QStringLiteral("pay:%1/0/0").arg(jobId)));
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    void aSampleNoConnectedNodeCouldCheckIsReExecutedSoon()
    {
        auto options = verifyingOptions();
        options.selfVerifyAfterMs = 120'000;
        options.selfVerifyAloneAfterMs = 5'000;
        auto broker = open(QStringLiteral("alone"), options);
        const auto jobId = *broker->submit(job(1, 2));
        auto other = node(QStringLiteral("b"));
        other.runtimeProfile = QStringLiteral("another profile");
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        QVERIFY(broker->registerNode(other).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("c"))).ok());
        const auto a1 = **broker->assign(QStringLiteral("a"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1)), Acceptance::Held);
        m_clock.now += 60'000;
        broker->tick();
        // c has a's profile and could check the sample: it waits for c.
        QCOMPARE(broker->verifications(jobId)->first().value(QStringLiteral("state")).toString(), QStringLiteral("waiting"));
        // c leaves; b's profile differs, so nobody connected could check it: the broker does, at once.
        broker->nodeLost(QStringLiteral("c"));
        broker->tick();
        QCOMPARE(broker->verifications(jobId)->first().value(QStringLiteral("state")).toString(), QStringLiteral("verified"));
        QVERIFY(*broker->ledger().hasCause(QStringLiteral("pay:%1/0/%2").arg(jobId).arg(a1.task.shard)));
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    void aBrokerJustStartedWaitsForItsNodesBeforeCheckingAlone()
    {
        auto options = verifyingOptions();
        options.selfVerifyAfterMs = 120'000;
        options.selfVerifyAloneAfterMs = 5'000;
        QString jobId;
        {
            auto broker = open(QStringLiteral("restarted"), options);
            jobId = *broker->submit(job(1, 1));
            QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
            const auto a1 = **broker->assign(QStringLiteral("a"));
            QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1)), Acceptance::Held);
            m_clock.now += 1'000;
        }
        m_clock.now += 60'000;
        auto broker = open(QStringLiteral("restarted"), options);
        broker->tick(); // no node is back yet, but the broker has just started: it waits
        QCOMPARE(broker->status(jobId)->state, JobState::Running);
        QVERIFY(broker->registerNode(node(QStringLiteral("c"))).ok());
        m_clock.now += 5'000;
        broker->tick(); // c could check it
        QCOMPARE(broker->status(jobId)->state, JobState::Running);
        broker->nodeLost(QStringLiteral("c"));
        broker->tick();
        QCOMPARE(broker->status(jobId)->state, JobState::Finished);
    }

    void canariesRecheckKnownAnswers()
    {
        auto options = verifyingOptions();
        options.canaryRate = 1.0;
        auto broker = open(QStringLiteral("canary"), options);
        const auto jobId = *broker->submit(job(1, 2));
        for (const auto* id : { "a", "b" })
            QVERIFY(broker->registerNode(node(QString::fromLatin1(id))).ok());
        const auto a1 = **broker->assign(QStringLiteral("a"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1)), Acceptance::Held);
        const auto b1 = **broker->assign(QStringLiteral("b")); // the check of a's result: b is the only one to draw
        QCOMPARE(b1.task.shard, a1.task.shard);
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), b1.id, honest(*broker, b1)), Acceptance::Held);
        QVERIFY(broker->registerNode(node(QStringLiteral("c"))).ok());
        // c is handed shard 0 again, as if it were new, and gets it wrong.
        const auto c1 = **broker->assign(QStringLiteral("c"));
        QCOMPARE(c1.task.shard, 0);
        QCOMPARE(*deliver(*broker, QStringLiteral("c"), c1.id, honest(*broker, c1, 1)), Acceptance::Held);
        const auto canary = broker->verifications(jobId)->first();
        QCOMPARE(canary.value(QStringLiteral("kind")).toString(), QStringLiteral("canary"));
        QCOMPARE(canary.value(QStringLiteral("outcome")).toString(), QStringLiteral("verifier"));
        QCOMPARE(broker->account(QStringLiteral("c"))->value(QStringLiteral("stake")).toString(), QStringLiteral("5"));
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // Who checks whom (docs/VERIFICATION.md): never a node at the checked node's address, never a
    // frequent partner (3 of the node's latest 6 checks) while another node may.
    void whoChecksWhomIsDrawnNotArranged()
    {
        auto options = verifyingOptions();
        options.auditRate = 0.0;
        auto broker = open(QStringLiteral("who-checks"), options);
        (void)*broker->submit(job(1, 8));
        QVERIFY(broker->registerNode(node(QStringLiteral("a")), QStringLiteral("10.0.0.1")).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("b")), QStringLiteral("10.0.0.2")).ok());
        QVERIFY(broker->registerNode(node(QStringLiteral("twin")), QStringLiteral("10.0.0.1")).ok()); // a's address
        // b checks a's first three results: the only node that may (twin shares a's address).
        for (int i = 0; i < 3; ++i) {
            const auto trained = **broker->assign(QStringLiteral("a"));
            QCOMPARE(*deliver(*broker, QStringLiteral("a"), trained.id, honest(*broker, trained)), Acceptance::Held);
            const auto check = **broker->assign(QStringLiteral("b"));
            QCOMPARE(check.task.shard, trained.task.shard);
            QCOMPARE(*deliver(*broker, QStringLiteral("b"), check.id, honest(*broker, check)), Acceptance::Held);
        }
        // Now b is a's frequent partner: with h there, a's next result goes to h, whoever asks first.
        QVERIFY(broker->registerNode(node(QStringLiteral("h")), QStringLiteral("10.0.0.3")).ok());
        const auto trained = **broker->assign(QStringLiteral("a"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), trained.id, honest(*broker, trained)), Acceptance::Held);
        for (const auto* other : { "b", "twin" }) {
            const auto work = **broker->assign(QString::fromLatin1(other));
            QVERIFY2(work.task.shard != trained.task.shard, other); // a shard of its own to train
        }
        const auto check = **broker->assign(QStringLiteral("h"));
        QCOMPARE(check.task.shard, trained.task.shard);
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    // A result carries its node's registered runtime profile (a portable task's, the portable
    // one): a node cannot name a profile only its partner has, to choose who checks it.
    void aResultCarriesItsNodesOwnProfile()
    {
        auto broker = open(QStringLiteral("own-profile"), verifyingOptions());
        (void)*broker->submit(job(1, 2));
        QVERIFY(broker->registerNode(node(QStringLiteral("a"))).ok());
        const auto trained = **broker->assign(QStringLiteral("a"));
        auto result = honest(*broker, trained);
        result.runtimeProfile = QStringLiteral("cpu=only-my-partner");
        const auto refused = deliver(*broker, QStringLiteral("a"), trained.id, result);
        QVERIFY(!refused.ok());
        QCOMPARE(refused.error().field, QStringLiteral("runtimeProfile"));
        result.runtimeProfile = PortableProfile; // a fast task's result is not portable
        QCOMPARE(deliver(*broker, QStringLiteral("a"), trained.id, result).error().field, QStringLiteral("runtimeProfile"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), trained.id, honest(*broker, trained)), Acceptance::Held);
        QCOMPARE(broker->account(QStringLiteral("a"))->value(QStringLiteral("stake")).toString(), QStringLiteral("10"));
    }

    // A node that gives a check back is not drawn for it again: the next node is.
    void aCheckGivenBackIsNotDrawnForItsNodeAgain()
    {
        auto broker = open(QStringLiteral("declined"), verifyingOptions());
        (void)*broker->submit(job(1, 4));
        for (const auto* id : { "a", "b" })
            QVERIFY(broker->registerNode(node(QString::fromLatin1(id))).ok());
        const auto trained = **broker->assign(QStringLiteral("a"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), trained.id, honest(*broker, trained)), Acceptance::Held);
        const auto check = **broker->assign(QStringLiteral("b"));
        QCOMPARE(check.task.shard, trained.task.shard);
        (void)deliver(*broker, QStringLiteral("b"), check.id,
            failure(check, QStringLiteral("the disk is full"), ShardResult::Outcome::Returned));
        QVERIFY(broker->registerNode(node(QStringLiteral("c"))).ok());
        const auto other = **broker->assign(QStringLiteral("b"));
        QVERIFY(other.task.shard != trained.task.shard); // work of its own, not the check again
        const auto again = **broker->assign(QStringLiteral("c"));
        QCOMPARE(again.task.shard, trained.task.shard);
    }

    // Two nodes that agree on the same wrong result pass a check, unless the broker re-executes
    // it too (an audit, Broker/AuditPercent): then both lost, both are slashed, and the shard is
    // trained again.
    void anAuditCatchesAPairThatAgreedOnALie()
    {
        auto options = verifyingOptions();
        options.auditRate = 1.0;
        auto broker = open(QStringLiteral("audit"), options);
        const auto jobId = *broker->submit(job(1, 2));
        for (const auto* id : { "a", "b" })
            QVERIFY(broker->registerNode(node(QString::fromLatin1(id))).ok());
        const auto trained = **broker->assign(QStringLiteral("a"));
        QCOMPARE(*deliver(*broker, QStringLiteral("a"), trained.id, honest(*broker, trained, 1)), Acceptance::Held);
        const auto check = **broker->assign(QStringLiteral("b"));
        QCOMPARE(check.task.shard, trained.task.shard);
        const int replays = m_math.replays;
        QCOMPARE(*deliver(*broker, QStringLiteral("b"), check.id, honest(*broker, check, 1)), Acceptance::Held);
        QCOMPARE(m_math.replays, replays + 1); // the broker's own run of the shard
        const auto decided = broker->verifications(jobId)->first();
        QCOMPARE(decided.value(QStringLiteral("outcome")).toString(), QStringLiteral("both"));
        for (const auto* id : { "a", "b" })
            QCOMPARE(broker->account(QString::fromLatin1(id))->value(QStringLiteral("stake")).toString(), QStringLiteral("5"));
        // Honest results that agree pass the audit (a and b, slashed below the stake work needs, are gone).
        broker->nodeLost(QStringLiteral("a"));
        broker->nodeLost(QStringLiteral("b"));
        for (const auto* id : { "c", "d" })
            QVERIFY(broker->registerNode(node(QString::fromLatin1(id))).ok());
        const auto again = **broker->assign(QStringLiteral("c"));
        QCOMPARE(*deliver(*broker, QStringLiteral("c"), again.id, honest(*broker, again)), Acceptance::Held);
        const auto recheck = **broker->assign(QStringLiteral("d"));
        QCOMPARE(recheck.task.shard, again.task.shard);
        QCOMPARE(*deliver(*broker, QStringLiteral("d"), recheck.id, honest(*broker, recheck)), Acceptance::Held);
        QCOMPARE(m_math.replays, replays + 2);
        for (const auto* id : { "c", "d" })
            QCOMPARE(broker->account(QString::fromLatin1(id))->value(QStringLiteral("stake")).toString(), QStringLiteral("10"));
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    void aRestartKeepsADisputeGoing()
    {
        auto spec = job(1, 1);
        spec.training.localSteps = 15;
        QString jobId, checkId;
        ShardTask task;
        {
            auto broker = openVerifying(QStringLiteral("restart"));
            jobId = *broker->submit(spec);
            for (const auto* id : { "a", "b" })
                QVERIFY(broker->registerNode(node(QString::fromLatin1(id))).ok());
            const auto a1 = **broker->assign(QStringLiteral("a"));
            QCOMPARE(*deliver(*broker, QStringLiteral("a"), a1.id, honest(*broker, a1, 2)), Acceptance::Held);
            const auto b1 = **broker->assign(QStringLiteral("b"));
            QCOMPARE(*deliver(*broker, QStringLiteral("b"), b1.id, honest(*broker, b1)), Acceptance::Held);
            checkId = broker->verifications(jobId)->first().value(QStringLiteral("id")).toString();
            task = b1.task;
        }
        auto broker = openVerifying(QStringLiteral("restart"));
        int requests = 0;
        for (const auto& notice : broker->takeNotices())
            requests += notice.kind == Notice::Kind::CheckpointRequest ? 1 : 0;
        QCOMPARE(requests, 2);
        for (const auto* id : { "a", "b" })
            QVERIFY(broker->registerNode(node(QString::fromLatin1(id))).ok());
        QVERIFY(broker->checkpointDelivered(QStringLiteral("b"), checkId, *broker->blobs().put(FakeMath::state(task, 1))).ok());
        QCOMPARE(broker->verifications(jobId)->first().value(QStringLiteral("outcome")).toString(), QStringLiteral("accused"));
        QVERIFY(!broker->checkpointDelivered(QStringLiteral("a"), checkId, *broker->blobs().put("late")).ok());
        QVERIFY(broker->ledger().checkInvariants().ok());
    }

    void runningJobsPerOwnerAreLimited()
    {
        auto options = verifyingOptions();
        options.maxRunningJobsPerOwner = 2;
        auto broker = open(QStringLiteral("perowner"), options);
        const auto first = broker->submit(job(), QStringLiteral("alice"));
        QVERIFY(first.ok());
        QVERIFY(broker->submit(job(), QStringLiteral("alice")).ok());
        const auto third = broker->submit(job(), QStringLiteral("alice"));
        QVERIFY(!third.ok());
        QCOMPARE(third.error().field, QStringLiteral("job"));
        QVERIFY(third.error().message.contains(QStringLiteral("MaxJobsPerOwner")));
        QVERIFY(broker->submit(job(), QStringLiteral("bob")).ok());
        QVERIFY(broker->cancel(*first).ok());
        QVERIFY(broker->submit(job(), QStringLiteral("alice")).ok());
        QVERIFY(broker->ledger().checkInvariants().ok());
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
