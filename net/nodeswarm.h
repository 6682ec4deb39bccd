#pragma once

#include "messages.h"

#include <core/error.h>
#include <core/hash.h>
#include <core/nodeinfo.h>

#include <QHash>
#include <QList>
#include <QString>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

namespace tessera::swarm {
class Swarm;
} // namespace tessera::swarm

namespace tessera::net {

// A node's part in the blob swarm (docs/SWARM.md): the blobs a TASK offers are fetched from peers
// (the broker's seed among them) into a folder of its own, handed to the node's cache only after the
// caller checked their SHA-256, and served from the cache while the cache keeps them and the
// certificate lasts. A fetch that gains nothing for stallMs gives up, and the caller GETs the blob.
// Owned by the NodeClient's thread.
class NodeSwarm {
public:
    struct Options {
        QString address = QStringLiteral("0.0.0.0"); // where it listens (Swarm/Address)
        int port = 0; // Swarm/Port; 0: any free one
        QString host; // Swarm/Host: the address peers dial; empty: as the broker sees the node
        std::int64_t uploadBytesPerSecond = 0; // Swarm/MaxUploadKiBps; 0: no cap
        bool serve = true; // false: leech-only (swarmPort 0 in REGISTER)
        QString keyFile; // swarm.key, made on first use (0600); empty: a key for this process only
        std::int64_t stallMs = 20'000;
    };

    // `folder`: where fetches land (emptied now: what a crash left there is not trusted).
    static core::Result<std::unique_ptr<NodeSwarm>> start(const Options& options, const QString& folder);
    ~NodeSwarm();
    NodeSwarm(const NodeSwarm&) = delete;
    NodeSwarm& operator=(const NodeSwarm&) = delete;

    // What REGISTER says of it.
    core::SwarmEndpoint endpoint() const;

    // A TASK's offer: remembered for its blob; a blob served already gets the new certificate.
    void offered(const SwarmOffer& offer);
    std::optional<SwarmOffer> offerFor(const core::Digest& blob) const;
    // The blob whose offer names `torrent` as its torrent.
    std::optional<core::Digest> blobOfTorrent(const core::Digest& torrent) const;

    // Fetches the offered blob from its peers and `brokerPeer` (host:port; empty: none), given its
    // torrent's bytes (the blob `offer.torrent`, which the caller GOT).
    core::Status fetch(const core::Digest& blob, const QByteArray& torrentBytes, const QString& brokerPeer, std::int64_t now);
    bool fetching(const core::Digest& blob) const;
    struct Outcome {
        core::Digest blob;
        QString file; // whole, every piece checked against its torrent; its SHA-256 still unchecked
        QString error; // or why not (a stall, a failure): the caller GETs it
    };
    // Fetches that ended since the last call.
    QList<Outcome> poll(std::int64_t now);
    // Serves a blob the cache holds at `file` (one it fetched and the cache took in, or one it got
    // by GET); false: it cannot (no offer, no torrent, leech-only), and a fetched one leaves the swarm.
    bool serve(const core::Digest& blob, const QString& file);
    // A fetched blob the caller did not take (its SHA-256 was wrong, the cache could not keep it):
    // it leaves the swarm and its file goes.
    void discard(const core::Digest& blob);
    // Stops serving what `held` no longer holds and what its certificate no longer covers; the
    // blobs it stopped serving (each to be told to the broker: HAVE false).
    QList<core::Digest> prune(const std::function<bool(const core::Digest&)>& held);

    std::int64_t uploadedBytes() const;

private:
    struct Private;
    explicit NodeSwarm(std::unique_ptr<Private> d);
    std::unique_ptr<Private> d;
};

} // namespace tessera::net
