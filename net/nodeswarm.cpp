#include "nodeswarm.h"

#include <core/certificates.h>
#include <core/privatefile.h>
#include <core/readfile.h>
#include <swarm/blobtorrent.h>
#include <swarm/swarm.h>

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLoggingCategory>

#include <utility>

#include <sys/stat.h>
#include <unistd.h>

Q_LOGGING_CATEGORY(lcNodeSwarm, "tessera.node.swarm")

namespace tessera::net {

namespace {

// Whether two paths name one file (hard links of it): the same device and inode.
bool sameFile(const QString& a, const QString& b)
{
    struct stat first { };
    struct stat second { };
    return ::stat(QFile::encodeName(a).constData(), &first) == 0 && ::stat(QFile::encodeName(b).constData(), &second) == 0
        && first.st_dev == second.st_dev && first.st_ino == second.st_ino;
}

core::Result<core::KeyPair> keyIn(const QString& path)
{
    if (path.isEmpty())
        return core::KeyPair::generate();
    if (QFile::exists(path)) {
        const auto pem = core::readFile(path);
        if (!pem)
            return core::Error { path, QStringLiteral("cannot read the swarm key") };
        auto pair = core::KeyPair::fromPrivatePem(*pem);
        if (!pair)
            return core::Error { path, pair.error().message + QStringLiteral(": delete it to make a new swarm key") };
        return pair;
    }
    auto made = core::KeyPair::generate();
    if (!made)
        return made.error();
    if (auto written = core::writePrivateFile(path, made->privatePem, QStringLiteral("the swarm key")); !written)
        return written.error();
    return made;
}

std::int64_t realNow()
{
    return QDateTime::currentMSecsSinceEpoch();
}

} // namespace

struct NodeSwarm::Private {
    Options options;
    QString folder;
    core::KeyPair key;
    std::unique_ptr<swarm::Swarm> session;
    struct Known {
        SwarmOffer offer;
        std::optional<swarm::BlobTorrent> torrent; // once fetched
        std::int64_t expires = 0; // the certificate's end, real time (ms since the epoch)
    };
    QHash<core::Digest, Known> known; // by blob
    struct Fetch {
        std::int64_t lastProgressAt = 0;
        std::int64_t bytes = 0;
        QStringList peers; // whom it dials, the broker's seed first
        // The broker's seed, for an offer that said to dial it only if the peers bring less than
        // SwarmOffer::SeedBelowBytes in SwarmOffer::SeedAfterMs; empty once dialled (or none).
        QString seedLater;
        std::int64_t windowAt = 0; // when the current window of SeedAfterMs began
        std::int64_t windowBytes = 0; // and the bytes fetched then
    };
    QHash<core::Digest, Fetch> fetches;
    QSet<core::Digest> served;

    QString partialFile(const core::Digest& blob) const { return QDir(folder).filePath(blob.toHex()); }

    void rejoinWithout(const core::Digest& blob, const QString& banned, std::int64_t now);

    // A second name of a fetched file, handed to the caller (whose cache renames it): the swarm
    // serves on from the first, unmoved and open, so its peers' downloads go on. A move of the
    // torrent's file would stall them until they dialled again (libtorrent reopens it by name).
    QString handedFile(const core::Digest& blob) const { return partialFile(blob) + QStringLiteral(".fetched"); }
    QString handOver(const core::Digest& blob) const
    {
        QFile::remove(handedFile(blob));
        const bool linked
            = ::link(QFile::encodeName(partialFile(blob)).constData(), QFile::encodeName(handedFile(blob)).constData()) == 0;
        return linked ? handedFile(blob) : partialFile(blob); // no hard links here: it moves later (relocate)
    }

    // Leaves the blob's swarm; what this folder held of it goes (a cache's name of it stays).
    void leave(const core::Digest& blob)
    {
        session->drop(blob);
        QFile::remove(partialFile(blob));
        QFile::remove(handedFile(blob));
    }
    void abandon(const core::Digest& blob)
    {
        leave(blob);
        fetches.remove(blob);
    }
};

NodeSwarm::NodeSwarm(std::unique_ptr<Private> d)
    : d(std::move(d))
{ }

NodeSwarm::~NodeSwarm()
{
    // What it served goes with it: the cache keeps its own names of those files.
    const QDir folder(d->folder);
    d.reset(); // the session first: libtorrent closes the files
    for (const auto& name : folder.entryList(QDir::Files))
        QFile::remove(folder.filePath(name));
}

core::Result<std::unique_ptr<NodeSwarm>> NodeSwarm::start(const Options& options, const QString& folder)
{
    auto key = keyIn(options.keyFile);
    if (!key)
        return key.error();
    QDir dir(folder);
    if (!dir.mkpath(QStringLiteral(".")))
        return core::Error { folder, QStringLiteral("cannot make the swarm's folder") };
    for (const auto& stale : dir.entryList(QDir::Files))
        dir.remove(stale);
    auto session = swarm::Swarm::start({ options.address, options.port, options.uploadBytesPerSecond });
    if (!session)
        return session.error();
    auto d = std::make_unique<Private>();
    d->options = options;
    d->folder = dir.absolutePath();
    d->key = std::move(*key);
    d->session = std::move(*session);
    return std::unique_ptr<NodeSwarm>(new NodeSwarm(std::move(d)));
}

core::SwarmEndpoint NodeSwarm::endpoint() const
{
    return { QString::fromLatin1(d->key.publicPem), d->options.serve ? d->session->port() : 0, d->options.host };
}

void NodeSwarm::offered(const SwarmOffer& offer)
{
    const auto expires = core::certificateExpiry(offer.certificate);
    if (!expires) {
        qCWarning(lcNodeSwarm).noquote() << "the broker's certificate for blob" << offer.sha256.toHex().left(12)
                                         << "is unusable:" << expires.error().toString();
        return;
    }
    auto& entry = d->known[offer.sha256];
    if (entry.torrent && entry.offer.torrent != offer.torrent)
        entry.torrent.reset(); // another torrent of the blob (the broker made a new authority)
    entry.offer = offer;
    entry.expires = *expires;
    if (d->session->has(offer.sha256) && !d->fetches.contains(offer.sha256))
        (void)d->session->renew(offer.sha256, offer.certificate, d->key.privatePem);
}

std::optional<SwarmOffer> NodeSwarm::offerFor(const core::Digest& blob) const
{
    const auto it = d->known.constFind(blob);
    if (it == d->known.constEnd() || it->expires <= realNow())
        return std::nullopt;
    return it->offer;
}

std::optional<core::Digest> NodeSwarm::blobOfTorrent(const core::Digest& torrent) const
{
    for (auto it = d->known.constBegin(); it != d->known.constEnd(); ++it) {
        if (it->offer.torrent == torrent)
            return it.key();
    }
    return std::nullopt;
}

core::Status NodeSwarm::fetch(
    const core::Digest& blob, const QByteArray& torrentBytes, const QString& brokerPeer, std::int64_t now)
{
    auto it = d->known.find(blob);
    if (it == d->known.end())
        return core::Error { QStringLiteral("swarm"), QStringLiteral("no offer for blob %1").arg(blob.toHex()) };
    auto torrent = swarm::BlobTorrent::read(torrentBytes);
    if (!torrent)
        return torrent.error();
    if (torrent->blob != blob)
        return core::Error { QStringLiteral("torrent"), QStringLiteral("it is of blob %1").arg(torrent->blob.toHex()) };
    if (d->session->has(blob))
        d->leave(blob); // served from an older copy: fetched anew into the swarm's folder
    d->served.remove(blob);
    QStringList peers = it->offer.peers;
    const bool seedNow = !brokerPeer.isEmpty() && (it->offer.seed || peers.isEmpty());
    if (seedNow)
        peers.prepend(brokerPeer);
    if (auto status = d->session->fetch(*torrent, d->folder, it->offer.certificate, d->key.privatePem, peers); !status) {
        d->abandon(blob);
        return status;
    }
    it->torrent = *torrent;
    d->fetches.insert(blob, { now, 0, peers, seedNow ? QString() : brokerPeer, now, 0 });
    qCInfo(lcNodeSwarm).noquote() << "fetching blob" << blob.toHex().left(12) << "from" << peers.join(QStringLiteral(", "));
    return {};
}

void NodeSwarm::Private::rejoinWithout(const core::Digest& blob, const QString& banned, std::int64_t now)
{
    // libtorrent 2.0.8 leaves a v2 torrent's failed piece waiting a minute (its request timeout)
    // before it asks another peer; the torrent joined again asks at once, and keeps the pieces
    // already checked on disk.
    auto fetch = fetches.value(blob);
    fetch.peers.removeAll(banned);
    // Pieces in flight are lost with the torrent: progress counts again from what is on disk.
    fetch.bytes = 0;
    fetch.lastProgressAt = now;
    fetch.windowAt = now;
    fetch.windowBytes = 0;
    if (fetch.peers.isEmpty() && !fetch.seedLater.isEmpty())
        fetch.peers.append(std::exchange(fetch.seedLater, QString()));
    const auto& entry = known[blob];
    session->drop(blob);
    if (!entry.torrent || !session->fetch(*entry.torrent, folder, entry.offer.certificate, key.privatePem, fetch.peers)) {
        abandon(blob);
        return;
    }
    fetches.insert(blob, fetch);
}

bool NodeSwarm::fetching(const core::Digest& blob) const
{
    return d->fetches.contains(blob);
}

QList<NodeSwarm::Outcome> NodeSwarm::poll(std::int64_t now)
{
    QList<Outcome> outcomes;
    using Kind = swarm::Swarm::Event::Kind;
    for (const auto& event : d->session->events(0)) {
        const auto blob = core::Digest::fromHex(event.blob).value_or(core::Digest {});
        if (event.kind == Kind::Banned) {
            qCWarning(lcNodeSwarm).noquote() << "banned peer" << event.peer << "for a bad piece of blob" << event.blob.left(12);
            if (d->fetches.contains(blob))
                d->rejoinWithout(blob, event.peer, now);
            if (!d->fetches.contains(blob))
                outcomes.append({ blob, {}, QStringLiteral("its only peers sent bad pieces") });
        } else if (event.kind == Kind::Refused) {
            qCInfo(lcNodeSwarm).noquote() << "refused peer" << event.peer << ":" << event.detail;
        } else if (event.kind == Kind::Fetched && d->fetches.contains(blob)) {
            // It stays in the swarm, serving its peers from here, while the caller checks it and
            // serves it from its cache (serve()) or discards it.
            d->fetches.remove(blob);
            outcomes.append({ blob, d->handOver(blob), {} });
        } else if (event.kind == Kind::Failed && d->fetches.contains(blob)) {
            d->abandon(blob);
            outcomes.append({ blob, {}, event.detail });
        } else if (event.kind == Kind::Failed && d->served.remove(blob)) {
            d->leave(blob);
        }
    }
    for (auto it = d->fetches.begin(); it != d->fetches.end();) {
        const auto bytes = d->session->fetchedBytes(it.key());
        if (bytes > it->bytes) {
            it->bytes = bytes;
            it->lastProgressAt = now;
        }
        if (!it->seedLater.isEmpty() && now - it->windowAt >= SwarmOffer::SeedAfterMs) {
            if (bytes - it->windowBytes < SwarmOffer::SeedBelowBytes) {
                // Its peers bring too little (gone, slow, hostile): the broker's seed after all.
                qCInfo(lcNodeSwarm).noquote() << "blob" << it.key().toHex().left(12) << "from the broker's seed too";
                it->peers.prepend(it->seedLater);
                if (d->session->addPeers(it.key(), { it->seedLater }))
                    it->lastProgressAt = now;
                it->seedLater.clear();
            }
            it->windowAt = now;
            it->windowBytes = bytes;
        }
        if (now - it->lastProgressAt < d->options.stallMs) {
            ++it;
            continue;
        }
        const auto blob = it.key();
        it = d->fetches.erase(it);
        d->abandon(blob);
        outcomes.append({ blob, {}, QStringLiteral("no peer sent any of it for %1 s").arg(d->options.stallMs / 1000) });
    }
    return outcomes;
}

void NodeSwarm::discard(const core::Digest& blob)
{
    if (!d->served.contains(blob))
        d->abandon(blob);
}

bool NodeSwarm::serve(const core::Digest& blob, const QString& file)
{
    const auto it = d->known.constFind(blob);
    const QFileInfo info(file);
    if (!d->options.serve || it == d->known.constEnd() || !it->torrent || it->expires <= realNow()
        || info.fileName() != blob.toHex() || d->served.contains(blob)) {
        if (!d->served.contains(blob) && !d->fetches.contains(blob))
            d->leave(blob);
        return false;
    }
    if (d->session->has(blob) && !d->fetches.contains(blob)) {
        // Fetched here and taken into the cache: served on from the swarm's name of the cache's
        // file (handOver), or, where the cache got the file itself, from the cache's file.
        const bool same = sameFile(d->partialFile(blob), file);
        if (!same && !d->session->relocate(blob, info.absolutePath())) {
            d->leave(blob);
            return false;
        }
        d->served.insert(blob);
        return true;
    }
    if (d->session->has(blob))
        return false;
    if (auto status = d->session->seed(*it->torrent, info.absolutePath(), it->offer.certificate, d->key.privatePem); !status) {
        qCWarning(lcNodeSwarm).noquote() << "cannot serve blob" << blob.toHex().left(12) << ":" << status.error().toString();
        return false;
    }
    d->served.insert(blob);
    return true;
}

QList<core::Digest> NodeSwarm::prune(const std::function<bool(const core::Digest&)>& held)
{
    QList<core::Digest> stopped;
    const auto t = realNow();
    for (auto it = d->served.begin(); it != d->served.end();) {
        const auto known = d->known.constFind(*it);
        if (held(*it) && known != d->known.constEnd() && known->expires > t) {
            ++it;
            continue;
        }
        d->leave(*it);
        stopped.append(*it);
        it = d->served.erase(it);
    }
    for (auto it = d->known.begin(); it != d->known.end();)
        it = it->expires <= t && !d->fetches.contains(it.key()) && !d->served.contains(it.key()) ? d->known.erase(it)
                                                                                                 : std::next(it);
    return stopped;
}

std::int64_t NodeSwarm::uploadedBytes() const
{
    return d->session->uploadedBytes();
}

} // namespace tessera::net
