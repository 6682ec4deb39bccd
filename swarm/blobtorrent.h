#pragma once

#include <core/error.h>
#include <core/hash.h>

#include <QByteArray>
#include <QString>

#include <cstdint>

namespace tessera::swarm {

// One blob as one BitTorrent torrent (docs/SWARM.md, "One blob, one torrent"): v2 only (BEP 52,
// SHA-256 Merkle trees), one file named by the blob's 64 hex digits, pieces of pieceBytesFor its
// size (16 KiB to 4 MiB), private, and the broker's swarm authority in its info dictionary.
struct BlobTorrent {
    static constexpr int PieceBytes = 16 * 1024; // the smallest piece, and v2's block
    static constexpr int MaxPieceBytes = 4 * 1024 * 1024;

    // The piece a blob of `size` bytes is cut into: a power of two from 16 KiB to 4 MiB, the
    // largest that still cuts it into at least 128 pieces (docs/SWARM.md, "One blob, one torrent").
    static int pieceBytesFor(std::int64_t size);

    QByteArray bytes; // the bencoded .torrent, piece layers included
    core::Digest blob; // the SHA-256 of the file's bytes: the name it carries
    std::int64_t size = 0;
    int pieceBytes = PieceBytes;
    QString infoHash; // v2, 64 hex digits (the SHA-256 of the info dictionary)
    QByteArray authorityPem;

    // The torrent of the blob stored at `path`, a file named by its 64 hex digits. Blobs of at most
    // one piece stay on ZeroMQ (docs/SWARM.md) and are refused here.
    static core::Result<BlobTorrent> make(const QString& path, const QByteArray& authorityPem);
    // A torrent as a broker sends it, checked: every property above, or why it is not one.
    static core::Result<BlobTorrent> read(const QByteArray& bytes);
};

} // namespace tessera::swarm
