// The broker's session rules, in process: a real BrokerServer and Broker over inproc://, peers that
// are plain sockets, and a clock that moves only when the test says so. Liveness, heartbeats, the
// flood rules and re-issue are checked in milliseconds, without waiting for real time.

#include "sessionpeer.h"

#include <core/broker/broker.h>
#include <net/blobcoding.h>
#include <net/brokerserver.h>
#include <net/messages.h>
#include <net/ratelimiter.h>

#include <support/fakemath.h>
#include <support/teststore.h>

#include <QJsonArray>
#include <QTemporaryDir>
#include <QTest>

using namespace tessera;
using net::Command;
using tests::SessionPeer;

namespace {

core::JobSpec oneShardJob()
{
    core::JobSpec spec;
    spec.name = QStringLiteral("session test");
    spec.model.zoo = QStringLiteral("mlp");
    spec.dataset.builtin = QStringLiteral("fashion-mnist");
    spec.training.rounds = 1;
    spec.training.shardsPerRound = 1;
    spec.training.localSteps = 10;
    spec.training.checkpointInterval = 5;
    spec.budget = *core::Credits::fromCredits(100);
    spec.verificationRate = 0.0;
    return spec;
}

core::NodeInfo nodeInfo(const QString& id)
{
    core::NodeInfo info;
    info.nodeId = id;
    info.softwareVersion = QStringLiteral("test");
    info.runtimeProfile = QStringLiteral("p");
    info.maxThreads = 4;
    info.benchmarkSamplesPerSecond = 1000;
    info.capabilities = core::ownCapabilities();
    return info;
}

} // namespace

class BrokerServerTest : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    core::ManualClock m_clock;
    tests::FakeMath m_math;
    zmq::context_t m_context;
    std::unique_ptr<core::BlobStore> m_blobs;
    std::unique_ptr<core::broker::Broker> m_broker;
    std::unique_ptr<net::BrokerServer> m_server;
    int m_serial = 0;

    // A broker with a faucet and no sampling, listening on inproc://.
    std::string start(int maxRequestsPerSecond = 500)
    {
        m_server.reset();
        core::broker::Broker::Options options;
        options.faucet = true;
        options.sampling = { 0, 0.0 };
        options.minDeadlineMs = 600'000; // only a lost node frees its shard here
        const QString data = m_dir.filePath(QStringLiteral("b%1").arg(++m_serial));
        m_broker.reset(); // before its blob store, which it uses to the end
        m_blobs = std::move(core::broker::Broker::openBlobs(data)).value();
        options.database = tests::TestStore::databaseFor(data);
        m_broker = std::move(core::broker::Broker::open(data, *m_blobs, m_math, m_clock, options)).value();
        const std::string endpoint = "inproc://broker-" + std::to_string(m_serial);
        net::BrokerServerOptions serverOptions;
        serverOptions.bind = QString::fromStdString(endpoint);
        serverOptions.context = &m_context;
        serverOptions.maxRequestsPerSecond = maxRequestsPerSecond;
        m_server = std::make_unique<net::BrokerServer>(*m_broker, serverOptions, m_clock);
        if (!m_server->bind().ok())
            qFatal("bind failed");
        return endpoint;
    }

    auto pump()
    {
        return [this] { m_server->pollOnce(0); };
    }

    // Registers a node over its socket and waits for the WELCOME.
    bool registerNode(SessionPeer& node, const QString& id)
    {
        node.send(Command::Register, net::RegisterRequest { nodeInfo(id) }.toHeader());
        auto welcome = node.nextSkippingHeartbeats(pump());
        return welcome && welcome->message.command == Command::Welcome;
    }

    // Moves the clock in heartbeat steps; `beat` is called at each (the peers that stay alive).
    template<typename Beat> void advance(std::int64_t ms, Beat&& beat)
    {
        for (std::int64_t t = 0; t < ms; t += 500) {
            m_clock.advance(500);
            beat();
            m_server->pollOnce(0);
        }
    }

private Q_SLOTS:
    void initTestCase()
    {
        if (QString why; !tests::TestStore::ready(why))
            QSKIP(qPrintable(why));
    }
    void cleanupTestCase() { tests::TestStore::shutdown(); }

    // While the broker computes (core::broker::OffThreadMath calls serveWhileBusy), reads are
    // answered at once, nodes hear heartbeats, and the rest waits, in order, for the broker.
    void whileTheBrokerComputesReadsAreAnsweredAndTheRestWaits()
    {
        const auto endpoint = start();
        SessionPeer node(m_context, zmq::socket_type::dealer, endpoint, false);
        SessionPeer owner(m_context, zmq::socket_type::dealer, endpoint, false);
        QVERIFY(registerNode(node, QStringLiteral("a")));
        owner.send(Command::List, { { QStringLiteral("id"), 1 } });
        auto listed = owner.next(pump());
        QVERIFY(listed && listed->message.command == Command::Ok);

        // Busy: the owner's LIST is answered, its SUBMIT and the node's READY wait.
        owner.send(Command::Submit, net::SubmitRequest { oneShardJob(), {} }.toHeader());
        owner.send(Command::List, { { QStringLiteral("id"), 2 } });
        node.send(Command::Ready, net::ReadyRequest {}.toHeader());
        SessionPeer reader(m_context, zmq::socket_type::dealer, endpoint, false);
        reader.send(Command::Ledger, {});
        // A node that registers now waits for its WELCOME, but its heartbeats are answered.
        SessionPeer newcomer(m_context, zmq::socket_type::dealer, endpoint, false);
        newcomer.send(Command::Register, net::RegisterRequest { nodeInfo(QStringLiteral("late")) }.toHeader());
        newcomer.send(Command::Heartbeat);
        m_clock.advance(1'500);
        // Served until the newcomer's messages have arrived, however long the connection takes.
        std::optional<tests::Received> answered;
        QVERIFY(QTest::qWaitFor(
            [&] {
                m_server->serveWhileBusy();
                answered = newcomer.next([] {}, 10);
                return answered.has_value();
            },
            20'000));
        QCOMPARE(answered->message.command, Command::Heartbeat);
        // The owner has a SUBMIT waiting: its LIST waits behind it. The node gets a heartbeat.
        QVERIFY(!owner.next([] {}, 100));
        auto beat = node.next([] {}, 100);
        QVERIFY(beat && beat->message.command == Command::Heartbeat);
        QVERIFY(m_broker->list()->isEmpty());
        // A peer never seen before waits too (nothing may add peers while the broker computes).
        QVERIFY(!reader.next([] {}, 100));

        // Free again: everything is handled in the order it came.
        auto submitted = owner.next(pump());
        QVERIFY(submitted);
        QVERIFY2(submitted->message.command == Command::Ok,
            qPrintable(submitted->message.header.value(QStringLiteral("message")).toString()));
        QVERIFY(submitted->message.header.contains(QStringLiteral("jobId")));
        auto second = owner.next(pump());
        QVERIFY(second && second->message.command == Command::Ok);
        QCOMPARE(second->message.header.value(QStringLiteral("id")).toInt(), 2);
        QCOMPARE(second->message.header.value(QStringLiteral("jobs")).toArray().size(), 1);
        auto task = node.nextSkippingHeartbeats(pump());
        QVERIFY(task && task->message.command == Command::Task);
        QVERIFY(reader.next(pump()));
        auto welcome = newcomer.nextSkippingHeartbeats(pump());
        QVERIFY(welcome && welcome->message.command == Command::Welcome);

        // A reader with nothing waiting is answered while the broker is busy.
        owner.send(Command::Status, { { QStringLiteral("jobId"), submitted->message.header.value(QStringLiteral("jobId")) } });
        m_server->serveWhileBusy();
        auto status = owner.next([] {}, 100);
        QVERIFY(status && status->message.command == Command::Ok);
    }

    // While the broker computes, what waits is bounded per key (256 messages, 32 MiB) as its rate
    // is: one flooder's messages past its bound are refused, and a node that comes after it still
    // has its REGISTER waiting for the broker, not refused.
    void whileTheBrokerComputesEachPeerHasABoundedShareOfTheQueue()
    {
        const auto endpoint = start(10'000);
        SessionPeer flooder(m_context, zmq::socket_type::dealer, endpoint, false);
        SessionPeer uploader(m_context, zmq::socket_type::dealer, endpoint, false);
        for (int i = 0; i < 300; ++i)
            flooder.send(Command::Cancel, { { QStringLiteral("jobId"), QStringLiteral("none") }, { QStringLiteral("id"), i } });
        const QByteArray mebibyte(1 << 20, 'x');
        for (int i = 0; i < 40; ++i)
            uploader.send(Command::Put,
                { { QStringLiteral("sha256"), QString(64, u'a') }, { QStringLiteral("offset"), 0 },
                    { QStringLiteral("size"), 1 << 20 }, { QStringLiteral("id"), i } },
                mebibyte);
        SessionPeer newcomer(m_context, zmq::socket_type::dealer, endpoint, false);
        newcomer.send(Command::Register, net::RegisterRequest { nodeInfo(QStringLiteral("n")) }.toHeader());
        newcomer.send(Command::Heartbeat);
        int floodRefused = 0;
        int uploadsRefused = 0;
        bool newcomerWaits = false;
        const auto refusedBusy = [](const std::optional<tests::Received>& answer) {
            return answer && answer->message.command == Command::Error
                && answer->message.header.value(net::fields::Code).toString() == net::errors::TooManyRequests;
        };
        QVERIFY(QTest::qWaitFor(
            [&] {
                m_server->serveWhileBusy();
                while (auto answer = flooder.next([] {}, 0))
                    floodRefused += refusedBusy(answer);
                while (auto answer = uploader.next([] {}, 0))
                    uploadsRefused += refusedBusy(answer);
                if (auto answer = newcomer.next([] {}, 0))
                    newcomerWaits = newcomerWaits || answer->message.command == Command::Heartbeat;
                return floodRefused >= 44 && uploadsRefused >= 9 && newcomerWaits;
            },
            30'000));
        QCOMPARE(floodRefused, 300 - 256);
        QCOMPARE(uploadsRefused, 40 - 31); // 31 of a little over 1 MiB each fill 32 MiB
        auto welcome = newcomer.nextSkippingHeartbeats(pump());
        QVERIFY(welcome && welcome->message.command == Command::Welcome);
    }

    // The rate limit's refund (net/ratelimiter.h): a TENSOR the broker relays gives its cost back,
    // so that a small model's stages trading many tensors a second are never refused; a refused
    // message, and any other, still counts.
    void aRefundedMessageCostsNothingAgainstTheRate()
    {
        net::RateLimiter limiter(10);
        for (int i = 0; i < 80; ++i) { // 4 x the burst of 20, each given back
            QCOMPARE(limiter.admit(0.25, 1'000), net::RateLimiter::Decision::Pass);
            limiter.refund(0.25);
        }
        for (int i = 0; i < 20; ++i)
            QCOMPARE(limiter.admit(1.0, 1'000), net::RateLimiter::Decision::Pass);
        QCOMPARE(limiter.admit(0.25, 1'000), net::RateLimiter::Decision::Refuse);
        limiter.refund(100.0); // never past the burst
        for (int i = 0; i < 20; ++i)
            QCOMPARE(limiter.admit(1.0, 1'000), net::RateLimiter::Decision::Pass);
        QCOMPARE(limiter.admit(1.0, 1'000), net::RateLimiter::Decision::Refuse);
    }

    // docs/PROTOCOL.md, "Round trips": each HEARTBEAT the broker sends a node carries a new probe;
    // the node's echo of the latest gives its round trip, by the broker's clock. An echo of any
    // other value, or the same echo again, changes nothing.
    void aNodesEchoOfTheLatestProbeGivesItsRoundTrip()
    {
        const auto endpoint = start();
        SessionPeer node(m_context, zmq::socket_type::dealer, endpoint, false);
        QVERIFY(registerNode(node, QStringLiteral("n")));
        std::optional<tests::Received> beat;
        for (int i = 0; i < 10 && !(beat && beat->message.command == Command::Heartbeat); ++i) {
            m_clock.advance(1'000);
            beat = node.next(pump(), 2'000);
        }
        QVERIFY(beat && beat->message.command == Command::Heartbeat);
        const QString probe = beat->message.header.value(QStringLiteral("probe")).toString();
        QCOMPARE(probe.size(), 16);
        QVERIFY(!m_broker->roundTripOf(QStringLiteral("n")));
        auto handled = [&](int id) { // a LIST's answer: everything the node sent before it was handled
            node.send(Command::List, { { QStringLiteral("id"), id } });
            auto answer = node.nextSkippingHeartbeats(pump());
            return answer && answer->message.command == Command::Ok;
        };
        m_clock.advance(40);
        node.send(Command::Heartbeat, { { QStringLiteral("echo"), QStringLiteral("0123456789abcdef") } });
        QVERIFY(handled(1));
        QVERIFY(!m_broker->roundTripOf(QStringLiteral("n")));
        m_clock.advance(60);
        node.send(Command::Heartbeat, { { QStringLiteral("echo"), probe } });
        QVERIFY(handled(2));
        QCOMPARE(m_broker->roundTripOf(QStringLiteral("n")), std::optional<std::int64_t>(100));
        m_clock.advance(300);
        node.send(Command::Heartbeat, { { QStringLiteral("echo"), probe } }); // answered already
        QVERIFY(handled(3));
        QCOMPARE(m_broker->roundTripOf(QStringLiteral("n")), std::optional<std::int64_t>(100));
    }

    void aNodeSilentForThreeHeartbeatsIsDroppedAndItsShardReissued()
    {
        const auto endpoint = start();
        QVERIFY(m_broker->submit(oneShardJob()).ok());
        SessionPeer a(m_context, zmq::socket_type::dealer, endpoint, false);
        SessionPeer b(m_context, zmq::socket_type::dealer, endpoint, false);
        QVERIFY(registerNode(a, QStringLiteral("a")));
        a.send(Command::Ready, net::ReadyRequest {}.toHeader());
        auto task = a.nextSkippingHeartbeats(pump());
        QVERIFY(task && task->message.command == Command::Task);
        const auto first = net::TaskMessage::fromHeader(task->message.header);
        QVERIFY(first.ok());
        QVERIFY(registerNode(b, QStringLiteral("b")));
        b.send(Command::Ready, net::ReadyRequest {}.toHeader());
        // b keeps beating, a says nothing: after 3 heartbeats a is gone and b gets a's shard.
        advance(2'500, [&] { b.send(Command::Heartbeat); });
        b.drain(pump());
        QVERIFY2(m_broker->nodes()->first().value(QStringLiteral("online")).toBool(), "a is gone too early");
        std::optional<tests::Received> reissued;
        advance(2'000, [&] { b.send(Command::Heartbeat); });
        for (int i = 0; i < 10 && !reissued; ++i) {
            auto received = b.nextSkippingHeartbeats(pump(), 200);
            if (received && received->message.command == Command::Task)
                reissued = received;
        }
        QVERIFY2(reissued, "the lost node's shard was not handed to the other");
        const auto second = net::TaskMessage::fromHeader(reissued->message.header);
        QCOMPARE(second->task.shard, first->task.shard);
        QVERIFY(second->assignment != first->assignment);
        QVERIFY(!m_broker->nodes()->first().value(QStringLiteral("online")).toBool());
    }

    void anyMessageCountsAsAHeartbeat()
    {
        const auto endpoint = start();
        SessionPeer a(m_context, zmq::socket_type::dealer, endpoint, false);
        QVERIFY(registerNode(a, QStringLiteral("a")));
        // Ten seconds of requests, never a HEARTBEAT: the node stays.
        advance(10'000, [&] { a.send(Command::Ledger, { { net::fields::Id, 1 } }); });
        a.drain(pump());
        QVERIFY(m_broker->nodes()->first().value(QStringLiteral("online")).toBool());
        // Silence: gone after three intervals (found at the next heartbeat after them).
        advance(4'500, [] {});
        QVERIFY(!m_broker->nodes()->first().value(QStringLiteral("online")).toBool());
    }

    void aFloodIsRefusedThenTheFlooderDropped()
    {
        const auto endpoint = start(10); // 10 a second, bursts of 20
        SessionPeer flooder(m_context, zmq::socket_type::dealer, endpoint, false);
        for (int i = 0; i < 40; ++i)
            flooder.send(Command::List, { { net::fields::Id, i } });
        int answered = 0, refused = 0;
        while (auto received = flooder.next(pump(), 200)) {
            if (received->message.command == Command::Error
                && received->message.header.value(net::fields::Code).toString() == net::errors::TooManyRequests)
                ++refused;
            else
                ++answered;
        }
        QCOMPARE(answered, 20);
        QCOMPARE(refused, 20);
        // Still over the limit, at least once a second, for more than 5 s: dropped.
        advance(6'000, [&] {
            for (int i = 0; i < 10; ++i)
                flooder.send(Command::List);
        });
        flooder.drain(pump());
        QCOMPARE(m_server->counters().dropped, 1);
        flooder.send(Command::List, { { net::fields::Id, QStringLiteral("polite") } });
        QVERIFY2(!flooder.next(pump(), 200), "a dropped peer was answered");
        // Someone else is served.
        SessionPeer polite(m_context, zmq::socket_type::dealer, endpoint, false);
        polite.send(Command::List, { { net::fields::Id, 7 } });
        auto answer = polite.next(pump());
        QVERIFY(answer && answer->message.command == Command::Ok);
        // The ban ends after a minute.
        advance(61'000, [] {});
        flooder.send(Command::List, { { net::fields::Id, 8 } });
        auto later = flooder.next(pump());
        QVERIFY(later && later->message.command == Command::Ok);
    }

    // What a peer hears of the broker's own trouble names none of its files.
    void errorsNameNoFileOfTheBrokers()
    {
        const auto said = net::scrubbedForPeers(
            QStringLiteral("disk I/O error: /var/lib/tessera/broker.db (and /tmp/x-1/scratch/w.pt) at https://a.b/c, 3/4"));
        QVERIFY2(!said.contains(QStringLiteral("/var/lib")) && !said.contains(QStringLiteral("/tmp")), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("https://a.b/c")) && said.contains(QStringLiteral("3/4")), qPrintable(said));
    }

    // docs/PROTOCOL.md, "Encoded ranges": the WELCOME says the broker takes zstd ranges; a coded
    // upload stores the decoded bytes under their own hash; a GET that asks for zstd gets a coded
    // range that decodes to them, one that does not gets them plain; a frame that does not decode
    // to its header's length is refused and stores nothing.
    void codedRangesGoBothWays()
    {
        const auto endpoint = start();
        SessionPeer node(m_context, zmq::socket_type::dealer, endpoint, false);
        node.send(Command::Register, net::RegisterRequest { nodeInfo(QStringLiteral("coder")) }.toHeader());
        auto welcome = node.nextSkippingHeartbeats(pump());
        QVERIFY(welcome && welcome->message.command == Command::Welcome);
        QCOMPARE(net::Welcome::fromHeader(welcome->message.header)->encodings, QStringList { net::ZstdEncoding });

        QByteArray blob; // 1.5 ranges of int8-like bytes: two PUTs
        for (int i = 0; i < 3 * 512 * 1024; ++i)
            blob.append(char((i * 7) % 13 - 6));
        const auto digest = core::Digest::ofBytes(blob);
        const auto put = [&](std::int64_t offset, const QByteArray& frame, std::int64_t length) {
            node.send(Command::Put, net::PutRequest { digest, offset, blob.size(), net::ZstdEncoding, length }.toHeader(), frame);
            return node.nextSkippingHeartbeats(pump());
        };
        // A frame that claims more than the header says is refused, and nothing is kept.
        const QByteArray first = blob.left(net::MaxChunkBytes);
        auto refused = put(0, net::encodeRange(first), first.size() - 1);
        QVERIFY(refused && refused->message.command == Command::Error);
        QVERIFY2(refused->message.header.value(net::fields::Message).toString().startsWith(u"payload:"),
            qPrintable(refused->message.header.value(net::fields::Message).toString()));
        refused = put(0, QByteArray(100, 'z'), 100);
        QVERIFY(refused && refused->message.command == Command::Error);
        QVERIFY(!m_blobs->contains(digest));

        std::int64_t wire = 0;
        for (std::int64_t offset = 0; offset < blob.size(); offset += net::MaxChunkBytes) {
            const QByteArray range = blob.mid(offset, net::MaxChunkBytes);
            const QByteArray frame = net::encodeRange(range);
            QVERIFY(!frame.isEmpty());
            wire += frame.size();
            auto answer = put(offset, frame, range.size());
            QVERIFY(answer && answer->message.command == Command::Ok);
            QCOMPARE(net::PutReply::fromHeader(answer->message.header)->received, offset + range.size());
        }
        QVERIFY(wire * 4 < blob.size());
        QVERIFY(m_blobs->contains(digest));
        QCOMPARE(*m_blobs->readRange(digest, 0, blob.size()), blob);

        for (const bool coded : { true, false }) {
            node.send(Command::Get,
                net::GetRequest {
                    digest, net::MaxChunkBytes, blob.size() - net::MaxChunkBytes, coded ? net::ZstdEncoding : QString() }
                    .toHeader());
            auto chunk = node.nextSkippingHeartbeats(pump());
            QVERIFY(chunk && chunk->message.command == Command::Chunk);
            const auto header = net::ChunkHeader::fromHeader(chunk->message.header);
            QVERIFY(header.ok());
            QCOMPARE(header->encoding, coded ? net::ZstdEncoding : QString());
            const QByteArray range = coded ? *net::decodeRange(chunk->message.payload, header->length) : chunk->message.payload;
            QCOMPARE(range, blob.mid(net::MaxChunkBytes));
            QCOMPARE(chunk->message.payload.size() < range.size(), coded);
        }
    }

    void requestsBeforeRegisteringAreRefused()
    {
        const auto endpoint = start();
        SessionPeer stranger(m_context, zmq::socket_type::dealer, endpoint, false);
        for (auto command : { Command::Ready, Command::Result, Command::Commit, Command::Checkpoint }) {
            stranger.send(command, { { net::fields::Id, int(command) } });
            auto answer = stranger.next(pump());
            QVERIFY(answer && answer->message.command == Command::Error);
            QCOMPARE(answer->message.header.value(net::fields::Code).toString(), net::errors::NotRegistered);
            QCOMPARE(answer->message.header.value(net::fields::Id).toInt(), int(command));
        }
    }
};

QTEST_GUILESS_MAIN(BrokerServerTest)
#include "tst_brokerserver.moc"
