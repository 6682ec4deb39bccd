#pragma once

#include "error.h"

#include <QByteArray>
#include <QJsonObject>
#include <QString>

namespace tessera::core {

// Ed25519 signatures (libsodium): the broker signs receipts for payments and slashes, so that
// anyone holding one can check it offline, and nobody can forge one.
struct SigningKeys {
    QByteArray publicKey; // 32 bytes
    QByteArray secretKey; // 64 bytes

    static SigningKeys generate();
    // The key file (base64 lines "sign-public KEY" and "sign-secret KEY"), created when missing.
    static Result<SigningKeys> loadOrCreate(const QString& path);
    QByteArray sign(const QByteArray& message) const;
};

bool verifySignature(const QByteArray& message, const QByteArray& signature, const QByteArray& publicKey);

// A signed JSON document: the signature covers the compact JSON of every field but "signature"
// (Qt writes keys in sorted order, so the bytes are canonical).
QJsonObject signDocument(QJsonObject document, const SigningKeys& keys);
// Checks a document signed by signDocument against the public key it names in "signer" (base64);
// the error says what is wrong.
Status verifyDocument(const QJsonObject& document);

} // namespace tessera::core
