// libFuzzer target: a blob's torrent as a broker sends it (swarm/blobtorrent, docs/SWARM.md),
// read by a node before it joins the blob's swarm. Whatever the bytes, it returns a checked torrent
// or an error: no crash, no hang, no read outside the input.

#include <swarm/blobtorrent.h>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const QByteArray bytes(reinterpret_cast<const char*>(data), qsizetype(size));
    const auto torrent = tessera::swarm::BlobTorrent::read(bytes);
    if (torrent)
        (void)tessera::swarm::BlobTorrent::read(torrent->bytes);
    return 0;
}
