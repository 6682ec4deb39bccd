#include "hash.h"

#include <QCryptographicHash>
#include <QHashFunctions>

#include <cstring>

namespace tessera::core {

Digest Digest::ofBytes(QByteArrayView bytes)
{
    Sha256 hasher;
    hasher.addData(bytes);
    return hasher.result();
}

Result<Digest> Digest::fromRaw(QByteArrayView raw)
{
    if (raw.size() != Size)
        return Error { {}, QStringLiteral("a SHA-256 digest is 32 bytes, got %1").arg(raw.size()) };
    Digest digest;
    std::memcpy(digest.m_bytes.data(), raw.data(), Size);
    return digest;
}

Result<Digest> Digest::fromHex(QStringView hex)
{
    if (hex.size() != Size * 2)
        return Error { {}, QStringLiteral("a SHA-256 digest is 64 hex digits, got %1 characters").arg(hex.size()) };
    for (QChar c : hex) {
        const bool isHex = (c >= u'0' && c <= u'9') || (c >= u'a' && c <= u'f') || (c >= u'A' && c <= u'F');
        if (!isHex)
            return Error { {}, QStringLiteral("'%1' is not a hex digit").arg(c) };
    }
    return fromRaw(QByteArray::fromHex(hex.toLatin1()));
}

QString Digest::toHex() const
{
    return QString::fromLatin1(toRaw().toHex());
}

QByteArray Digest::toRaw() const
{
    return QByteArray(reinterpret_cast<const char*>(m_bytes.data()), Size);
}

bool Digest::isNull() const
{
    for (auto byte : m_bytes) {
        if (byte != 0)
            return false;
    }
    return true;
}

size_t qHash(const Digest& digest, size_t seed) noexcept
{
    return ::qHash(QByteArrayView(digest.toRaw()), seed);
}

struct Sha256::Private {
    QCryptographicHash hash { QCryptographicHash::Sha256 };
};

Sha256::Sha256()
    : d(std::make_unique<Private>())
{ }

Sha256::~Sha256() = default;

void Sha256::addData(QByteArrayView bytes)
{
    d->hash.addData(bytes);
}

Digest Sha256::result()
{
    return *Digest::fromRaw(d->hash.result());
}

} // namespace tessera::core
