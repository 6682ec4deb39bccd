// The blob swarm end to end (docs/SWARM.md): a broker and three nodes as real processes, the round's
// blobs handed between nodes over BitTorrent-over-TLS, the job ending on train-local's bits; and a
// stranger written with python3-libtorrent, holding a job's torrent, refused by every peer.

#include "cluster.h"

#include <core/hash.h>

#include <QDirIterator>
#include <QRegularExpression>

using namespace tessera::tests::e2e;

namespace {

// host:port of every swarm peer the logs name: the broker's seed and each node's.
QStringList swarmPeers(const Cluster& cluster, int nodes)
{
    QStringList peers;
    static const QRegularExpression seed(QStringLiteral(R"(seeding blobs over the swarm on [0-9.]+ port (\d+))"));
    static const QRegularExpression serving(QStringLiteral(R"(serving the blob swarm on port (\d+))"));
    if (const auto match = seed.match(cluster.log(QStringLiteral("broker"))); match.hasMatch())
        peers.append(QStringLiteral("127.0.0.1:") + match.captured(1));
    for (int i = 1; i <= nodes; ++i) {
        if (const auto match = serving.match(cluster.log(QStringLiteral("node%1").arg(i))); match.hasMatch())
            peers.append(QStringLiteral("127.0.0.1:") + match.captured(1));
    }
    return peers;
}

// The first torrent the broker made for the job, that of its initial weights (which the broker
// keeps, and seeds, for the whole job; its store keeps torrents as blobs), and the blob's name.
std::pair<QString, QString> firstTorrent(const Cluster& cluster)
{
    QDirIterator it(cluster.path(QStringLiteral("broker/blobs")), QDir::Files, QDirIterator::Subdirectories);
    QFileInfo first;
    QString name;
    static const QRegularExpression named(QStringLiteral("4:name64:([0-9a-f]{64})"));
    while (it.hasNext()) {
        QFile file(it.next());
        if (file.size() > 64 * 1024 || !file.open(QIODevice::ReadOnly))
            continue;
        const QString text = QString::fromLatin1(file.readAll());
        const auto match = named.match(text);
        if (text.contains(QStringLiteral("12:piece layers")) && match.hasMatch()
            && (name.isEmpty() || QFileInfo(file).lastModified() < first.lastModified())) {
            first = QFileInfo(file);
            name = match.captured(1);
        }
    }
    return { first.filePath(), name };
}

// A certificate the broker's swarm authority signs for `name` (as a node handed the blob gets).
bool signedByTheBroker(const Cluster& cluster, const QString& name, const QString& key, const QString& certificate)
{
    const QString authority = cluster.path(QStringLiteral("broker/swarm-authority.pem"));
    const QString request = certificate + QStringLiteral(".csr");
    const QString extensions = certificate + QStringLiteral(".ext");
    Cluster::writeFile(extensions, QStringLiteral("subjectAltName=DNS:%1\n").arg(name));
    return run(QStringLiteral("openssl"),
               { QStringLiteral("req"), QStringLiteral("-new"), QStringLiteral("-newkey"), QStringLiteral("ec"),
                   QStringLiteral("-pkeyopt"), QStringLiteral("ec_paramgen_curve:P-256"), QStringLiteral("-nodes"),
                   QStringLiteral("-subj"), QStringLiteral("/CN=") + name, QStringLiteral("-keyout"), key, QStringLiteral("-out"),
                   request })
               .exitCode
        == 0
        && run(QStringLiteral("openssl"),
               { QStringLiteral("x509"), QStringLiteral("-req"), QStringLiteral("-in"), request, QStringLiteral("-CA"), authority,
                   QStringLiteral("-CAkey"), authority, QStringLiteral("-CAcreateserial"), QStringLiteral("-days"),
                   QStringLiteral("1"), QStringLiteral("-extfile"), extensions, QStringLiteral("-out"), certificate })
               .exitCode
        == 0;
}

// "N from the swarm ... served M bytes" of a node's stop line.
std::pair<int, qint64> swarmSummary(const QString& log)
{
    static const QRegularExpression line(QStringLiteral(R"(blobs: (\d+) from the swarm, .* served (\d+) bytes to peers)"));
    const auto match = line.match(log);
    return { match.captured(1).toInt(), match.captured(2).toLongLong() };
}

} // namespace

class SwarmNetworkTest : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;

private Q_SLOTS:
    void nodesHandTheRoundsToEachOtherAndStrangersGetNothing()
    {
        const auto baseline = run(Bin + QStringLiteral("/tessera-node"),
            { QStringLiteral("--config"), QStringLiteral("/dev/null"), QStringLiteral("train-local"), Job,
                QStringLiteral("--out"), m_dir.path() });
        QFile report(m_dir.filePath(QStringLiteral("report.json")));
        QVERIFY2(baseline.exitCode == 0 && report.open(QIODevice::ReadOnly), qPrintable(baseline.output));
        const QString localHash
            = QJsonDocument::fromJson(report.readAll()).object().value(QStringLiteral("finalWeightsHash")).toString();

        Cluster cluster;
        cluster.startBroker();
        QList<QProcess*> nodes;
        for (int i = 1; i <= 3; ++i)
            nodes.append(cluster.startNode(i));
        const QString jobId = cluster.submit();
        QVERIFY(!jobId.isEmpty());
        // The job first, however long this machine takes (no clock of the test's own): its nodes
        // keep serving what they hold afterwards, and the broker its initial weights.
        const auto job = QJsonDocument::fromJson(
            cluster.job({ QStringLiteral("wait"), jobId, QStringLiteral("--json") }, 860'000).standardOutput.toUtf8())
                             .object();
        QCOMPARE(job.value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        QCOMPARE(job.value(QStringLiteral("weightsHash")).toString(), localHash);
        QVERIFY(cluster.ledgerConsistent());

        // A stranger with the torrent of one of the job's blobs dials the broker's seed and every
        // node: once without a certificate, once with one it signed itself for the blob's name.
        const auto [torrent, name] = firstTorrent(cluster);
        QVERIFY(!torrent.isEmpty());
        const QStringList peers = swarmPeers(cluster, 3);
        QCOMPARE(peers.size(), 4);
        const QString forgedKey = m_dir.filePath(QStringLiteral("forged.key"));
        const QString forgedCertificate = m_dir.filePath(QStringLiteral("forged.pem"));
        const auto forged = run(QStringLiteral("openssl"),
            { QStringLiteral("req"), QStringLiteral("-x509"), QStringLiteral("-newkey"), QStringLiteral("ec"),
                QStringLiteral("-pkeyopt"), QStringLiteral("ec_paramgen_curve:P-256"), QStringLiteral("-nodes"),
                QStringLiteral("-subj"), QStringLiteral("/CN=") + name, QStringLiteral("-days"), QStringLiteral("1"),
                QStringLiteral("-keyout"), forgedKey, QStringLiteral("-out"), forgedCertificate });
        QVERIFY2(forged.exitCode == 0, qPrintable(forged.output));
        for (const auto& credentials : { QStringList {},
                 QStringList { QStringLiteral("--certificate"), forgedCertificate, QStringLiteral("--key"), forgedKey } }) {
            const QString folder = m_dir.filePath(QStringLiteral("stranger%1").arg(credentials.size()));
            QDir().mkpath(folder);
            const auto stranger = run(Python,
                QStringList { QStringLiteral(TESSERA_SOURCE_DIR "/tests/swarm/python/hostile_peer.py"),
                    QStringLiteral("stranger"), QStringLiteral("--torrent"), torrent, QStringLiteral("--folder"), folder,
                    QStringLiteral("--seconds"), QStringLiteral("120"), QStringLiteral("--peers") }
                    + peers + credentials,
                180'000);
            QVERIFY2(stranger.exitCode == 0, qPrintable(stranger.output));
            QVERIFY2(
                stranger.output.contains(QStringLiteral("stranger: got 0 bytes, refused 4 times")), qPrintable(stranger.output));
        }
        // The control: the same client with the broker's certificate for the blob gets it whole.
        const QString memberKey = m_dir.filePath(QStringLiteral("member.key"));
        const QString memberCertificate = m_dir.filePath(QStringLiteral("member.pem"));
        QVERIFY(signedByTheBroker(cluster, name, memberKey, memberCertificate));
        const QString memberFolder = m_dir.filePath(QStringLiteral("member"));
        QDir().mkpath(memberFolder);
        const auto member = run(Python,
            { QStringLiteral(TESSERA_SOURCE_DIR "/tests/swarm/python/hostile_peer.py"), QStringLiteral("stranger"),
                QStringLiteral("--torrent"), torrent, QStringLiteral("--folder"), memberFolder, QStringLiteral("--seconds"),
                QStringLiteral("120"), QStringLiteral("--certificate"), memberCertificate, QStringLiteral("--key"), memberKey,
                QStringLiteral("--peers"), peers.first() },
            180'000);
        QFile got(QDir(memberFolder).filePath(name));
        QVERIFY2(got.open(QIODevice::ReadOnly), qPrintable(member.output));
        QCOMPARE(tessera::core::Digest::ofBytes(got.readAll()).toHex(), name);

        // The nodes fetched from the swarm and served each other.
        int fromSwarm = 0;
        qint64 served = 0;
        for (int i = 0; i < nodes.size(); ++i) {
            nodes[i]->terminate();
            QVERIFY(nodes[i]->waitForFinished(60'000));
            const auto [blobs, bytes] = swarmSummary(cluster.log(QStringLiteral("node%1").arg(i + 1)));
            fromSwarm += blobs;
            served += bytes;
        }
        qInfo("nodes took %d blobs from the swarm and served %lld bytes to each other", fromSwarm, served);
        QVERIFY(fromSwarm >= 15); // at least each round's weights or change, for every node that trained it
        QVERIFY(served > 0);
    }
};

QTEST_GUILESS_MAIN(SwarmNetworkTest)
#include "tst_swarmnetwork.moc"
