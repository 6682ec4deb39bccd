#pragma once

#include <core/error.h>

#include <QByteArray>
#include <QHostAddress>
#include <QJsonObject>

namespace tessera::control {

// Where a node's control API is, and what a client proves and pins (docs/CONTROL.md).
struct ControlEndpoint {
    QHostAddress address;
    quint16 port = 0;
    QByteArray token;
    // TLS: the SHA-256 of the node's certificate (fingerprintOf); the connection is refused unless
    // the node shows exactly that certificate. Empty: plain HTTP (loopback only).
    QByteArray fingerprint;
};

// One request to a node's control API, waiting for its answer (a blocking client: tessera-node
// ctl, tests). The answer's JSON, or an error with the status and the API's reason.
core::Result<QJsonObject> callControl(const ControlEndpoint& endpoint, const QByteArray& method, const QByteArray& path,
    const QByteArray& body = {}, int timeoutMs = 10'000);

} // namespace tessera::control
