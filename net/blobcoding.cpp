#include "blobcoding.h"

#include "protocol.h"

#include <zstd.h>

namespace tessera::net {

QByteArray encodeRange(const QByteArray& bytes, int level)
{
    if (bytes.isEmpty())
        return {};
    QByteArray frame(qsizetype(ZSTD_compressBound(size_t(bytes.size()))), Qt::Uninitialized);
    const size_t written = ZSTD_compress(frame.data(), size_t(frame.size()), bytes.constData(), size_t(bytes.size()), level);
    if (ZSTD_isError(written) || qsizetype(written) >= bytes.size())
        return {};
    frame.truncate(qsizetype(written));
    return frame;
}

core::Result<QByteArray> decodeRange(const QByteArray& frame, std::int64_t length)
{
    const auto refuse = [](const QString& why) {
        return core::Error { QStringLiteral("payload"), QStringLiteral("the zstd range does not decode: ") + why };
    };
    if (length < 0 || length > MaxChunkBytes)
        return core::Error { QStringLiteral("length"), QStringLiteral("a coded range decodes to at most 1 MiB") };
    if (frame.isEmpty())
        return refuse(QStringLiteral("no frame"));
    // One frame, all of the payload: nothing may follow it (a second frame would be bytes the
    // header's length does not count).
    const size_t frameSize = ZSTD_findFrameCompressedSize(frame.constData(), size_t(frame.size()));
    if (ZSTD_isError(frameSize))
        return refuse(QString::fromUtf8(ZSTD_getErrorName(frameSize)));
    if (frameSize != size_t(frame.size()))
        return refuse(QStringLiteral("bytes follow the frame"));
    const unsigned long long content = ZSTD_getFrameContentSize(frame.constData(), size_t(frame.size()));
    if (content == ZSTD_CONTENTSIZE_UNKNOWN || content == ZSTD_CONTENTSIZE_ERROR)
        return refuse(QStringLiteral("the frame names no content size"));
    if (content != static_cast<unsigned long long>(length))
        return refuse(QStringLiteral("the frame holds %1 bytes, the header says %2").arg(content).arg(length));
    QByteArray bytes(qsizetype(length), Qt::Uninitialized);
    const size_t decoded = ZSTD_decompress(bytes.data(), size_t(bytes.size()), frame.constData(), size_t(frame.size()));
    if (ZSTD_isError(decoded))
        return refuse(QString::fromUtf8(ZSTD_getErrorName(decoded)));
    if (decoded != size_t(length))
        return refuse(QStringLiteral("the frame decoded to %1 bytes, the header says %2").arg(decoded).arg(length));
    return bytes;
}

template<Command C> core::Result<QByteArray> rangeOf(const BlobRange<C>& header, const QByteArray& payload)
{
    if (header.encoding.isEmpty())
        return payload;
    return decodeRange(payload, header.length);
}

template<Command C> QByteArray codedPayload(BlobRange<C>& header, QByteArray range)
{
    QByteArray frame = encodeRange(range);
    if (frame.isEmpty())
        return range;
    header.encoding = ZstdEncoding;
    header.length = range.size();
    return frame;
}

template core::Result<QByteArray> rangeOf(const BlobRange<Command::Chunk>&, const QByteArray&);
template core::Result<QByteArray> rangeOf(const BlobRange<Command::Put>&, const QByteArray&);
template QByteArray codedPayload(BlobRange<Command::Chunk>&, QByteArray);
template QByteArray codedPayload(BlobRange<Command::Put>&, QByteArray);

} // namespace tessera::net
