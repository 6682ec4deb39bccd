#pragma once

#include "blobtorrent.h"

#include <core/error.h>

#include <QList>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <memory>

namespace tessera::swarm {

// This node's part in the blob swarm (docs/SWARM.md): one BitTorrent session, listening for TLS
// peers on one address, with no DHT, no local discovery, no peer exchange, no uTP and no MSE; each
// blob's torrent joined with this node's certificate for it. Not thread-safe: one owner thread.
class Swarm {
public:
    struct Options {
        // Where it listens and dials from; 0.0.0.0: every interface, dialling from any.
        QString address = QStringLiteral("127.0.0.1");
        int port = 0; // its TLS port; 0: any free one (port() says which)
        std::int64_t uploadBytesPerSecond = 0; // 0: no cap (Swarm/MaxUploadKiBps)
        // Every peer unchoked at once (libtorrent's default is 8): the broker's seed, whose peers
        // are all nodes it handed the blob.
        bool unchokeAll = false;
    };
    // What happened to a blob's swarm.
    struct Event {
        enum class Kind {
            Fetched, // the blob is whole in its folder, every piece checked against the torrent
            Banned, // a peer sent a piece that failed its hash and was banned
            Refused, // a peer failed the TLS handshake (no certificate of the torrent's authority)
            Failed, // the torrent stopped: a disk error, a certificate it cannot use
        };
        Kind kind;
        QString blob; // 64 hex digits; empty for a refused peer (it named no torrent we could trust)
        QString peer; // host:port, for Banned and Refused
        QString detail;
    };

    static core::Result<std::unique_ptr<Swarm>> start(const Options& options);
    ~Swarm();
    Swarm(const Swarm&) = delete;
    Swarm& operator=(const Swarm&) = delete;

    int port() const;
    // Serves the blob from `directory`/<64 hex digits>, which must hold it whole.
    core::Status seed(
        const BlobTorrent& torrent, const QString& directory, const QByteArray& certificatePem, const QByteArray& privateKeyPem);
    // Fetches the blob into `directory`/<64 hex digits> from `peers` ("host:port"); Fetched says
    // when it is whole. The caller still checks its SHA-256 before it trusts it.
    core::Status fetch(const BlobTorrent& torrent, const QString& directory, const QByteArray& certificatePem,
        const QByteArray& privateKeyPem, const QStringList& peers);
    // More peers for a blob being fetched ("host:port").
    core::Status addPeers(const core::Digest& blob, const QStringList& peers);
    // The blob's file moved to `directory` (the caller renamed it there): the swarm serves it from
    // there on, without leaving the swarm (its peers stay connected).
    core::Status relocate(const core::Digest& blob, const QString& directory);
    // Leaves the blob's swarm: its torrent goes, its file stays where it is (false: not in it).
    bool drop(const core::Digest& blob);
    // Whether the blob is in the swarm (seeded or being fetched).
    bool has(const core::Digest& blob) const;
    // The bytes of the blob fetched and checked so far (-1: not in the swarm).
    std::int64_t fetchedBytes(const core::Digest& blob) const;
    // A new certificate for a blob in the swarm (the broker issued it for a new assignment).
    core::Status renew(const core::Digest& blob, const QByteArray& certificatePem, const QByteArray& privateKeyPem);
    // Events since the last call, waiting at most waitMs for the first.
    QList<Event> events(int waitMs);
    // The payload bytes this session uploaded to its peers, over all blobs.
    std::int64_t uploadedBytes() const;

private:
    struct Private;
    explicit Swarm(std::unique_ptr<Private> d);
    std::unique_ptr<Private> d;
};

} // namespace tessera::swarm
