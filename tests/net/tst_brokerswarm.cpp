// The broker's part in the blob swarm (net/brokerswarm, docs/SWARM.md) as hostile nodes would try
// it: who is named to whom, at which address, and what a HAVE or a bad key can change.

#include <core/certificates.h>
#include <net/brokerswarm.h>
#include <net/nodeswarm.h>
#include <swarm/blobtorrent.h>

#include <QElapsedTimer>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

using namespace tessera;
using net::BrokerSwarm;

namespace {

core::SwarmEndpoint endpointOf(int port, const QString& host = {})
{
    const auto keys = core::KeyPair::generate();
    return { QString::fromLatin1(keys->publicPem), port, host };
}

} // namespace

class BrokerSwarmTest : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    std::unique_ptr<core::BlobStore> m_store;
    std::unique_ptr<BrokerSwarm> m_swarm;
    core::Digest m_blob;
    core::Digest m_small;

private Q_SLOTS:
    void init()
    {
#ifdef __SANITIZE_ADDRESS__
        QSKIP("libtorrent's own leak under LeakSanitizer; runs in the normal build");
#endif
        m_store = std::move(core::BlobStore::open(m_dir.filePath(QStringLiteral("blobs"))).value());
        QByteArray bytes(200'000, Qt::Uninitialized);
        QRandomGenerator::global()->fillRange(reinterpret_cast<quint32*>(bytes.data()), bytes.size() / 4);
        m_blob = m_store->put(bytes).value();
        m_small = m_store->put(QByteArray(1000, 'x')).value();
        m_swarm = std::move(BrokerSwarm::start({}, *m_store).value());
    }

    void cleanup()
    {
        m_swarm.reset();
        m_store.reset();
    }

    // A node is named to the nodes handed the blob after it, at the address its connection came
    // from; what it says of itself counts only on loopback; never to itself; and only blobs of
    // more than one piece go over the swarm.
    void peersAreTheNodesHandedTheBlobAtTheirOwnAddresses()
    {
        m_swarm->joined(QStringLiteral("a"), endpointOf(7001, QStringLiteral("203.0.113.66")), QStringLiteral("10.0.0.1"));
        m_swarm->joined(QStringLiteral("b"), endpointOf(7002, QStringLiteral("10.0.0.5")), QStringLiteral("127.0.0.1"));
        m_swarm->joined(QStringLiteral("c"), endpointOf(7003), QStringLiteral("127.0.0.1"));
        m_swarm->joined(QStringLiteral("d"), endpointOf(0), QStringLiteral("10.0.0.4")); // leech-only
        const auto first = m_swarm->offer(QStringLiteral("a"), { m_blob, m_small }, 60'000);
        QCOMPARE(first.size(), 1); // the small blob goes by GET
        QCOMPARE(first[0].sha256, m_blob);
        QVERIFY(first[0].peers.isEmpty());
        QVERIFY(first[0].certificate.startsWith("-----BEGIN CERTIFICATE-----"));
        QCOMPARE(m_swarm->contentOf(first[0].torrent), m_blob);
        QVERIFY(!m_swarm->contentOf(m_blob));
        auto torrent = swarm::BlobTorrent::read(m_store->read(first[0].torrent).value());
        QVERIFY(torrent.ok());
        QCOMPARE(torrent->blob, m_blob);

        QCOMPARE(
            m_swarm->offer(QStringLiteral("d"), { m_blob }, 60'000)[0].peers, QStringList { QStringLiteral("10.0.0.1:7001") });
        m_swarm->offer(QStringLiteral("b"), { m_blob }, 60'000);
        auto named = m_swarm->offer(QStringLiteral("c"), { m_blob }, 60'000)[0].peers;
        named.sort();
        // a at its connection's address (not the host it claimed), b at its own word (it came from
        // loopback), d not at all (it serves nobody), c not to itself.
        QCOMPARE(named, (QStringList { QStringLiteral("10.0.0.1:7001"), QStringLiteral("10.0.0.5:7002") }));
    }

    // The first node handed a blob dials the seed; the next ones take it from the nodes before
    // them (seed false), until none of those is left to dial; Broker/SwarmDirectNodes 0: everyone
    // dials the seed, 2: the first two.
    void onlyTheFirstNodesDialTheSeed()
    {
        for (const char* id : { "a", "b", "c", "n" })
            m_swarm->joined(QString::fromLatin1(id), endpointOf(7000 + id[0]), QStringLiteral("10.0.0.%1").arg(int(id[0])));
        m_swarm->joined(QStringLiteral("leech"), endpointOf(0), QStringLiteral("10.0.0.9"));
        QVERIFY(m_swarm->offer(QStringLiteral("leech"), { m_blob }, 60'000)[0].seed); // nobody to take it from
        QVERIFY(m_swarm->offer(QStringLiteral("a"), { m_blob }, 60'000)[0].seed); // a leech serves nobody
        const auto second = m_swarm->offer(QStringLiteral("b"), { m_blob }, 60'000)[0];
        QVERIFY(!second.seed);
        QCOMPARE(second.peers, QStringList { QStringLiteral("10.0.0.97:7097") });
        m_swarm->have(QStringLiteral("a"), m_blob, false);
        m_swarm->left(QStringLiteral("b"));
        QVERIFY(m_swarm->offer(QStringLiteral("c"), { m_blob }, 60'000)[0].seed); // a and b went

        m_swarm.reset();
        BrokerSwarm::Options everyone;
        everyone.directNodes = 0;
        m_swarm = std::move(BrokerSwarm::start(everyone, *m_store).value());
        for (const char* id : { "a", "b" }) {
            m_swarm->joined(QString::fromLatin1(id), endpointOf(7000 + id[0]), QStringLiteral("10.0.0.%1").arg(int(id[0])));
            QVERIFY(m_swarm->offer(QString::fromLatin1(id), { m_blob }, 60'000)[0].seed);
        }
        m_swarm.reset();
        BrokerSwarm::Options two;
        two.directNodes = 2;
        m_swarm = std::move(BrokerSwarm::start(two, *m_store).value());
        QList<bool> seeds;
        for (const char* id : { "a", "b", "c" }) {
            m_swarm->joined(QString::fromLatin1(id), endpointOf(7000 + id[0]), QStringLiteral("10.0.0.%1").arg(int(id[0])));
            seeds.append(m_swarm->offer(QString::fromLatin1(id), { m_blob }, 60'000)[0].seed);
        }
        QCOMPARE(seeds, (QList<bool> { true, true, false }));
    }

    // A node told to take the blob from its peers (seed false) whose peers send nothing (here: a
    // peer that is not there) dials the seed once SwarmOffer::SeedAfterMs passed without a byte, and
    // not before: the clock is the one the caller passes to poll.
    void aNodeWhosePeersSendNothingDialsTheSeedAfterAWhile()
    {
        m_swarm->joined(QStringLiteral("gone"), endpointOf(9), QStringLiteral("127.0.0.1")); // nobody listens on 9
        QVERIFY(m_swarm->offer(QStringLiteral("gone"), { m_blob }, 60'000)[0].seed);
        net::NodeSwarm::Options options;
        options.address = QStringLiteral("127.0.0.1");
        auto node = net::NodeSwarm::start(options, m_dir.filePath(QStringLiteral("node")));
        QVERIFY(node.ok());
        m_swarm->joined(QStringLiteral("n"), (*node)->endpoint(), QStringLiteral("127.0.0.1"));
        const auto offer = m_swarm->offer(QStringLiteral("n"), { m_blob }, 60'000).value(0);
        QVERIFY(!offer.seed);
        (*node)->offered(offer);
        QVERIFY(
            (*node)->fetch(m_blob, m_store->read(offer.torrent).value(), QStringLiteral("127.0.0.1:%1").arg(m_swarm->port()), 0));
        const auto pollFor = [&](std::int64_t now, int ms) {
            QList<net::NodeSwarm::Outcome> ended;
            QElapsedTimer clock;
            clock.start();
            while (ended.isEmpty() && clock.elapsed() < ms) {
                m_swarm->tick();
                ended = (*node)->poll(now);
                QThread::msleep(20);
            }
            return ended;
        };
        QVERIFY(pollFor(net::SwarmOffer::SeedAfterMs - 1, 1500).isEmpty());
        QCOMPARE(m_swarm->uploadedBytes(), 0);
        const auto ended = pollFor(net::SwarmOffer::SeedAfterMs, 60'000);
        QCOMPARE(ended.size(), 1);
        QVERIFY2(ended[0].error.isEmpty(), qPrintable(ended[0].error));
        QCOMPARE(core::Digest::ofFile(ended[0].file).value_or(core::Digest {}), m_blob);
        QVERIFY(m_swarm->uploadedBytes() >= 200'000);
    }

    // A node that did not join gets no offer; a key the authority cannot sign gets none either.
    void onlyMembersWithUsableKeysGetOffers()
    {
        QVERIFY(m_swarm->offer(QStringLiteral("stranger"), { m_blob }, 60'000).isEmpty());
        core::SwarmEndpoint bogus { QStringLiteral("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), 7000, {} };
        m_swarm->joined(QStringLiteral("bogus"), bogus, QStringLiteral("10.0.0.9"));
        QVERIFY(m_swarm->offer(QStringLiteral("bogus"), { m_blob }, 60'000).isEmpty());
        m_swarm->joined(QStringLiteral("gone"), endpointOf(7000), QStringLiteral("10.0.0.8"));
        m_swarm->left(QStringLiteral("gone"));
        QVERIFY(m_swarm->offer(QStringLiteral("gone"), { m_blob }, 60'000).isEmpty());
    }

    // HAVE cannot put a node into a blob's swarm; holding: false takes it off; one for a blob the
    // broker never offered changes nothing.
    void haveTakesOffButNeverPutsOn()
    {
        m_swarm->joined(QStringLiteral("a"), endpointOf(7001), QStringLiteral("10.0.0.1"));
        m_swarm->joined(QStringLiteral("b"), endpointOf(7002), QStringLiteral("10.0.0.2"));
        m_swarm->joined(QStringLiteral("c"), endpointOf(7003), QStringLiteral("10.0.0.3"));
        m_swarm->have(QStringLiteral("a"), m_blob, true); // never handed it
        QVERIFY(m_swarm->offer(QStringLiteral("b"), { m_blob }, 60'000)[0].peers.isEmpty());
        m_swarm->have(QStringLiteral("b"), m_blob, false);
        QVERIFY(m_swarm->offer(QStringLiteral("c"), { m_blob }, 60'000)[0].peers.isEmpty());
        for (int i = 0; i < 1000; ++i)
            m_swarm->have(QStringLiteral("a"), core::Digest::ofBytes(QByteArray::number(i)), false);
        QCOMPARE(
            m_swarm->offer(QStringLiteral("a"), { m_blob }, 60'000)[0].peers, QStringList { QStringLiteral("10.0.0.3:7003") });
    }
};

QTEST_GUILESS_MAIN(BrokerSwarmTest)
#include "tst_brokerswarm.moc"
