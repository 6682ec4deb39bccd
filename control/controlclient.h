#pragma once

#include <core/error.h>

#include <QByteArray>
#include <QHostAddress>
#include <QJsonObject>
#include <QSslConfiguration>
#include <QString>

namespace tessera::control {

// Where a node's control API is, and what a client proves and pins (docs/CONTROL.md).
struct ControlEndpoint {
    QString host; // an address or a name
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

// Reads what `tessera-node ctl url` prints, the dashboard's address with its token (and over TLS the
// certificate's fingerprint): http(s)://HOST:PORT/#token=TOKEN[&fp=FINGERPRINT]. https without a
// fingerprint is refused (a self-signed certificate cannot be trusted otherwise), and so is http
// beyond loopback (the node would not serve it).
core::Result<ControlEndpoint> parsePairing(const QString& text);
// A TLS configuration that trusts no authority: every certificate then comes to the client's pin
// check (sslErrors), before anything is sent.
QSslConfiguration pinnedConfiguration(QSslConfiguration configuration);
// Whether `bind` is every address of this machine (0.0.0.0, or Qt's Any, or "::").
bool isEveryAddress(const QHostAddress& bind);
// Where a client on this machine dials an API bound to `bind`: loopback for every address ("::":
// ::1, for Qt's "::" is IPv6 alone), else the address itself.
QString localHostFor(const QHostAddress& bind);
// "host:port" as a Host header and a URL write it ("[::1]:7780").
QString hostPort(const ControlEndpoint& endpoint);

} // namespace tessera::control
