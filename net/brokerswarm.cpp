#include "brokerswarm.h"

#include <core/certificates.h>
#include <core/privatefile.h>
#include <core/readfile.h>
#include <swarm/blobtorrent.h>
#include <swarm/swarm.h>

#include <QFile>
#include <QFileInfo>
#include <QLoggingCategory>
#include <QRandomGenerator>

#include <algorithm>

Q_LOGGING_CATEGORY(lcBrokerSwarm, "tessera.broker.swarm")

namespace tessera::net {

namespace {

// The authority signs for years: its certificate is in every torrent the broker made, and a new one
// would make new torrents of every blob.
constexpr std::int64_t AuthoritySeconds = 10LL * 365 * 24 * 3600;
constexpr char CertificateMark[] = "-----BEGIN CERTIFICATE-----";

core::Result<core::Authority> authorityIn(const QString& path)
{
    if (path.isEmpty())
        return core::Authority::create(QStringLiteral("Tessera swarm authority"), AuthoritySeconds);
    if (QFile::exists(path)) {
        const auto both = core::readFile(path);
        if (!both)
            return core::Error { path, QStringLiteral("cannot read the swarm authority") };
        const auto at = both->indexOf(CertificateMark);
        if (at < 0)
            return core::Error { path, QStringLiteral("holds no certificate: delete it to make a new authority") };
        return core::Authority::fromPem(both->mid(at), both->left(at));
    }
    auto made = core::Authority::create(QStringLiteral("Tessera swarm authority"), AuthoritySeconds);
    if (!made)
        return made.error();
    if (auto written
        = core::writePrivateFile(path, made->privateKeyPem() + made->certificatePem(), QStringLiteral("the swarm authority"));
        !written)
        return written.error();
    return made;
}

} // namespace

struct BrokerSwarm::Private {
    Options options;
    core::BlobStore& blobs;
    std::unique_ptr<swarm::Swarm> session;
    core::Authority authority;
    core::KeyPair own; // the seed's key: it holds a certificate for every blob it seeds
    QHash<core::Digest, core::Digest> seeded; // blob -> the blob of its .torrent
    QHash<core::Digest, core::Digest> contentOf; // torrent blob -> blob
    struct Member {
        core::SwarmEndpoint endpoint;
        QString host;
        QString peer() const { return QStringLiteral("%1:%2").arg(host).arg(endpoint.port); }
        bool dialable() const { return !host.isEmpty() && endpoint.port > 0; }
    };
    QHash<QString, Member> members; // by node id
    // Nodes handed a blob (fetching or holding it), by blob; a HAVE false or a lost node leaves.
    QHash<core::Digest, QSet<QString>> peersOf;

    Private(Options o, core::BlobStore& b, std::unique_ptr<swarm::Swarm> s, core::Authority a, core::KeyPair k)
        : options(std::move(o))
        , blobs(b)
        , session(std::move(s))
        , authority(std::move(a))
        , own(std::move(k))
    { }

    // Seeds the blob from the store, its torrent made and stored first; false: it goes by GET.
    bool ensureSeeded(const core::Digest& blob)
    {
        if (seeded.contains(blob))
            return true;
        const auto file = blobs.path(blob);
        if (!file || QFileInfo(*file).size() <= swarm::BlobTorrent::PieceBytes)
            return false;
        auto torrent = swarm::BlobTorrent::make(*file, authority.certificatePem());
        auto certificate = torrent ? authority.issue(own.publicPem, blob.toHex(), AuthoritySeconds)
                                   : core::Result<QByteArray>(torrent.error());
        auto stored = certificate ? blobs.put(torrent->bytes) : core::Result<core::Digest>(certificate.error());
        auto status = stored ? session->seed(*torrent, QFileInfo(*file).absolutePath(), *certificate, own.privatePem)
                             : core::Status(stored.error());
        if (!status) {
            qCWarning(lcBrokerSwarm).noquote()
                << "blob" << blob.toHex().left(12) << "goes by GET only:" << status.error().toString();
            return false;
        }
        seeded.insert(blob, *stored);
        contentOf.insert(*stored, blob);
        return true;
    }

    // Up to MaxPeers of the nodes handed the blob, the ones that said they hold it first.
    QStringList peersFor(const core::Digest& blob, const QString& asker) const
    {
        QStringList peers;
        for (const auto& nodeId : peersOf.value(blob)) {
            const auto member = members.constFind(nodeId);
            if (nodeId != asker && member != members.constEnd() && member->dialable())
                peers.append(member->peer());
        }
        // A random few when there are more than a TASK names: no peer is everyone's first.
        for (qsizetype i = peers.size() - 1; i > 0; --i)
            peers.swapItemsAt(i, QRandomGenerator::global()->bounded(i + 1));
        if (peers.size() > SwarmOffer::MaxPeers)
            peers.resize(SwarmOffer::MaxPeers);
        return peers;
    }
};

BrokerSwarm::BrokerSwarm(std::unique_ptr<Private> d)
    : d(std::move(d))
{ }

BrokerSwarm::~BrokerSwarm() = default;

core::Result<std::unique_ptr<BrokerSwarm>> BrokerSwarm::start(const Options& options, core::BlobStore& blobs)
{
    auto authority = authorityIn(options.authorityFile);
    if (!authority)
        return authority.error();
    auto own = core::KeyPair::generate();
    if (!own)
        return own.error();
    auto session = swarm::Swarm::start({ options.address, options.port, options.uploadBytesPerSecond, true });
    if (!session)
        return session.error();
    return std::unique_ptr<BrokerSwarm>(
        new BrokerSwarm(std::make_unique<Private>(options, blobs, std::move(*session), std::move(*authority), std::move(*own))));
}

int BrokerSwarm::port() const
{
    return d->session->port();
}

void BrokerSwarm::joined(const QString& nodeId, const core::SwarmEndpoint& endpoint, const QString& host)
{
    // The address the node's connection came from, which it cannot forge. Its own word only where
    // that address says nothing (a test's inproc) or is this machine's loopback (a node on the
    // broker's machine may name another address of it): otherwise a node could have every other
    // node dial a host of its choosing.
    const bool loopback = host.startsWith(u"127.") || host == u"::1";
    const bool ownWord = host.isEmpty() || (loopback && !endpoint.host.isEmpty());
    d->members.insert(nodeId, { endpoint, ownWord ? endpoint.host : host });
}

void BrokerSwarm::left(const QString& nodeId)
{
    d->members.remove(nodeId);
    for (auto& holders : d->peersOf)
        holders.remove(nodeId);
}

bool BrokerSwarm::member(const QString& nodeId) const
{
    return d->members.contains(nodeId);
}

QList<SwarmOffer> BrokerSwarm::offer(const QString& nodeId, const QList<core::Digest>& blobs, std::int64_t validMs)
{
    QList<SwarmOffer> offers;
    const auto member = d->members.constFind(nodeId);
    if (member == d->members.constEnd())
        return offers;
    const std::int64_t validSeconds = (std::max<std::int64_t>(validMs, 0) + d->options.seedingGraceMs) / 1000 + 1;
    for (const auto& blob : blobs) {
        if (offers.size() >= SwarmOffer::MaxOffers || !d->ensureSeeded(blob))
            continue;
        auto certificate = d->authority.issue(member->endpoint.key.toLatin1(), blob.toHex(), validSeconds);
        if (!certificate) {
            // A key the authority cannot sign (not P-256): this node GETs what it needs.
            qCWarning(lcBrokerSwarm).noquote()
                << "no certificate for node" << nodeId.left(8) << ":" << certificate.error().toString();
            return {};
        }
        SwarmOffer offer { blob, d->seeded.value(blob), *certificate, d->peersFor(blob, nodeId) };
        // The first few take the blob from the seed; the rest from them and each other, so that it
        // leaves the broker about once however many nodes fetch it (docs/SWARM.md).
        offer.seed = d->options.directNodes <= 0 || offer.peers.size() < d->options.directNodes;
        offers.append(offer);
        d->peersOf[blob].insert(nodeId);
    }
    return offers;
}

std::optional<core::Digest> BrokerSwarm::contentOf(const core::Digest& torrent) const
{
    const auto it = d->contentOf.constFind(torrent);
    if (it == d->contentOf.constEnd())
        return std::nullopt;
    return *it;
}

void BrokerSwarm::have(const QString& nodeId, const core::Digest& blob, bool holding)
{
    // Only a node handed the blob is named for it: a HAVE is no way into a swarm (and one for a
    // blob the broker never offered changes nothing, nor takes memory).
    if (auto it = d->peersOf.find(blob); !holding && it != d->peersOf.end())
        it->remove(nodeId);
}

void BrokerSwarm::tick()
{
    for (const auto& event : d->session->events(0)) {
        using Kind = swarm::Swarm::Event::Kind;
        if (event.kind == Kind::Banned || event.kind == Kind::Refused || event.kind == Kind::Failed)
            qCInfo(lcBrokerSwarm).noquote() << "swarm:" << event.blob.left(12) << event.peer << event.detail;
    }
    for (auto it = d->seeded.begin(); it != d->seeded.end();) {
        if (d->blobs.contains(it.key())) {
            ++it;
            continue;
        }
        d->session->drop(it.key());
        d->contentOf.remove(it.value());
        d->blobs.remove(it.value());
        d->peersOf.remove(it.key());
        it = d->seeded.erase(it);
    }
}

std::int64_t BrokerSwarm::uploadedBytes() const
{
    return d->session->uploadedBytes();
}

} // namespace tessera::net
