// A node's session rules, in process: a real NodeClient against a test that plays the broker on a
// ROUTER socket over inproc://, with a clock that moves only when the test says so. Registration,
// the reconnect backoff (1 s doubling to 32 s), what keeps a session alive, and replies matched by
// id, in milliseconds.

#include "sessionpeer.h"

#include <core/blobstore.h>
#include <core/certificates.h>
#include <core/readfile.h>
#include <net/blobcoding.h>
#include <net/messages.h>
#include <net/nodeclient.h>
#include <net/resultrelay.h>

#include <QTemporaryDir>
#include <QTest>

#include <mutex>
#include <thread>

using namespace tessera;
using net::Command;
using tests::SessionPeer;

namespace {

// A shard of `task` that failed (out of memory): a result to report without any training.
core::ShardResult failedResult(const core::ShardTask& task)
{
    core::ShardResult result;
    result.jobId = task.jobId;
    result.round = task.round;
    result.shard = task.shard;
    result.outcome = core::ShardResult::Outcome::Failed;
    result.failure = QStringLiteral("out of memory");
    return result;
}

// Trains nothing; these tests are about the session.
class IdleExecutor final : public net::ShardExecutor {
public:
    void start(const QString&, const QString&, const core::ShardTask&, const QByteArray&, const QString&,
        const QHash<core::Digest, QString>&, std::int64_t) override
    { }
    QList<Finished> takeFinished(const QString&) override { return {}; }
    bool idle() const override { return true; }
};

// Ends every shard at once, as failed: a result to report without any training.
class FailingExecutor final : public net::ShardExecutor {
public:
    void start(const QString& tag, const QString& assignment, const core::ShardTask& task, const QByteArray&, const QString&,
        const QHash<core::Digest, QString>&, std::int64_t) override
    {
        m_finished.append({ tag, assignment, failedResult(task), {}, {}, {}, {} });
    }
    QList<Finished> takeFinished(const QString&) override { return std::exchange(m_finished, {}); }
    bool idle() const override { return m_finished.isEmpty(); }

private:
    QList<Finished> m_finished;
};

// Rebuilds a round's weights as "<previous>+<change>" (stand-in arithmetic: the real one is
// tested in tst_training), at once; then fails the shard it is given, recording what it started from.
class RebuildingExecutor final : public net::ShardExecutor {
public:
    QList<QByteArray> startedWith;
    QList<std::int64_t> deadlines; // the deadlineMs each start() was given
    bool rebuildsWeights() const override { return true; }
    void rebuild(const QString& tag, const QString& key, const QString& previousPath, const QString& changePath) override
    {
        auto previous = core::readFile(previousPath);
        auto change = core::readFile(changePath);
        const QByteArray made = *previous + '+' + *change;
        m_rebuilt.append({ tag, key, made, core::Digest::ofBytes(made), {} });
    }
    QList<Rebuilt> takeRebuilt(const QString&) override { return std::exchange(m_rebuilt, {}); }
    void start(const QString& tag, const QString& assignment, const core::ShardTask& task, const QByteArray& startWeights,
        const QString&, const QHash<core::Digest, QString>& paths, std::int64_t deadlineMs) override
    {
        startedWith.append(startWeights);
        deadlines.append(deadlineMs);
        m_failing.start(tag, assignment, task, startWeights, {}, paths, deadlineMs);
    }
    QList<Finished> takeFinished(const QString& tag) override { return m_failing.takeFinished(tag); }
    bool idle() const override { return m_failing.idle(); }

private:
    QList<Rebuilt> m_rebuilt;
    FailingExecutor m_failing;
};

// Ends every shard at once, completed, with `weights` as what it reveals.
class CompletingExecutor final : public net::ShardExecutor {
public:
    QByteArray weights;
    QList<QByteArray> startedWith;
    void start(const QString& tag, const QString& assignment, const core::ShardTask& task, const QByteArray& startWeights,
        const QString&, const QHash<core::Digest, QString>&, std::int64_t) override
    {
        startedWith.append(startWeights);
        core::ShardResult result;
        result.jobId = task.jobId;
        result.round = task.round;
        result.shard = task.shard;
        result.outcome = core::ShardResult::Outcome::Completed;
        result.weightsSha256 = core::Digest::ofBytes(weights);
        m_finished.append({ tag, assignment, result, weights, {}, {}, {} });
    }
    QList<Finished> takeFinished(const QString&) override { return std::exchange(m_finished, {}); }
    bool idle() const override { return m_finished.isEmpty(); }

private:
    QList<Finished> m_finished;
};

// Finishes a shard only when told, from another thread, as the compute thread does, and says so
// through notify() (the executor's signal that wakes the client's loop).
class LaterExecutor final : public net::ShardExecutor {
public:
    void start(const QString& tag, const QString& assignment, const core::ShardTask& task, const QByteArray&, const QString&,
        const QHash<core::Digest, QString>&, std::int64_t) override
    {
        const std::lock_guard lock(m_mutex);
        m_started = Finished { tag, assignment, failedResult(task), {}, {}, {}, {} };
    }
    bool started() const
    {
        const std::lock_guard lock(m_mutex);
        return m_started.has_value();
    }
    void finish()
    {
        QString tag;
        {
            const std::lock_guard lock(m_mutex);
            tag = m_started->tag;
            m_finished.append(*std::exchange(m_started, std::nullopt));
        }
        notify(tag);
    }
    QList<Finished> takeFinished(const QString&) override
    {
        const std::lock_guard lock(m_mutex);
        return std::exchange(m_finished, {});
    }
    bool idle() const override
    {
        const std::lock_guard lock(m_mutex);
        return m_finished.isEmpty() && !m_started;
    }

private:
    mutable std::mutex m_mutex;
    std::optional<Finished> m_started;
    QList<Finished> m_finished;
};

} // namespace

class NodeClientTest : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    core::ManualClock m_clock;
    zmq::context_t m_context;
    IdleExecutor m_idle;
    FailingExecutor m_failing;
    std::unique_ptr<core::BlobStore> m_cache;
    int m_serial = 0;

    struct Session {
        std::unique_ptr<SessionPeer> broker;
        std::unique_ptr<net::NodeClient> node;
        auto pump()
        {
            return [this] { node->step(0); };
        }
    };

    Session start(net::ShardExecutor* executor = nullptr, std::optional<net::NodeSwarm::Options> swarm = std::nullopt,
        std::shared_ptr<net::ResultRelay> relay = {}, const QString& tag = QStringLiteral("t"))
    {
        if (!m_cache)
            m_cache = std::move(core::BlobStore::open(m_dir.filePath(QStringLiteral("cache")), 1 << 20)).value();
        const std::string endpoint = "inproc://fake-broker-" + std::to_string(++m_serial);
        Session session;
        session.broker = std::make_unique<SessionPeer>(m_context, zmq::socket_type::router, endpoint, true);
        net::NodeClientOptions options;
        options.broker = *net::BrokerAddress::parse(QStringLiteral("tcp://127.0.0.1:1"));
        options.broker.endpoint = QString::fromStdString(endpoint);
        options.node.nodeId = QStringLiteral("node");
        options.node.softwareVersion = QStringLiteral("test");
        options.node.runtimeProfile = QStringLiteral("p");
        options.node.maxThreads = 1;
        options.context = &m_context;
        options.swarm = swarm;
        options.relay = std::move(relay);
        session.node = std::make_unique<net::NodeClient>(options, executor ? *executor : m_idle, *m_cache, tag, m_clock);
        return session;
    }

    // The next REGISTER the fake broker hears.
    static std::optional<tests::Received> nextRegister(Session& session)
    {
        auto received = session.broker->nextSkippingHeartbeats(session.pump());
        if (!received || received->message.command != Command::Register)
            return std::nullopt;
        return received;
    }

    // The node registers, is welcomed and asks for work: its REGISTER, once its READY has come.
    static std::optional<tests::Received> registeredAndReady(Session& session, const QString& network = {})
    {
        auto registration = nextRegister(session);
        if (!registration)
            return std::nullopt;
        welcome(session, *registration, {}, network);
        auto ready = session.broker->nextSkippingHeartbeats(session.pump());
        if (!ready || ready->message.command != Command::Ready)
            return std::nullopt;
        return registration;
    }

    static void welcome(
        Session& session, const tests::Received& registration, const QStringList& encodings = {}, const QString& network = {})
    {
        QJsonObject header = net::Welcome { QStringLiteral("node"), 1000, QStringLiteral("1"), encodings, 0, network }.toHeader();
        header.insert(net::fields::Id, registration.message.header.value(net::fields::Id));
        session.broker->send(Command::Welcome, header, {}, registration.routingId);
        for (int i = 0; i < 50 && session.node->session() != net::NodeClient::Session::Registered; ++i)
            session.node->step(10);
    }

private Q_SLOTS:
    void aSilentBrokerIsLeftWithABackoffThatDoublesTo32Seconds()
    {
        auto session = start();
        QVERIFY(nextRegister(session));
        QCOMPARE(session.node->session(), net::NodeClient::Session::Registering);
        QList<int> waits;
        for (int attempt = 0; attempt < 7; ++attempt) {
            // No answer for three heartbeats: the node leaves, and comes back after its backoff.
            m_clock.advance(3'001);
            session.node->step(0);
            QCOMPARE(session.node->session(), net::NodeClient::Session::Disconnected);
            waits.append(session.node->backoffMs());
            m_clock.advance(session.node->backoffMs() - 1);
            session.node->step(0);
            QCOMPARE(session.node->session(), net::NodeClient::Session::Disconnected); // not a moment too soon
            m_clock.advance(1);
            QVERIFY(nextRegister(session));
        }
        QCOMPARE(waits, (QList<int> { 1'000, 2'000, 4'000, 8'000, 16'000, 32'000, 32'000 }));
        QCOMPARE(session.node->counters().reconnects, 7);
    }

    void aWelcomeEndsTheBackoff()
    {
        auto session = start();
        QVERIFY(nextRegister(session));
        m_clock.advance(3'001);
        session.node->step(0);
        m_clock.advance(session.node->backoffMs());
        auto registration = nextRegister(session);
        QVERIFY(registration);
        welcome(session, *registration);
        QCOMPARE(session.node->session(), net::NodeClient::Session::Registered);
        QCOMPARE(session.node->backoffMs(), 0);
        QCOMPARE(session.node->counters().registrations, 1);
        // Registered and idle: it asks for work.
        auto ready = session.broker->nextSkippingHeartbeats(session.pump());
        QVERIFY(ready && ready->message.command == Command::Ready);
    }

    // docs/PROTOCOL.md, "Round trips": a HEARTBEAT with a probe is echoed at once (the broker
    // measures the node's round trip by it); one without, or with an oversized probe, is not.
    void aProbeIsEchoedAtOnce()
    {
        auto session = start();
        auto registration = nextRegister(session);
        QVERIFY(registration);
        welcome(session, *registration);
        session.broker->drain(session.pump());
        const QString huge(65, u'f');
        session.broker->send(Command::Heartbeat, { { QStringLiteral("probe"), huge } }, {}, registration->routingId);
        session.broker->send(Command::Heartbeat, {}, {}, registration->routingId);
        session.broker->send(
            Command::Heartbeat, { { QStringLiteral("probe"), QStringLiteral("8badf00d8badf00d") } }, {}, registration->routingId);
        std::optional<tests::Received> echo;
        QVERIFY(QTest::qWaitFor(
            [&] {
                session.node->step(5);
                echo = session.broker->next([] {}, 5);
                return echo.has_value();
            },
            10'000));
        QCOMPARE(echo->message.command, Command::Heartbeat);
        QCOMPARE(echo->message.header.value(QStringLiteral("echo")).toString(), QStringLiteral("8badf00d8badf00d"));
        QVERIFY(!session.broker->next(session.pump(), 50)); // the others had none
    }

    void anyMessageFromTheBrokerKeepsTheSessionAndSilenceEndsIt()
    {
        auto session = start();
        auto registration = nextRegister(session);
        QVERIFY(registration);
        welcome(session, *registration);
        // Ten seconds of verdicts about nothing, never a HEARTBEAT: the node stays.
        for (int i = 0; i < 20; ++i) {
            m_clock.advance(500);
            session.broker->send(Command::Verdict,
                net::VerdictMessage { QStringLiteral("x"), core::CheckVerdict::Paid, core::Credits::parse(u"1").value(), {} }
                    .toHeader(),
                {}, registration->routingId);
            session.node->step(5);
        }
        QCOMPARE(session.node->session(), net::NodeClient::Session::Registered);
        QCOMPARE(session.node->counters().reconnects, 0);
        // It heartbeats while the broker talks, and leaves after three silent intervals.
        session.broker->drain(session.pump());
        m_clock.advance(3'001);
        session.node->step(0);
        QCOMPARE(session.node->session(), net::NodeClient::Session::Disconnected);
    }

    // A broker that restarted knows no session: its "not-registered" to a result in flight starts a new
    // session on the same connection, and the result goes again, once, in the new one.
    void aResultInFlightWhenTheBrokerForgetsTheSessionGoesAgain()
    {
        auto session = start(&m_failing);
        const auto registration = registeredAndReady(session);
        QVERIFY(registration);
        const auto weights = m_cache->put("start weights");
        QVERIFY(weights);
        auto task = taskOf(QStringLiteral("a1"), *weights);
        task.task.round = 3;
        task.task.shard = 1;
        session.broker->send(Command::Task, task.toHeader(), {}, registration->routingId);
        auto result = session.broker->nextSkippingHeartbeats(session.pump());
        QVERIFY(result && result->message.command == Command::Result);
        QCOMPARE(result->message.header.value(net::fields::Assignment).toString(), QStringLiteral("a1"));
        // The broker restarts: a heartbeat, then the RESULT, meet a broker that knows no one.
        QJsonObject forgotten { { net::fields::Code, net::errors::NotRegistered },
            { net::fields::Message, QStringLiteral("send REGISTER first") } };
        session.broker->send(Command::Error, forgotten, {}, registration->routingId);
        forgotten.insert(net::fields::Id, result->message.header.value(net::fields::Id));
        session.broker->send(Command::Error, forgotten, {}, registration->routingId);
        auto again = nextRegister(session);
        QVERIFY(again);
        QCOMPARE(session.node->session(), net::NodeClient::Session::Registering);
        QVERIFY(!session.broker->nextSkippingHeartbeats(session.pump(), 50)); // one registration, nothing else
        welcome(session, *again);
        auto resent = session.broker->nextSkippingHeartbeats(session.pump());
        QVERIFY(resent && resent->message.command == Command::Result);
        QCOMPARE(resent->message.header.value(net::fields::Assignment).toString(), QStringLiteral("a1"));
        QCOMPARE(session.node->counters().registrations, 2);
    }

    // A shard that finishes on another thread wakes the node's loop, which reports it at once: the
    // loop waits on the executor's signal beside the socket and does not poll for it. (Without the
    // signal this test waits out its ten-minute step and fails by timeout.)
    void aShardFinishedElsewhereWakesTheLoop()
    {
        LaterExecutor executor;
        auto session = start(&executor);
        const auto registration = registeredAndReady(session);
        QVERIFY(registration);
        const auto weights = m_cache->put("start weights");
        QVERIFY(weights);
        session.broker->send(Command::Task, taskOf(QStringLiteral("w1"), *weights).toHeader(), {}, registration->routingId);
        for (int i = 0; i < 500 && !executor.started(); ++i)
            session.node->step(10);
        QVERIFY(executor.started());
        std::thread computeThread([&executor] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100)); // the node waits by then, most likely
            executor.finish();
        });
        session.node->step(600'000); // returns on the signal
        computeThread.join();
        session.node->step(0);
        auto result = session.broker->nextSkippingHeartbeats(session.pump());
        QVERIFY(result && result->message.command == Command::Result);
        QCOMPARE(result->message.header.value(net::fields::Assignment).toString(), QStringLiteral("w1"));
    }

    // Two sessions of one node with two brokers of one network (WELCOME's network). The first
    // broker's shard finishes after that broker went silent (killed); once it has been silent for
    // longer than a job's lease the result goes to the relay and out through the second broker.
    // That one refuses it (ERROR standby: another broker holds the job still), so it goes back to
    // the relay and, 2 s on, out through the first broker, back by then. Each time exactly one
    // session sends it (docs/PROTOCOL.md, "Several brokers of one network").
    void aResultWhoseBrokerWentSilentGoesThroughAnotherBrokerOfItsNetwork()
    {
        LaterExecutor executor;
        auto relay = std::make_shared<net::ResultRelay>(m_dir.filePath(QStringLiteral("relay")));
        auto first = start(&executor, std::nullopt, relay, QStringLiteral("first"));
        auto second = start(&executor, std::nullopt, relay, QStringLiteral("second"));
        const QString network = QStringLiteral("0123456789abcdef0123456789abcdef");
        const auto toFirst = registeredAndReady(first, network);
        const auto toSecond = registeredAndReady(second, network);
        QVERIFY(toFirst && toSecond);
        const auto weights = m_cache->put("start weights");
        QVERIFY(weights);
        first.broker->send(Command::Task, taskOf(QStringLiteral("h1"), *weights).toHeader(), {}, toFirst->routingId);
        for (int i = 0; i < 500 && !executor.started(); ++i)
            first.node->step(10);
        QVERIFY(executor.started());
        // Time passes; the second broker keeps talking, the first is silent.
        auto passes = [&](std::int64_t ms) {
            for (std::int64_t at = 0; at < ms; at += 500) {
                m_clock.advance(500);
                second.broker->send(Command::Heartbeat, {}, {}, toSecond->routingId);
                second.node->step(0);
                first.node->step(0);
            }
        };
        // The first `command` a session's broker hears while time passes, half a second at a time.
        auto awaited = [&](Session& session, Command command, int steps) -> std::optional<tests::Received> {
            for (int i = 0; i < steps; ++i) {
                passes(500);
                while (auto message = session.broker->next(session.pump(), 0)) {
                    if (message->message.command == command)
                        return message;
                }
            }
            return std::nullopt;
        };
        passes(3'500);
        QCOMPARE(first.node->session(), net::NodeClient::Session::Disconnected);
        executor.finish();
        passes(3'000); // 6.5 s of silence: the broker may be back within a job's lease
        QCOMPARE(relay->size(), 0);
        const auto delivered = awaited(second, Command::Result, 20);
        QVERIFY(delivered); // after 10 s of silence
        QCOMPARE(delivered->message.header.value(net::fields::Assignment).toString(), QStringLiteral("h1"));
        QCOMPARE(relay->size(), 0); // taken: one session holds it

        // The second broker does not hold the job: back to the relay, for 2 s.
        QJsonObject standby { { net::fields::Code, net::errors::Standby },
            { net::fields::Message, QStringLiteral("another broker of the network holds the job") },
            { net::fields::Id, delivered->message.header.value(net::fields::Id) } };
        second.broker->send(Command::Error, standby, {}, toSecond->routingId);
        second.node->step(50);
        QCOMPARE(relay->size(), 1);
        // The first broker is back: the first session registers again and takes it once due.
        // Its latest REGISTER (each reconnect sends one, on a new socket), while it waits for WELCOME.
        std::optional<tests::Received> again;
        for (int i = 0; i < 40 && !(again && first.node->session() == net::NodeClient::Session::Registering); ++i) {
            if (first.node->session() != net::NodeClient::Session::Registering)
                again.reset();
            passes(500);
            while (auto message = first.broker->next(first.pump(), 0)) {
                if (message->message.command == Command::Register)
                    again = message;
            }
        }
        QVERIFY(again);
        QCOMPARE(first.node->session(), net::NodeClient::Session::Registering);
        welcome(first, *again, {}, network);
        const auto resent = awaited(first, Command::Result, 10);
        QVERIFY(resent);
        QCOMPARE(resent->message.header.value(net::fields::Assignment).toString(), QStringLiteral("h1"));
        QCOMPARE(relay->size(), 0);
        for (int i = 0; i < 10; ++i) {
            auto more = second.broker->next(second.pump(), 0);
            QVERIFY(!more || more->message.command != Command::Result); // not twice
        }
    }

    // A task with a field of a later protocol: the node gives it back (outcome returned, saying
    // why) at once, instead of leaving it to its deadline (docs/PROTOCOL.md, "Capabilities").
    void aTaskWithAFieldItDoesNotKnowIsGivenBack()
    {
        auto session = start(&m_failing);
        const auto registration = registeredAndReady(session);
        QVERIFY(registration);
        const auto weights = m_cache->put("start weights");
        QVERIFY(weights);
        auto header = taskOf(QStringLiteral("later"), *weights).toHeader();
        auto task = header.value(net::fields::Task).toObject();
        task.insert(QStringLiteral("aLaterField"), QStringLiteral("x"));
        header.insert(net::fields::Task, task);
        session.broker->send(Command::Task, header, {}, registration->routingId);
        auto result = session.broker->nextSkippingHeartbeats(session.pump());
        QVERIFY(result && result->message.command == Command::Result);
        QCOMPARE(result->message.header.value(net::fields::Assignment).toString(), QStringLiteral("later"));
        const auto request = net::ResultRequest::fromHeader(result->message.header);
        QVERIFY2(request.ok(), qPrintable(request.ok() ? QString() : request.error().toString()));
        QCOMPARE(request->result.outcome, core::ShardResult::Outcome::Returned);
        QCOMPARE(request->result.round, 1);
        QVERIFY2(request->result.failure.contains(QStringLiteral("aLaterField")), qPrintable(request->result.failure));
    }

    static net::TaskMessage taskOf(const QString& assignment, const core::Digest& weights)
    {
        net::TaskMessage task;
        task.assignment = assignment;
        task.deadlineMs = 60'000;
        task.task.jobId = QStringLiteral("job");
        task.task.round = 1;
        task.task.sampleEnd = 100;
        task.task.localSteps = 10;
        task.task.batchSize = 10;
        task.task.threads = 1;
        task.task.checkpointInterval = 5;
        task.task.model.zoo = QStringLiteral("mlp");
        task.task.dataset.builtin = QStringLiteral("fashion-mnist");
        task.task.startWeights = weights;
        task.startWeightsBlob = weights;
        return task;
    }

    // Answers the node's next message, a GET, with the whole blob; returns the digest it asked for.
    static std::optional<core::Digest> serveGet(
        Session& session, const QByteArray& routingId, const QHash<core::Digest, QByteArray>& blobs)
    {
        auto get = session.broker->nextSkippingHeartbeats(session.pump());
        if (!get || get->message.command != Command::Get)
            return std::nullopt;
        const auto asked = net::GetRequest::fromHeader(get->message.header);
        if (!asked || !blobs.contains(asked->sha256))
            return asked ? std::optional<core::Digest>(asked->sha256) : std::nullopt;
        const auto& bytes = blobs[asked->sha256];
        QJsonObject header = net::ChunkHeader { asked->sha256, 0, bytes.size() }.toHeader();
        header.insert(net::fields::Id, get->message.header.value(net::fields::Id));
        session.broker->send(Command::Chunk, header, bytes, routingId);
        return asked->sha256;
    }

    // docs/PROTOCOL.md, "Encoded ranges": the node asks for coded ranges, decodes what comes coded
    // into the bytes it trains from, and codes its uploads only for a broker whose WELCOME says it
    // takes them (an older broker would store the coded bytes).
    void rangesTravelCodedWhereBothSidesCan()
    {
        QByteArray base; // int8-like start weights: they shrink
        for (int i = 0; i < 200'000; ++i)
            base.append(char((i * 5) % 11));
        QByteArray revealed = base;
        std::reverse(revealed.begin(), revealed.end());
        for (const bool brokerTakesZstd : { true, false }) {
            CompletingExecutor executor;
            executor.weights = revealed;
            auto session = start(&executor);
            auto registration = nextRegister(session);
            QVERIFY(registration);
            welcome(session, *registration, brokerTakesZstd ? QStringList { net::ZstdEncoding } : QStringList {});
            QVERIFY(session.broker->nextSkippingHeartbeats(session.pump())->message.command == Command::Ready);
            const auto startDigest = core::Digest::ofBytes(base + QByteArray::number(brokerTakesZstd));
            const QByteArray startBytes = base + QByteArray::number(brokerTakesZstd); // not in the cache yet
            session.broker->send(
                Command::Task, taskOf(QStringLiteral("c1"), startDigest).toHeader(), {}, registration->routingId);

            auto get = session.broker->nextSkippingHeartbeats(session.pump());
            QVERIFY(get && get->message.command == Command::Get);
            const auto asked = net::GetRequest::fromHeader(get->message.header);
            QCOMPARE(asked->encoding, net::ZstdEncoding);
            const QByteArray frame = net::encodeRange(startBytes);
            QJsonObject chunk
                = net::ChunkHeader { startDigest, 0, startBytes.size(), net::ZstdEncoding, startBytes.size() }.toHeader();
            chunk.insert(net::fields::Id, get->message.header.value(net::fields::Id));
            session.broker->send(Command::Chunk, chunk, frame, registration->routingId);

            auto commit = session.broker->nextSkippingHeartbeats(session.pump());
            QVERIFY(commit && commit->message.command == Command::Commit);
            QCOMPARE(executor.startedWith, QList<QByteArray> { startBytes });
            session.broker->send(
                Command::Ok, { { net::fields::Id, commit->message.header.value(net::fields::Id) } }, {}, registration->routingId);

            auto put = session.broker->nextSkippingHeartbeats(session.pump());
            QVERIFY(put && put->message.command == Command::Put);
            const auto range = net::PutRequest::fromHeader(put->message.header);
            QVERIFY(range.ok());
            QCOMPARE(range->encoding, brokerTakesZstd ? net::ZstdEncoding : QString());
            QCOMPARE(brokerTakesZstd ? *net::decodeRange(put->message.payload, range->length) : put->message.payload, revealed);

            const auto counters = session.node->counters();
            QCOMPARE(counters.bytesFetched, startBytes.size());
            QCOMPARE(counters.wireBytesFetched, frame.size());
            QCOMPARE(counters.bytesUploaded, revealed.size());
            QCOMPARE(counters.wireBytesUploaded, put->message.payload.size());
            QCOMPARE(counters.wireBytesUploaded < counters.bytesUploaded, brokerTakesZstd);
        }
    }

    // A node that holds the previous round's weights fetches the round's change (a quarter of the
    // bytes) and trains from what the executor rebuilds from it; when that is not the round's
    // weights it fetches them whole; a node without the previous round's fetches them whole at once.
    void aNodeThatHoldsThePreviousRoundFetchesOnlyItsChange()
    {
        RebuildingExecutor executor;
        auto session = start(&executor);
        auto registration = nextRegister(session);
        QVERIFY(registration);
        welcome(session, *registration);
        const auto previous = m_cache->put("round 0 weights");
        QVERIFY(previous);
        const QByteArray change = "change 1";
        const QByteArray round1 = "round 0 weights+change 1";
        const QHash<core::Digest, QByteArray> blobs { { core::Digest::ofBytes(change), change },
            { core::Digest::ofBytes(round1), round1 }, { core::Digest::ofBytes("round 1, other"), "round 1, other" } };

        auto task = taskOf(QStringLiteral("a1"), core::Digest::ofBytes(round1));
        task.startChange = core::broker::WeightsChange { core::Digest::ofBytes(change), *previous };
        QVERIFY(session.broker->nextSkippingHeartbeats(session.pump())->message.command == Command::Ready);
        session.broker->send(Command::Task, task.toHeader(), {}, registration->routingId);
        QCOMPARE(serveGet(session, registration->routingId, blobs), std::optional(core::Digest::ofBytes(change)));
        auto result = session.broker->nextSkippingHeartbeats(session.pump());
        QVERIFY(result && result->message.command == Command::Result);
        QCOMPARE(executor.startedWith, QList<QByteArray> { round1 });
        // What is left of the assignment's deadline bounds the job's code (a sandboxed worker's time limit).
        QCOMPARE(executor.deadlines.size(), 1);
        QVERIFY2(executor.deadlines.first() > 0 && executor.deadlines.first() <= task.deadlineMs,
            qPrintable(QString::number(executor.deadlines.first())));
        QVERIFY(m_cache->contains(core::Digest::ofBytes(round1))); // the base of the next round's change
        QCOMPARE(session.node->counters().weightsRebuilt, 1);

        // A change that does not give the round's weights (the change is in the cache already): they
        // come whole.
        session.broker->send(Command::Ok,
            { { net::fields::Id, result->message.header.value(net::fields::Id) },
                { QStringLiteral("verdict"), QStringLiteral("failed") } },
            {}, registration->routingId);
        auto other = taskOf(QStringLiteral("a2"), core::Digest::ofBytes("round 1, other"));
        other.startChange = task.startChange;
        QVERIFY(session.broker->nextSkippingHeartbeats(session.pump())->message.command == Command::Ready);
        session.broker->send(Command::Task, other.toHeader(), {}, registration->routingId);
        QCOMPARE(serveGet(session, registration->routingId, blobs), std::optional(core::Digest::ofBytes("round 1, other")));
        result = session.broker->nextSkippingHeartbeats(session.pump());
        QVERIFY(result && result->message.command == Command::Result);
        QCOMPARE(executor.startedWith.last(), QByteArray("round 1, other"));
        QCOMPARE(session.node->counters().rebuildsFailed, 1);
        QCOMPARE(session.node->counters().weightsRebuilt, 1);
    }

    // A node in the swarm says so when it registers; a blob offered over the swarm whose torrent
    // the broker will not give (it forgot the blob's torrent, or the node may not read it) is GOT
    // whole instead, and the shard trains (docs/SWARM.md).
    void aBlobTheSwarmCannotBringIsGot()
    {
#ifdef __SANITIZE_ADDRESS__
        QSKIP("libtorrent's own leak under LeakSanitizer; runs in the normal build");
#endif
        net::NodeSwarm::Options swarm;
        swarm.address = QStringLiteral("127.0.0.1");
        auto session = start(&m_failing, swarm);
        auto registration = nextRegister(session);
        QVERIFY(registration);
        const auto node = net::RegisterRequest::fromHeader(registration->message.header);
        QVERIFY(node && node->node.capabilities.contains(QStringLiteral("swarm")) && node->node.swarm);
        QVERIFY(node->node.swarm->key.startsWith(QStringLiteral("-----BEGIN PUBLIC KEY-----")) && node->node.swarm->port > 0);
        welcome(session, *registration);
        QVERIFY(session.broker->nextSkippingHeartbeats(session.pump())->message.command == Command::Ready);

        const QByteArray weights = "weights the swarm cannot bring";
        const auto digest = core::Digest::ofBytes(weights);
        const auto torrent = core::Digest::ofBytes("its torrent");
        auto authority = core::Authority::create(QStringLiteral("broker"), 3600);
        auto task = taskOf(QStringLiteral("s1"), digest);
        task.swarm = { { digest, torrent, authority->issue(node->node.swarm->key.toLatin1(), digest.toHex(), 600).value(),
            { QStringLiteral("127.0.0.1:9") } } };
        session.broker->send(Command::Task, task.toHeader(), {}, registration->routingId);
        auto get = session.broker->nextSkippingHeartbeats(session.pump());
        QVERIFY(get && get->message.command == Command::Get);
        QCOMPARE(net::GetRequest::fromHeader(get->message.header)->sha256, torrent); // the torrent first
        session.broker->send(Command::Error,
            { { net::fields::Id, get->message.header.value(net::fields::Id) }, { net::fields::Code, net::errors::Forbidden },
                { net::fields::Message, QStringLiteral("not yours to read") }, { net::fields::Re, int(Command::Get) } },
            {}, registration->routingId);
        QCOMPARE(serveGet(session, registration->routingId, { { digest, weights } }), std::optional(digest));
        auto result = session.broker->nextSkippingHeartbeats(session.pump());
        QVERIFY(result && result->message.command == Command::Result);
        QCOMPARE(result->message.header.value(net::fields::Assignment).toString(), QStringLiteral("s1"));
        QCOMPARE(session.node->counters().swarmFallbacks, 1);
        QCOMPARE(session.node->counters().blobsFromSwarm, 0);
        QVERIFY(m_cache->contains(digest));
    }

    void aReplyWithAnIdItDidNotSendIsIgnored()
    {
        auto session = start();
        auto registration = nextRegister(session);
        QVERIFY(registration);
        // A WELCOME for another registration does not register the node.
        QJsonObject stranger = net::Welcome { QStringLiteral("node"), 1000, QStringLiteral("1") }.toHeader();
        stranger.insert(net::fields::Id, 999'999);
        session.broker->send(Command::Welcome, stranger, {}, registration->routingId);
        session.broker->send(
            Command::Ok, { { net::fields::Id, 424'242 }, { QStringLiteral("committed"), true } }, {}, registration->routingId);
        session.broker->send(Command::Error,
            { { net::fields::Id, 313'131 }, { net::fields::Code, net::errors::Stale },
                { net::fields::Message, QStringLiteral("x") } },
            {}, registration->routingId);
        for (int i = 0; i < 20 && session.node->counters().ignoredReplies < 3; ++i)
            session.node->step(10);
        QCOMPARE(session.node->counters().ignoredReplies, 3);
        QCOMPARE(session.node->session(), net::NodeClient::Session::Registering);
        // The real one does.
        welcome(session, *registration);
        QCOMPARE(session.node->session(), net::NodeClient::Session::Registered);
    }
};

QTEST_GUILESS_MAIN(NodeClientTest)
#include "tst_nodeclient.moc"
