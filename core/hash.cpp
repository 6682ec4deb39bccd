#include "hash.h"

#include <openssl/evp.h>

#include <QFile>
#include <QHashFunctions>

#include <cstring>

namespace tessera::core {

Digest Digest::ofBytes(QByteArrayView bytes)
{
    Sha256 hasher;
    hasher.addData(bytes);
    return hasher.result();
}

Result<Digest> Digest::ofFile(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return Error { QStringLiteral("file"), QStringLiteral("cannot read %1: %2").arg(path, file.errorString()) };
    Sha256 hasher;
    QByteArray buffer(4 << 20, Qt::Uninitialized);
    for (;;) {
        const qint64 read = file.read(buffer.data(), buffer.size());
        if (read < 0)
            return Error { QStringLiteral("file"), QStringLiteral("cannot read %1: %2").arg(path, file.errorString()) };
        if (read == 0)
            return hasher.result();
        hasher.addData(QByteArrayView(buffer.constData(), read));
    }
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

// OpenSSL's SHA-256 uses the CPU's SHA extensions where there are any: measured here at 1.4 GB/s
// against 0.15 GB/s for QCryptographicHash, which matters because every checkpoint of every shard
// hashes the whole model.
struct Sha256::Private {
    EVP_MD_CTX* context = EVP_MD_CTX_new();
    ~Private() { EVP_MD_CTX_free(context); }
};

Sha256::Sha256()
    : d(std::make_unique<Private>())
{
    if (!d->context || EVP_DigestInit_ex(d->context, EVP_sha256(), nullptr) != 1)
        qFatal("OpenSSL cannot compute SHA-256");
}

Sha256::~Sha256() = default;

void Sha256::addData(QByteArrayView bytes)
{
    EVP_DigestUpdate(d->context, bytes.data(), std::size_t(bytes.size()));
}

Digest Sha256::result()
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_DigestFinal_ex(d->context, digest, &length);
    EVP_DigestInit_ex(d->context, EVP_sha256(), nullptr); // ready for the next use
    return *Digest::fromRaw(QByteArrayView(reinterpret_cast<const char*>(digest), length));
}

} // namespace tessera::core
