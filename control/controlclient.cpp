#include "controlclient.h"

#include <QElapsedTimer>
#include <QHostAddress>
#include <QJsonDocument>
#include <QSslSocket>
#include <QUrl>
#include <QUrlQuery>

#include <algorithm>
#include <cctype>

namespace tessera::control {

core::Result<QJsonObject> callControl(
    const ControlEndpoint& endpoint, const QByteArray& method, const QByteArray& path, const QByteArray& body, int timeoutMs)
{
    // Named, not a structured binding: clang 14 (the fuzz build) captures no binding in a lambda.
    const QString& host = endpoint.host;
    const quint16 port = endpoint.port;
    const QByteArray& token = endpoint.token;
    const QByteArray& fingerprint = endpoint.fingerprint;
    const QString where = QStringLiteral("%1 port %2").arg(host).arg(port);
    QSslSocket socket;
    bool pinned = true;
    if (fingerprint.isEmpty()) {
        socket.connectToHost(host, port);
    } else {
        // Self-signed: trusted for being exactly the certificate the user pinned, nothing else. No
        // authority is trusted at all (a certificate an authority signed for the name would
        // otherwise pass without a word), so every certificate comes to the pin check, before a
        // byte of the request is written.
        socket.setSslConfiguration(pinnedConfiguration(socket.sslConfiguration()));
        QObject::connect(&socket, &QSslSocket::sslErrors, [&](const QList<QSslError>&) {
            pinned = socket.peerCertificate().digest(QCryptographicHash::Sha256).toHex() == fingerprint.toLower();
            if (pinned)
                socket.ignoreSslErrors();
        });
        socket.connectToHostEncrypted(host, port);
    }
    const bool ready = fingerprint.isEmpty() ? socket.waitForConnected(timeoutMs) : socket.waitForEncrypted(timeoutMs);
    if (ready && !fingerprint.isEmpty()
        && socket.peerCertificate().digest(QCryptographicHash::Sha256).toHex() != fingerprint.toLower()) {
        socket.abort(); // never reached without the check above; kept so that no path sends the token unpinned
        pinned = false;
    }
    if (!ready || !pinned)
        return core::Error { QStringLiteral("control"),
            !pinned ? QStringLiteral("%1 showed a certificate other than the one pinned (its fingerprint changed: a new "
                                     "certificate, or another program)")
                          .arg(where)
                    : QStringLiteral("no control API at %1 (is tessera-node run going, with Control/Enabled?): %2")
                          .arg(where, socket.errorString()) };
    socket.write(method + ' ' + path + " HTTP/1.1\r\nHost: " + hostPort(endpoint).toUtf8() + "\r\nAuthorization: Bearer " + token
        + "\r\nContent-Type: application/json\r\nContent-Length: " + QByteArray::number(body.size())
        + "\r\nConnection: close\r\n\r\n" + body);
    QByteArray reply;
    QElapsedTimer waited;
    waited.start();
    while (socket.state() == QAbstractSocket::ConnectedState && waited.elapsed() < timeoutMs) {
        if (socket.waitForReadyRead(int(std::max<qint64>(1, timeoutMs - waited.elapsed()))))
            reply += socket.readAll();
    }
    reply += socket.readAll();
    const qsizetype end = reply.indexOf("\r\n\r\n");
    if (!reply.startsWith("HTTP/1.1 ") || end < 0)
        return core::Error { QStringLiteral("control"), QStringLiteral("%1 gave no HTTP answer").arg(where) };
    const int status = reply.mid(9, 3).toInt();
    const auto answer = QJsonDocument::fromJson(reply.mid(end + 4)).object();
    if (status != 200)
        return core::Error { QStringLiteral("control"),
            QStringLiteral("%1 answered %2: %3").arg(where).arg(status).arg(answer.value(QStringLiteral("error")).toString()) };
    return answer;
}

QSslConfiguration pinnedConfiguration(QSslConfiguration configuration)
{
    configuration.setCaCertificates({});
    configuration.setProtocol(QSsl::TlsV1_2OrLater);
    return configuration;
}

bool isEveryAddress(const QHostAddress& bind)
{
    return bind == QHostAddress::Any || bind == QHostAddress::AnyIPv4 || bind == QHostAddress::AnyIPv6;
}

QString localHostFor(const QHostAddress& bind)
{
    if (bind == QHostAddress::AnyIPv6)
        return QStringLiteral("::1");
    return isEveryAddress(bind) ? QStringLiteral("127.0.0.1") : bind.toString();
}

QString hostPort(const ControlEndpoint& endpoint)
{
    return (endpoint.host.contains(u':') ? u'[' + endpoint.host + u']' : endpoint.host) + u':' + QString::number(endpoint.port);
}

core::Result<ControlEndpoint> parsePairing(const QString& text)
{
    const QUrl url(text.trimmed(), QUrl::StrictMode);
    const QUrlQuery fragment(url.fragment());
    const auto refuse = [](const QString& why) {
        return core::Error { QStringLiteral("machine"),
            why + QStringLiteral(": paste what `tessera-node ctl url` prints on that machine (http(s)://HOST:PORT/#token=...)") };
    };
    const bool https = url.scheme() == u"https";
    if (!url.isValid() || (!https && url.scheme() != u"http") || url.host().isEmpty() || url.port() <= 0)
        return refuse(QStringLiteral("not a node's address"));
    ControlEndpoint endpoint { url.host(), quint16(url.port()),
        fragment.queryItemValue(QStringLiteral("token")).toLatin1().toLower(),
        fragment.queryItemValue(QStringLiteral("fp")).toLatin1().toLower() };
    const auto hex = [](const QByteArray& bytes) {
        return bytes.size() == 64 && std::all_of(bytes.begin(), bytes.end(), [](char c) { return std::isxdigit(uchar(c)); });
    };
    if (!hex(endpoint.token))
        return refuse(QStringLiteral("no token in it"));
    if (https && !hex(endpoint.fingerprint))
        return refuse(QStringLiteral("an https address needs its certificate's fingerprint (&fp=)"));
    if (!https && !QHostAddress(endpoint.host).isLoopback() && endpoint.host != u"localhost")
        return refuse(QStringLiteral("a node serves other machines over https only"));
    if (!https)
        endpoint.fingerprint.clear();
    return endpoint;
}

} // namespace tessera::control
