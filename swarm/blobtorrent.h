#pragma once

#include <core/error.h>
#include <core/hash.h>

#include <QByteArray>
#include <QString>

#include <cstdint>

namespace tessera::swarm {

// One blob as one BitTorrent torrent (docs/SWARM.md, "One blob, one torrent"): v2 only (BEP 52,
// SHA-256 Merkle trees), one file named by the blob's 64 hex digits, 16 KiB pieces, private, and
// the broker's swarm authority in its info dictionary.
struct BlobTorrent {
    static constexpr int PieceBytes = 16 * 1024;

    QByteArray bytes; // the bencoded .torrent, piece layers included
    core::Digest blob; // the SHA-256 of the file's bytes: the name it carries
    std::int64_t size = 0;
    QString infoHash; // v2, 64 hex digits (the SHA-256 of the info dictionary)
    QByteArray authorityPem;

    // The torrent of the blob stored at `path`, a file named by its 64 hex digits. Blobs of at most
    // one piece stay on ZeroMQ (docs/SWARM.md) and are refused here.
    static core::Result<BlobTorrent> make(const QString& path, const QByteArray& authorityPem);
    // A torrent as a broker sends it, checked: every property above, or why it is not one.
    static core::Result<BlobTorrent> read(const QByteArray& bytes);
};

} // namespace tessera::swarm
