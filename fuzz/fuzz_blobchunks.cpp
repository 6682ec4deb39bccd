// libFuzzer target: chunked blob reassembly (BlobStore::putRange), as a broker receives PUTs from
// strangers. The input is a blob followed by a script of ranges (offset, length) in which the
// "uploader" sends pieces of it, or of garbage. Whatever the order, a blob completes only when its
// bytes hash to its name, and the store never holds a blob that does not.

#include <core/blobstore.h>

#include <QTemporaryDir>

#include <cstddef>
#include <cstdint>

using tessera::core::BlobStore;
using tessera::core::Digest;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static QTemporaryDir dir;
    static auto store = BlobStore::open(dir.filePath(QStringLiteral("blobs")), 4 << 20);
    if (!store || size < 2)
        return 0;
    const std::size_t blobSize = std::min<std::size_t>(data[0] * 16 + data[1], size - 2);
    const QByteArray blob(reinterpret_cast<const char*>(data + 2), qsizetype(blobSize));
    const Digest digest = Digest::ofBytes(blob);
    const std::uint8_t* script = data + 2 + blobSize;
    std::size_t left = size - 2 - blobSize;
    std::int64_t declared = std::int64_t(blobSize);
    while (left >= 4) {
        const std::int64_t offset = script[0] * 8;
        const std::int64_t length = script[1] * 8;
        const bool garbage = script[2] & 1;
        if (script[2] & 2)
            declared = std::int64_t(script[3]) * 16; // a size that lies
        script += 4;
        left -= 4;
        QByteArray piece = blob.mid(qsizetype(offset), qsizetype(length));
        if (garbage && !piece.isEmpty())
            piece[0] = char(piece[0] ^ 0x5A);
        auto state = (*store)->putRange(digest, offset, declared, piece);
        if (state && *state == BlobStore::UploadState::Complete) {
            auto stored = (*store)->read(digest);
            if (!stored || Digest::ofBytes(*stored) != digest)
                __builtin_trap(); // completed with bytes that are not the blob
        }
    }
    return 0;
}
