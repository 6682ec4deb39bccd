#include "controlclient.h"

#include <QElapsedTimer>
#include <QJsonDocument>
#include <QSslSocket>

namespace tessera::control {

core::Result<QJsonObject> callControl(
    const ControlEndpoint& endpoint, const QByteArray& method, const QByteArray& path, const QByteArray& body, int timeoutMs)
{
    const auto& [address, port, token, fingerprint] = endpoint;
    const QString where = QStringLiteral("%1 port %2").arg(address.toString()).arg(port);
    QSslSocket socket;
    bool pinned = true;
    if (fingerprint.isEmpty()) {
        socket.connectToHost(address, port);
    } else {
        // Self-signed: trusted for being exactly the certificate the user pinned, nothing else.
        QObject::connect(&socket, &QSslSocket::sslErrors, [&](const QList<QSslError>&) {
            pinned = socket.peerCertificate().digest(QCryptographicHash::Sha256).toHex() == fingerprint.toLower();
            if (pinned)
                socket.ignoreSslErrors();
        });
        socket.connectToHostEncrypted(address.toString(), port);
    }
    if (!(fingerprint.isEmpty() ? socket.waitForConnected(timeoutMs) : socket.waitForEncrypted(timeoutMs)))
        return core::Error { QStringLiteral("control"),
            !pinned ? QStringLiteral("%1 showed a certificate other than the one pinned (its fingerprint changed: a new "
                                     "certificate, or another program)")
                          .arg(where)
                    : QStringLiteral("no control API at %1 (is tessera-node run going, with Control/Enabled?): %2")
                          .arg(where, socket.errorString()) };
    const QByteArray host = address.protocol() == QAbstractSocket::IPv6Protocol ? '[' + address.toString().toUtf8() + ']'
                                                                                : address.toString().toUtf8();
    socket.write(method + ' ' + path + " HTTP/1.1\r\nHost: " + host + ':' + QByteArray::number(port)
        + "\r\nAuthorization: Bearer " + token + "\r\nContent-Type: application/json\r\nContent-Length: "
        + QByteArray::number(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
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

} // namespace tessera::control
