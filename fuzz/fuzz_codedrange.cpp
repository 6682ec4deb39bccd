// libFuzzer target: a zstd-coded blob range as a hostile peer sends it (docs/PROTOCOL.md, "Encoded
// ranges"). The first 3 bytes are the header's `length`, the rest the payload; decodeRange either
// returns exactly `length` bytes or refuses, and never allocates more than a range holds.

#include <net/blobcoding.h>

#include <QByteArray>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size < 3)
        return 0;
    const std::int64_t length = (std::int64_t(data[0]) << 16 | std::int64_t(data[1]) << 8 | data[2]) % (2 * 1024 * 1024);
    const QByteArray frame(reinterpret_cast<const char*>(data + 3), qsizetype(size - 3));
    auto decoded = tessera::net::decodeRange(frame, length);
    if (decoded && decoded->size() != length)
        __builtin_trap();
    if (decoded) {
        // What decodes codes again, and that decodes to the same bytes.
        const QByteArray again = tessera::net::encodeRange(*decoded);
        if (!again.isEmpty() && *tessera::net::decodeRange(again, length) != *decoded)
            __builtin_trap();
    }
    return 0;
}
