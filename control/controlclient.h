#pragma once

#include <core/error.h>

#include <QByteArray>
#include <QHostAddress>
#include <QJsonObject>

namespace tessera::control {

// One request to a node's control API (docs/CONTROL.md), waiting for its answer (at most
// timeoutMs): the JSON answer of a 200, else an error with the API's own reason. For command-line
// clients, which have no event loop.
core::Result<QJsonObject> callControl(const QHostAddress& address, quint16 port, const QByteArray& token,
    const QByteArray& method, const QByteArray& path, const QByteArray& body = {}, int timeoutMs = 10'000);

} // namespace tessera::control
