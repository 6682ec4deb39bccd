#pragma once

#include "error.h"

#include <QByteArray>
#include <QString>
#include <QStringList>

#include <cstdint>

namespace tessera::core {

// A P-256 key pair in PEM: a node's swarm key (swarm.key; docs/SWARM.md), or an authority's.
struct KeyPair {
    QByteArray privatePem;
    QByteArray publicPem;

    static Result<KeyPair> generate();
    // The pair of a stored private key (swarm.key).
    static Result<KeyPair> fromPrivatePem(const QByteArray& privatePem);
};

// A self-signed P-256 certificate for a TLS server (the control API's, docs/CONTROL.md), named
// `commonName`, for the names and addresses `altNames` ("IP:127.0.0.1", "DNS:localhost"), valid
// from now for `validSeconds`, with its new private key.
struct ServerCertificate {
    QByteArray certificatePem;
    QByteArray privateKeyPem;
};
Result<ServerCertificate> makeServerCertificate(
    const QString& commonName, const QStringList& altNames, std::int64_t validSeconds);

// Whether `privateKeyPem` is the key of `certificatePem`.
bool certificateMatchesKey(const QByteArray& certificatePem, const QByteArray& privateKeyPem);

// When a certificate stops being valid, in milliseconds since the epoch.
Result<std::int64_t> certificateExpiry(const QByteArray& certificatePem);

// A broker's swarm authority (docs/SWARM.md, "Only who may read, reads"): a self-signed P-256
// certificate that every torrent the broker makes carries in its info dictionary. A peer is let into a
// torrent's swarm only with a certificate it signed directly, named by the blob's 64 hex digits.
class Authority {
public:
    static Result<Authority> create(const QString& commonName, std::int64_t validSeconds);
    static Result<Authority> fromPem(const QByteArray& certificatePem, const QByteArray& privateKeyPem);

    const QByteArray& certificatePem() const { return m_certificate; }
    const QByteArray& privateKeyPem() const { return m_key; }

    // A certificate for the holder of `publicKeyPem` to take part in the swarm of the blob named
    // `name`, valid from now for `validSeconds`.
    Result<QByteArray> issue(const QByteArray& publicKeyPem, const QString& name, std::int64_t validSeconds) const;

private:
    Authority(QByteArray certificate, QByteArray key);
    QByteArray m_certificate;
    QByteArray m_key;
};

} // namespace tessera::core
