#pragma once

#include <core/error.h>

#include <QByteArray>
#include <QString>

#include <cstdint>

namespace tessera::swarm {

// A P-256 key pair in PEM: a node's swarm key (swarm.key; docs/SWARM.md), or an authority's.
struct KeyPair {
    QByteArray privatePem;
    QByteArray publicPem;

    static core::Result<KeyPair> generate();
    // The pair of a stored private key (swarm.key).
    static core::Result<KeyPair> fromPrivatePem(const QByteArray& privatePem);
};

// When a certificate stops being valid, in milliseconds since the epoch.
core::Result<std::int64_t> certificateExpiry(const QByteArray& certificatePem);

// A broker's swarm authority (docs/SWARM.md, "Only who may read, reads"): a self-signed P-256
// certificate that every torrent the broker makes carries in its info dictionary. A peer is let into a
// torrent's swarm only with a certificate it signed directly, named by the blob's 64 hex digits.
class Authority {
public:
    static core::Result<Authority> create(const QString& commonName, std::int64_t validSeconds);
    static core::Result<Authority> fromPem(const QByteArray& certificatePem, const QByteArray& privateKeyPem);

    const QByteArray& certificatePem() const { return m_certificate; }
    const QByteArray& privateKeyPem() const { return m_key; }

    // A certificate for the holder of `publicKeyPem` to take part in the swarm of the blob named
    // `name`, valid from now for `validSeconds`.
    core::Result<QByteArray> issue(const QByteArray& publicKeyPem, const QString& name, std::int64_t validSeconds) const;

private:
    Authority(QByteArray certificate, QByteArray key);
    QByteArray m_certificate;
    QByteArray m_key;
};

} // namespace tessera::swarm
