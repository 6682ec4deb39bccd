#include "remotenode.h"

#include <QJsonDocument>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QNetworkRequest>
#include <QSslCertificate>
#include <QSslConfiguration>
#include <QWebSocket>

namespace tessera::control {

namespace {

constexpr int MaxRetryMs = 30'000;
constexpr int ConnectMs = 15'000; // an upgrade unanswered by then is dropped
constexpr int PingMs = 15'000; // a link that answers no ping within this is dropped (a machine asleep)
constexpr qint64 MaxStateBytes = 1 << 20; // a node's state is tens of KiB; a larger one is refused

} // namespace

RemoteNode::RemoteNode(ControlEndpoint endpoint, QObject* parent)
    : QObject(parent)
    , m_endpoint(std::move(endpoint))
    , m_network(new QNetworkAccessManager(this))
    , m_retry(this)
{
    m_retry.setSingleShot(true);
    connect(&m_retry, &QTimer::timeout, this, &RemoteNode::open);
    // While connected: a ping each PingMs, and a drop when the last one went unanswered; while
    // connecting: a drop once ConnectMs passed (Qt's WebSocket client has no such limit).
    m_watch.setInterval(PingMs);
    connect(&m_watch, &QTimer::timeout, this, [this] {
        if (!m_socket)
            return;
        if (!m_connected || m_awaitingPong)
            return m_socket->abort(); // disconnected() follows: dropped, and tried again
        m_awaitingPong = true;
        m_socket->ping();
    });
    open();
}

RemoteNode::~RemoteNode()
{
    if (m_socket)
        disconnect(m_socket, nullptr, this, nullptr);
}

bool RemoteNode::pinned(const QByteArray& certificateDigest) const
{
    return !m_endpoint.fingerprint.isEmpty() && certificateDigest.toHex() == m_endpoint.fingerprint;
}

void RemoteNode::open()
{
    if (m_socket) {
        disconnect(m_socket, nullptr, this, nullptr);
        m_socket->deleteLater();
    }
    m_socket = new QWebSocket(QString(), QWebSocketProtocol::VersionLatest, this);
    m_socket->setMaxAllowedIncomingMessageSize(MaxStateBytes);
    m_socket->setMaxAllowedIncomingFrameSize(MaxStateBytes); // refused before it is buffered
    if (!m_endpoint.fingerprint.isEmpty()) // the pin is checked before the handshake's request (with the token) goes
        m_socket->setSslConfiguration(pinnedConfiguration(m_socket->sslConfiguration()));
    auto* socket = m_socket;
    connect(socket, &QWebSocket::sslErrors, this, [this, socket](const QList<QSslError>&) {
        if (pinned(socket->sslConfiguration().peerCertificate().digest(QCryptographicHash::Sha256)))
            socket->ignoreSslErrors();
        else
            m_problem = tr("its certificate is not the one pinned (a new certificate, or another program at its address)");
    });
    connect(socket, &QWebSocket::pong, this, [this] { m_awaitingPong = false; });
    connect(socket, &QWebSocket::connected, this, [this] {
        m_connected = true;
        m_awaitingPong = false;
        m_watch.start(PingMs);
        m_retryMs = 1000;
        m_problem.clear();
        Q_EMIT changed();
    });
    connect(socket, &QWebSocket::textMessageReceived, this, [this](const QString& message) {
        const auto document = QJsonDocument::fromJson(message.toUtf8());
        if (!document.isObject())
            return;
        m_state = document.object();
        Q_EMIT changed();
    });
    connect(socket, &QWebSocket::disconnected, this, [this, socket] { dropped(socket->errorString()); });
    const QString scheme = m_endpoint.fingerprint.isEmpty() ? QStringLiteral("ws") : QStringLiteral("wss");
    socket->open(QUrl(QStringLiteral("%1://%2/api/v1/events?token=%3")
                          .arg(scheme, hostPort(m_endpoint), QString::fromLatin1(m_endpoint.token))));
    m_watch.start(ConnectMs);
}

void RemoteNode::dropped(const QString& why)
{
    const bool was = m_connected;
    m_connected = false;
    m_watch.stop();
    if (m_problem.isEmpty() || was)
        m_problem = why.isEmpty() ? tr("not reachable") : why;
    Q_EMIT changed();
    m_retry.start(m_retryMs);
    m_retryMs = std::min(m_retryMs * 2, MaxRetryMs);
}

void RemoteNode::act(const QString& action, const QJsonObject& body)
{
    const QString scheme = m_endpoint.fingerprint.isEmpty() ? QStringLiteral("http") : QStringLiteral("https");
    QNetworkRequest request(QUrl(QStringLiteral("%1://%2/api/v1/%3").arg(scheme, hostPort(m_endpoint), action)));
    request.setRawHeader("Authorization", "Bearer " + m_endpoint.token);
    request.setHeader(QNetworkRequest::ContentTypeHeader, QStringLiteral("application/json"));
    request.setTransferTimeout(10'000);
    if (!m_endpoint.fingerprint.isEmpty())
        request.setSslConfiguration(pinnedConfiguration(request.sslConfiguration()));
    request.setAttribute(QNetworkRequest::RedirectPolicyAttribute, QNetworkRequest::ManualRedirectPolicy);
    QNetworkReply* reply = m_network->post(request, QJsonDocument(body).toJson(QJsonDocument::Compact));
    connect(reply, &QNetworkReply::sslErrors, this, [this, reply](const QList<QSslError>&) {
        if (pinned(reply->sslConfiguration().peerCertificate().digest(QCryptographicHash::Sha256)))
            reply->ignoreSslErrors();
    });
    // Once more when encrypted, before the request goes: nothing unpinned is ever sent the token.
    connect(reply, &QNetworkReply::encrypted, this, [this, reply] {
        if (!pinned(reply->sslConfiguration().peerCertificate().digest(QCryptographicHash::Sha256)))
            reply->abort();
    });
    connect(reply, &QNetworkReply::downloadProgress, this, [reply](qint64 received, qint64) {
        if (received > MaxStateBytes)
            reply->abort();
    });
    connect(reply, &QNetworkReply::finished, this, [this, reply, action] {
        reply->deleteLater();
        const auto answer = QJsonDocument::fromJson(reply->read(MaxStateBytes)).object();
        if (reply->error() != QNetworkReply::NoError) {
            const QString why = answer.value(QStringLiteral("error")).toString();
            m_problem = tr("%1 failed: %2").arg(action, why.isEmpty() ? reply->errorString() : why.left(300));
        } else {
            m_state = answer;
            if (m_connected)
                m_problem.clear();
        }
        Q_EMIT changed();
    });
}

} // namespace tessera::control
