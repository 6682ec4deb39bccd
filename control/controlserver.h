#pragma once

#include "httprequest.h"

#include <core/error.h>

#include <QByteArray>
#include <QElapsedTimer>
#include <QHash>
#include <QHostAddress>
#include <QJsonObject>
#include <QObject>
#include <QTimer>

#include <functional>
#include <memory>
#include <optional>

class QTcpServer;
class QTcpSocket;
class QWebSocket;
class QWebSocketServer;

namespace tessera::control {

// A node's control API (docs/CONTROL.md): HTTP requests on a QTcpServer, pushed state over
// WebSockets, behind the token, Origin, Host, size and rate checks. Lives in one thread with an event
// loop; stateChanged() may be called from any thread.
class ControlServer : public QObject {
    Q_OBJECT

public:
    struct Options {
        QHostAddress address = QHostAddress::LocalHost;
        quint16 port = 7780; // 0: any free port (tests)
        QByteArray token; // 64 hexadecimal digits (loadOrCreateToken)
        // HTTPS and WSS with this certificate (loadOrCreateCertificate); required beyond loopback.
        struct Tls {
            QByteArray certificatePem;
            QByteArray privateKeyPem;
        };
        std::optional<Tls> tls;
        HttpLimits limits = {};
        double requestsPerSecond = 20.0;
        double burst = 40.0;
        int maxWebSockets = 16;
        int maxConnections = 64; // open at once, waiting for or sending a request
        int idleMs = 10'000; // a connection without a whole request is closed after it
        int pushIntervalMs = 250; // at most 4 pushed states a second
    };
    // The state of docs/CONTROL.md, "Requests"; called on this object's thread.
    using State = std::function<QJsonObject()>;
    // An action ("pause", "resume") with the request's body: an error is answered 400 with it.
    using Action = std::function<core::Status(const QString& action, const QJsonObject& body)>;

    ControlServer(Options options, State state, Action action, QObject* parent = nullptr);
    ~ControlServer() override;

    // Listens; an error says why not (a bind beyond loopback, a port taken).
    core::Status listen();
    quint16 port() const;
    // The state changed: every open WebSocket gets it, at most every pushIntervalMs. Thread-safe.
    void stateChanged();
    // WebSockets open now (on this object's thread).
    int webSockets() const { return int(m_open.size()); }
    // The actions it takes: POST /api/v1/ACTION.
    static const QStringList& actions();

private:
    struct Connection;
    void accept();
    void readFrom(QTcpSocket* socket);
    void answer(QTcpSocket* socket, int status, const QJsonObject& body);
    // One answer and the end of the connection: the status line, `headers` (lines without their
    // last CRLF), Connection and Content-Length, then `body`.
    void send(QTcpSocket* socket, int status, const QByteArray& headers, const QByteArray& body);
    void refuse(QTcpSocket* socket, int status, const QString& why);
    // Why a request's token, Origin or Host is refused (0: it is not).
    std::pair<int, QString> checkCaller(const HttpHead& head, const QByteArray& token) const;
    std::pair<int, QString> checkHost(const HttpHead& head) const;
    // The Host values the API answers to ("127.0.0.1:7780"; with a bind to every address, this
    // machine's addresses and names too), worked out once it listens.
    QStringList ownHosts() const;
    core::Status startServer();
    bool allowedAddress(QTcpSocket* socket);
    void handle(QTcpSocket* socket, const HttpHead& head, const QByteArray& body);
    // GET of the dashboard's files (docs/CONTROL.md, "The dashboard"): true when the path is one.
    bool serveFile(QTcpSocket* socket, const HttpHead& head);
    void upgrade(QTcpSocket* socket, const HttpHead& head);
    void push();

    Options m_options;
    State m_state;
    Action m_action;
    std::unique_ptr<QTcpServer> m_server;
    std::unique_ptr<QWebSocketServer> m_webSockets;
    QList<QWebSocket*> m_open;
    int m_waiting = 0; // connections not (yet) WebSockets
    int m_handshaking = 0; // TLS handshakes under way (they count against maxConnections too)
    QStringList m_hosts; // ownHosts()
    QString m_pushed; // the last state pushed
    QTimer m_pushTimer; // a child of this object (it moves to its thread with it)
    QElapsedTimer m_sincePush;
    QElapsedTimer m_clock;
    struct Bucket {
        double tokens = 0.0;
        qint64 atMs = 0;
    };
    QHash<QString, Bucket> m_buckets; // by remote address
};

// The token in `directory`/control.token, made (32 random bytes, in hexadecimal, mode 0600) when
// there is none; an error when the file is not a token.
core::Result<QByteArray> loadOrCreateToken(const QString& directory);

// The API's TLS certificate and key in `directory`/control.crt and control.key (mode 0600): a
// self-signed P-256 certificate for `altNames` ("IP:192.0.2.7", "DNS:garage"), made when there is
// none, or when the one there expires within 30 days. Delete both to make a new one.
core::Result<ControlServer::Options::Tls> loadOrCreateCertificate(const QString& directory, const QStringList& altNames);
// A certificate's fingerprint: the SHA-256 of its DER, in lowercase hexadecimal (64 digits). A
// client pins it (docs/CONTROL.md, "TLS").
QByteArray fingerprintOf(const QByteArray& certificatePem);

} // namespace tessera::control
