#pragma once

#include "controlclient.h"

#include <QJsonObject>
#include <QObject>
#include <QTimer>

class QNetworkAccessManager;
class QNetworkReply;
class QWebSocket;

namespace tessera::control {

// Another node's control API, watched and driven (the desktop app's Machines view, docs/APP.md):
// its state pushed over a WebSocket, opened again after a drop (1 s, doubling to 30 s; a link that
// does not open within 15 s, or answers no ping within 15 s, is dropped), and its
// actions sent as POSTs; over TLS to its pinned certificate only, or plain on loopback.
class RemoteNode : public QObject {
    Q_OBJECT

public:
    explicit RemoteNode(ControlEndpoint endpoint, QObject* parent = nullptr);
    ~RemoteNode() override;

    const ControlEndpoint& endpoint() const { return m_endpoint; }
    // The state it last pushed (docs/CONTROL.md, "The state"); empty before the first.
    const QJsonObject& state() const { return m_state; }
    bool connected() const { return m_connected; }
    // Why it is not connected, or why its last action failed; empty when all is well.
    QString problem() const { return m_problem; }
    // POST /api/v1/ACTION with `body`; its answer replaces the state, its refusal is the problem.
    void act(const QString& action, const QJsonObject& body = {});

Q_SIGNALS:
    void changed();

private:
    void open();
    void dropped(const QString& why);
    // A self-signed certificate is trusted when it is the pinned one, and nothing else is.
    bool pinned(const QByteArray& certificateDigest) const;

    ControlEndpoint m_endpoint;
    QWebSocket* m_socket = nullptr;
    QNetworkAccessManager* m_network = nullptr;
    QTimer m_retry;
    QTimer m_watch; // the connect limit, then the pings
    bool m_awaitingPong = false;
    int m_retryMs = 1000;
    QJsonObject m_state;
    bool m_connected = false;
    QString m_problem;
};

} // namespace tessera::control
