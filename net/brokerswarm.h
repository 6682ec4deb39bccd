#pragma once

#include "messages.h"

#include <core/blobstore.h>
#include <core/error.h>
#include <core/hash.h>
#include <core/nodeinfo.h>

#include <QHash>
#include <QList>
#include <QString>

#include <cstdint>
#include <memory>
#include <optional>

namespace tessera::core {
class Authority;
} // namespace tessera::core
namespace tessera::swarm {
class Swarm;
struct BlobTorrent;
} // namespace tessera::swarm

namespace tessera::net {

// The broker's part in the blob swarm (docs/SWARM.md): it seeds the blobs of the tasks it hands
// out, makes each blob's torrent once (kept as a blob of its own, which nodes GET), signs each node
// a certificate for each blob of its task, and names the blob's peers: the nodes it handed the blob
// to, that hold it or are fetching it. Owned by the broker's network thread, like BrokerServer.
class BrokerSwarm {
public:
    struct Options {
        QString address = QStringLiteral("127.0.0.1"); // where the seed listens (0.0.0.0: everywhere)
        int port = 0; // 0: any free one
        std::int64_t uploadBytesPerSecond = 0; // 0: no cap
        // The swarm authority's key and certificate (PEM, 0600), made on first use; empty: one for
        // this process only (tests).
        QString authorityFile;
        // How long a node's certificate outlives its assignment's deadline: it seeds that long.
        std::int64_t seedingGraceMs = 30 * 60 * 1000;
        // How many of a blob's nodes dial the seed at once (Broker/SwarmDirectNodes): a node handed
        // the blob when that many dialable nodes hold it or fetch it already gets `seed` false, and
        // takes it from them (docs/SWARM.md, "The broker's seed"); 0: every node dials the seed.
        int directNodes = 1;
    };

    static core::Result<std::unique_ptr<BrokerSwarm>> start(const Options& options, core::BlobStore& blobs);
    ~BrokerSwarm();
    BrokerSwarm(const BrokerSwarm&) = delete;
    BrokerSwarm& operator=(const BrokerSwarm&) = delete;

    int port() const;

    // A node that registered with a swarm endpoint, its connection coming from `host`: peers dial
    // it there, or at the endpoint's own host when `host` is loopback or unknown (empty both:
    // nobody can dial it).
    void joined(const QString& nodeId, const core::SwarmEndpoint& endpoint, const QString& host);
    void left(const QString& nodeId);
    bool member(const QString& nodeId) const;

    // The offers of a TASK for `nodeId`: each of `blobs` over one piece, seeded here from now on,
    // with the node's certificate (valid for `validMs` plus the grace) and its peers. Blobs the
    // broker cannot offer (gone, one piece) are left out: the node GETs them.
    QList<SwarmOffer> offer(const QString& nodeId, const QList<core::Digest>& blobs, std::int64_t validMs);
    // The blob whose torrent is `torrent`, for the rule of who may read it.
    std::optional<core::Digest> contentOf(const core::Digest& torrent) const;
    // HAVE: a node holds a blob (named to others), or no longer does.
    void have(const QString& nodeId, const core::Digest& blob, bool holding);

    // Logs what the swarm did (bans, refusals), drops the torrents of blobs the broker no longer
    // keeps, and the peers that went.
    void tick();
    std::int64_t uploadedBytes() const;

private:
    struct Private;
    explicit BrokerSwarm(std::unique_ptr<Private> d);
    std::unique_ptr<Private> d;
};

} // namespace tessera::net
