#pragma once

#include "curvekeys.h"

#include <core/error.h>
#include <core/settings/settings.h>
#include <core/signing.h>

#include <QString>

namespace tessera::net {

// Who a person (or their node) is to every broker: a CURVE keypair, whose public key in Z85 is the
// account id (and the node id), and an Ed25519 key that signs commitments and stake requests. One
// per data folder, shared by the app, tessera-node and tessera-job: what a node earns, its owner
// can spend. Kept as two files readable by their owner only, the key file (node.key) and, beside
// it, the signing key (node.sign). Whoever holds them holds the credits; lost, the credits are lost.
struct Identity {
    CurveKeys keys;
    core::SigningKeys signing;
    QString keyFile;
    QString signingFile;

    QString account() const { return keys.publicKey; }

    // Node/KeyFile, else node.key in the data folder (Node/DataDirectory, else
    // ~/.local/share/Tessera); the signing key beside it, the key file's name with ".sign".
    static QString defaultKeyFile(const core::settings::Settings& settings);
    static QString signingFileFor(const QString& keyFile);

    // Loads the identity, creating what does not exist yet (and its folder).
    static core::Result<Identity> loadOrCreate(const QString& keyFile);
    static core::Result<Identity> load(const QString& keyFile);

    // A backup: one text file with both keypairs, readable by its owner only.
    core::Status exportTo(const QString& path) const;
    // Reads a backup and installs it as the identity at keyFile (both files).
    static core::Result<Identity> importFrom(const QString& backup, const QString& keyFile);
};

} // namespace tessera::net
