#pragma once

#include "messages.h"

#include <core/error.h>

#include <QByteArray>
#include <QString>

#include <cstdint>

namespace tessera::net {

// A blob range coded with zstd for the wire (docs/PROTOCOL.md, "Encoded ranges"). Hashes,
// commitments and stored copies are of the decoded bytes; this is transport only. Its name on the
// wire is ZstdEncoding (messages.h).
inline constexpr int ZstdLevel = 3;

// One zstd frame of `bytes` (with its content size), or an empty array when the frame would not
// be smaller than the bytes themselves (the range then goes plain).
QByteArray encodeRange(const QByteArray& bytes, int level = ZstdLevel);

// The `length` bytes that `frame` codes: refused (field "payload") unless it is one zstd frame that
// names its content size, that size is `length`, and it decodes to exactly that many bytes.
// `length` is at most MaxChunkBytes, so a hostile frame cannot make the decoder allocate more.
core::Result<QByteArray> decodeRange(const QByteArray& frame, std::int64_t length);

// A CHUNK's or PUT's range as its header says it travels: decoded when coded, the payload itself
// otherwise. What every receiver of a range does first.
template<Command C> core::Result<QByteArray> rangeOf(const BlobRange<C>& header, const QByteArray& payload);
// The payload that carries `range`: its zstd frame, with the header saying so (encoding, length),
// where that is smaller; the range itself otherwise.
template<Command C> QByteArray codedPayload(BlobRange<C>& header, QByteArray range);

} // namespace tessera::net
