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
    void refuse(QTcpSocket* socket, int status, const QString& why);
    // Why a request's token, Origin or Host is refused (0: it is not).
    std::pair<int, QString> checkCaller(const HttpHead& head, const QByteArray& token) const;
    std::pair<int, QString> checkHost(const HttpHead& head) const;
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

} // namespace tessera::control
