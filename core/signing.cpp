#include "signing.h"

#include "privatefile.h"

#include <QFile>
#include <QJsonDocument>

#include <sodium.h>

namespace tessera::core {

namespace {

void ensureSodium()
{
    static const bool ready = sodium_init() >= 0;
    if (!ready)
        qFatal("libsodium cannot start");
}

QByteArray canonical(QJsonObject document)
{
    document.remove(QStringLiteral("signature"));
    return QJsonDocument(document).toJson(QJsonDocument::Compact);
}

} // namespace

SigningKeys SigningKeys::generate()
{
    ensureSodium();
    SigningKeys keys;
    keys.publicKey.resize(crypto_sign_PUBLICKEYBYTES);
    keys.secretKey.resize(crypto_sign_SECRETKEYBYTES);
    crypto_sign_keypair(
        reinterpret_cast<unsigned char*>(keys.publicKey.data()), reinterpret_cast<unsigned char*>(keys.secretKey.data()));
    return keys;
}

Result<SigningKeys> SigningKeys::loadOrCreate(const QString& path)
{
    QFile file(path);
    if (!file.exists()) {
        const auto keys = generate();
        const auto written = writePrivateFile(path,
            "sign-public " + keys.publicKey.toBase64() + "\nsign-secret " + keys.secretKey.toBase64() + "\n",
            QStringLiteral("the signing key"));
        if (!written)
            return written.error();
        return keys;
    }
    if (!file.open(QIODevice::ReadOnly))
        return Error { path, QStringLiteral("cannot read the signing key") };
    SigningKeys keys;
    for (const auto& line : file.readAll().split('\n')) {
        const auto space = line.indexOf(' ');
        if (space < 0)
            continue;
        const auto name = line.left(space);
        const auto value = QByteArray::fromBase64(line.mid(space + 1).trimmed());
        if (name == "sign-public")
            keys.publicKey = value;
        else if (name == "sign-secret")
            keys.secretKey = value;
    }
    if (keys.publicKey.size() != crypto_sign_PUBLICKEYBYTES || keys.secretKey.size() != crypto_sign_SECRETKEYBYTES)
        return Error { path, QStringLiteral("not a Tessera signing key file") };
    return keys;
}

QByteArray SigningKeys::sign(const QByteArray& message) const
{
    ensureSodium();
    QByteArray signature(crypto_sign_BYTES, '\0');
    crypto_sign_detached(reinterpret_cast<unsigned char*>(signature.data()), nullptr,
        reinterpret_cast<const unsigned char*>(message.constData()), static_cast<unsigned long long>(message.size()),
        reinterpret_cast<const unsigned char*>(secretKey.constData()));
    return signature;
}

bool verifySignature(const QByteArray& message, const QByteArray& signature, const QByteArray& publicKey)
{
    ensureSodium();
    if (signature.size() != crypto_sign_BYTES || publicKey.size() != crypto_sign_PUBLICKEYBYTES)
        return false;
    return crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(signature.constData()),
               reinterpret_cast<const unsigned char*>(message.constData()), static_cast<unsigned long long>(message.size()),
               reinterpret_cast<const unsigned char*>(publicKey.constData()))
        == 0;
}

QJsonObject signDocument(QJsonObject document, const SigningKeys& keys)
{
    document.insert(QStringLiteral("signer"), QString::fromLatin1(keys.publicKey.toBase64()));
    document.insert(QStringLiteral("signature"), QString::fromLatin1(keys.sign(canonical(document)).toBase64()));
    return document;
}

Status verifyDocument(const QJsonObject& document)
{
    const auto signer = QByteArray::fromBase64(document.value(QStringLiteral("signer")).toString().toLatin1());
    const auto signature = QByteArray::fromBase64(document.value(QStringLiteral("signature")).toString().toLatin1());
    if (signer.size() != crypto_sign_PUBLICKEYBYTES)
        return Error { QStringLiteral("signer"), QStringLiteral("the document names no signer key") };
    if (signature.size() != crypto_sign_BYTES)
        return Error { QStringLiteral("signature"), QStringLiteral("the document carries no signature") };
    if (!verifySignature(canonical(document), signature, signer))
        return Error { QStringLiteral("signature"),
            QStringLiteral("the signature does not match: the document was changed or forged") };
    return {};
}

} // namespace tessera::core
