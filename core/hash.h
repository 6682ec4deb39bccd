#pragma once

#include "error.h"

#include <QByteArray>
#include <QByteArrayView>
#include <QString>

#include <array>
#include <cstdint>
#include <memory>

namespace tessera::core {

// A SHA-256 digest. Blobs, weights and checkpoints are named by it.
class Digest {
public:
    static constexpr qsizetype Size = 32;

    Digest() = default; // all zero: "no digest"
    static Digest ofBytes(QByteArrayView bytes);
    // The SHA-256 of a file's bytes, read in 4 MiB pieces (never whole in memory); an error names it.
    static Result<Digest> ofFile(const QString& path);
    static Result<Digest> fromHex(QStringView hex);
    static Result<Digest> fromRaw(QByteArrayView raw);

    QString toHex() const;
    QByteArray toRaw() const;
    bool isNull() const;

    auto operator<=>(const Digest&) const = default;

private:
    std::array<std::uint8_t, Size> m_bytes {};
};

// Incremental SHA-256 for data that arrives in pieces (blob chunks, weight tensors).
class Sha256 {
public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;

    void addData(QByteArrayView bytes);
    Digest result();

private:
    struct Private;
    std::unique_ptr<Private> d;
};

size_t qHash(const Digest& digest, size_t seed = 0) noexcept;

} // namespace tessera::core
