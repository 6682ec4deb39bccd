#pragma once

#include <core/error.h>

#include <QString>

namespace tessera::net {

// A CURVE keypair in Z85 (40 characters each), kept in a file of two lines, "public KEY" and
// "secret KEY", readable by its owner only.
struct CurveKeys {
    QString publicKey;
    QString secretKey;

    static CurveKeys generate();
    // Loads the file, or creates it with a new keypair when it does not exist.
    static core::Result<CurveKeys> loadOrCreate(const QString& path);
    static core::Result<CurveKeys> load(const QString& path);
    core::Status save(const QString& path) const;
};

// "tcp://host:port#KEY" -> endpoint and key (empty when there is none); "ipc:///path" too.
struct BrokerAddress {
    QString endpoint;
    QString serverKey;

    static core::Result<BrokerAddress> parse(const QString& address);
    QString toString() const;
};

// The HOST of a tcp://HOST:PORT endpoint; empty for ipc:// and inproc:// ones.
QString endpointHost(const QString& endpoint);

} // namespace tessera::net
