#include "controlserver.h"

#include "controlclient.h"

#include <core/certificates.h>
#include <core/privatefile.h>
#include <core/readfile.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHostInfo>
#include <QJsonDocument>
#include <QNetworkInterface>
#include <QRandomGenerator>
#include <QSslConfiguration>
#include <QSslKey>
#include <QSslServer>
#include <QSslSocket>
#include <QTcpServer>
#include <QTcpSocket>
#include <QWebSocket>
#include <QWebSocketServer>

#include <algorithm>
#include <array>

#include <sys/socket.h>
#include <unistd.h>

namespace tessera::control {

namespace {

const char* const Upgraded = "tesseraUpgraded"; // a socket handed to the WebSocket server
const char* const Counted = "tesseraCounted"; // a socket whose request the rate has counted
constexpr qint64 MaxUnsent = qint64(1) << 20; // of pushed states a WebSocket has not taken yet

QByteArray reasonOf(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 413:
        return "Content Too Large";
    case 429:
        return "Too Many Requests";
    default:
        return "Service Unavailable";
    }
}

// Equal tokens, in time that does not depend on where they differ.
bool sameSecret(const QByteArray& a, const QByteArray& b)
{
    if (a.size() != b.size() || a.isEmpty())
        return false;
    unsigned char differ = 0;
    for (qsizetype i = 0; i < a.size(); ++i)
        differ |= static_cast<unsigned char>(a[i] ^ b[i]);
    return differ == 0;
}

bool isToken(const QByteArray& text)
{
    if (text.size() != 64)
        return false;
    return std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

constexpr int HandshakeMs = 5000; // a TLS client that has not finished its handshake by then is dropped
constexpr int PerAddress = 8; // connections at once from one address beyond this machine

// A TLS server that counts every connection from its TCP accept to its end, by address, and
// refuses more than PerAddress from one address beyond loopback, and more than `most` in all:
// a stranger cannot hold the API with connections that never finish a handshake, nor shut out
// other addresses (docs/CONTROL.md, "TLS").
class GuardedSslServer final : public QSslServer {
public:
    explicit GuardedSslServer(int most)
        : m_most(most)
    { }

protected:
    void incomingConnection(qintptr descriptor) override
    {
        sockaddr_storage storage {};
        socklen_t length = sizeof storage;
        QHostAddress peer;
        if (::getpeername(int(descriptor), reinterpret_cast<sockaddr*>(&storage), &length) == 0)
            peer.setAddress(reinterpret_cast<sockaddr*>(&storage));
        const QString key = peer.isLoopback() ? QString() : peer.toString();
        if (m_total >= m_most || (!key.isEmpty() && m_byAddress.value(key) >= PerAddress)) {
            ::close(int(descriptor));
            return;
        }
        QSslServer::incomingConnection(descriptor);
        for (auto* socket : findChildren<QSslSocket*>(Qt::FindDirectChildrenOnly)) {
            if (socket->socketDescriptor() != descriptor || socket->property("tesseraCounted").toBool())
                continue;
            socket->setProperty("tesseraCounted", true);
            ++m_total;
            ++m_byAddress[key];
            connect(socket, &QObject::destroyed, this, [this, key] {
                --m_total;
                if (--m_byAddress[key] <= 0)
                    m_byAddress.remove(key);
            });
        }
    }

private:
    int m_most;
    int m_total = 0;
    QHash<QString, int> m_byAddress; // "" for loopback, which is not limited by address
};

} // namespace

ControlServer::ControlServer(Options options, State state, Action action, QObject* parent)
    : QObject(parent)
    , m_options(std::move(options))
    , m_state(std::move(state))
    , m_action(std::move(action))
    , m_pushTimer(this) // a child: it moves with this object to its thread
{
    m_pushTimer.setSingleShot(true);
    connect(&m_pushTimer, &QTimer::timeout, this, &ControlServer::push);
    m_clock.start();
    m_sincePush.start();
}

ControlServer::~ControlServer()
{
    if (m_server) { // its sockets go with it, and must not count down a server being destroyed
        for (auto* socket : m_server->findChildren<QTcpSocket*>())
            disconnect(socket, nullptr, this, nullptr);
    }
    const auto open = std::exchange(m_open, {});
    for (auto* socket : open) {
        disconnect(socket, nullptr, this, nullptr);
        socket->abort();
    }
    qDeleteAll(open);
}

// A plain server on loopback, a TLS one wherever it has a certificate (and beyond loopback it must).
core::Status ControlServer::startServer()
{
    if (m_options.address.isNull())
        return core::Error { QStringLiteral("Control/Bind"), QStringLiteral("not an address") };
    if (!m_options.address.isLoopback() && !m_options.tls)
        return core::Error { QStringLiteral("Control/Bind"),
            QStringLiteral("%1 is not a loopback address: the control API listens beyond this machine only over TLS, "
                           "and has no certificate (docs/CONTROL.md)")
                .arg(m_options.address.toString()) };
    if (!m_options.tls) {
        m_server = std::make_unique<QTcpServer>();
        return {};
    }
    QSslConfiguration configuration = QSslConfiguration::defaultConfiguration();
    configuration.setLocalCertificate(QSslCertificate(m_options.tls->certificatePem, QSsl::Pem));
    configuration.setPrivateKey(QSslKey(m_options.tls->privateKeyPem, QSsl::Ec, QSsl::Pem));
    configuration.setProtocol(QSsl::TlsV1_2OrLater);
    configuration.setPeerVerifyMode(QSslSocket::VerifyNone); // callers prove themselves with the token
    if (configuration.localCertificate().isNull() || configuration.privateKey().isNull())
        return core::Error { QStringLiteral("Control/Bind"),
            QStringLiteral("the control API's certificate or key is unreadable") };
    auto server = std::make_unique<GuardedSslServer>(m_options.maxConnections + m_options.maxWebSockets);
    server->setSslConfiguration(configuration);
    server->setHandshakeTimeout(std::min(m_options.idleMs, HandshakeMs));
    // Qt stops accepting at this many in handshake or not yet taken: above the server's own cap, so
    // that its cap, which closes at once, comes first.
    server->setMaxPendingConnections(m_options.maxConnections + m_options.maxWebSockets + 1);
    // Handshakes count against the connection cap: a stranger must not hold many half-open.
    connect(server.get(), &QSslServer::startedEncryptionHandshake, this, [this](QSslSocket* socket) {
        if (m_waiting + m_handshaking >= m_options.maxConnections)
            return socket->abort();
        ++m_handshaking;
        const auto done = std::make_shared<bool>(false);
        const auto countDown = [this, done] {
            if (!std::exchange(*done, true))
                --m_handshaking;
        };
        connect(socket, &QSslSocket::encrypted, this, countDown);
        connect(socket, &QObject::destroyed, this, countDown);
    });
    m_server = std::move(server);
    return {};
}

core::Status ControlServer::listen()
{
    if (auto started = startServer(); !started)
        return started;
    // A TLS socket is pending once its handshake is done, which newConnection() does not wait for.
    if (m_options.tls)
        connect(m_server.get(), &QTcpServer::pendingConnectionAvailable, this, &ControlServer::accept);
    else
        connect(m_server.get(), &QTcpServer::newConnection, this, &ControlServer::accept);
    if (!m_server->listen(m_options.address, m_options.port))
        return core::Error { QStringLiteral("Control/Port"),
            QStringLiteral("cannot listen on %1 port %2: %3")
                .arg(m_options.address.toString())
                .arg(m_options.port)
                .arg(m_server->errorString()) };
    m_hosts = ownHosts();
    m_webSockets = std::make_unique<QWebSocketServer>(QStringLiteral("tessera"), QWebSocketServer::NonSecureMode);
    connect(m_webSockets.get(), &QWebSocketServer::newConnection, this, [this] {
        while (m_webSockets->hasPendingConnections()) {
            QWebSocket* socket = m_webSockets->nextPendingConnection();
            // It only listens: what a client sends is dropped, and a client that does not read
            // what it is sent is closed before its buffer grows.
            socket->setMaxAllowedIncomingFrameSize(4096);
            socket->setMaxAllowedIncomingMessageSize(4096);
            m_open.append(socket);
            connect(socket, &QWebSocket::disconnected, this, [this, socket] {
                m_open.removeAll(socket);
                socket->deleteLater();
            });
            socket->sendTextMessage(QString::fromUtf8(QJsonDocument(m_state()).toJson(QJsonDocument::Compact)));
        }
    });
    return {};
}

quint16 ControlServer::port() const
{
    return m_server ? m_server->serverPort() : 0;
}

void ControlServer::stateChanged()
{
    QMetaObject::invokeMethod(
        this,
        [this] {
            if (m_open.isEmpty() || m_pushTimer.isActive())
                return;
            const qint64 wait = m_options.pushIntervalMs - m_sincePush.elapsed();
            m_pushTimer.start(int(std::max<qint64>(0, wait)));
        },
        Qt::QueuedConnection);
}

void ControlServer::push()
{
    m_sincePush.restart();
    const QString state = QString::fromUtf8(QJsonDocument(m_state()).toJson(QJsonDocument::Compact));
    if (state == m_pushed)
        return; // nothing changed that the state says
    m_pushed = state;
    for (auto* socket : std::as_const(m_open)) {
        if (socket->bytesToWrite() > MaxUnsent)
            socket->abort(); // a client that stopped reading
        else
            socket->sendTextMessage(state);
    }
}

void ControlServer::accept()
{
    while (QTcpSocket* socket = m_server->nextPendingConnection()) {
        // At most maxConnections waiting for their request: the node's file descriptors are also its
        // sessions', its swarm's and its database's.
        if (m_waiting >= m_options.maxConnections) {
            socket->abort();
            socket->deleteLater();
            continue;
        }
        ++m_waiting;
        connect(socket, &QObject::destroyed, this, [this] { --m_waiting; });
        socket->setReadBufferSize(m_options.limits.maxHead + m_options.limits.maxBody + 1);
        connect(socket, &QTcpSocket::disconnected, socket, [socket] {
            if (!socket->property(Upgraded).toBool())
                socket->deleteLater();
        });
        connect(socket, &QTcpSocket::readyRead, this, [this, socket] { readFrom(socket); });
        if (socket->bytesAvailable() > 0) // a TLS socket comes once its handshake is done, maybe with its request
            QMetaObject::invokeMethod(
                socket, [this, socket] { readFrom(socket); }, Qt::QueuedConnection);
        // A connection that sends no whole request in time is closed.
        QTimer::singleShot(m_options.idleMs, socket, [socket] {
            if (!socket->property(Upgraded).toBool())
                socket->abort();
        });
    }
}

bool ControlServer::allowedAddress(QTcpSocket* socket)
{
    if (socket->property(Counted).toBool())
        return true;
    socket->setProperty(Counted, true);
    const qint64 now = m_clock.elapsed();
    // All of 127.0.0.0/8 and ::1 is one caller: a local process may bind any of them.
    const QString key = socket->peerAddress().isLoopback() ? QStringLiteral("loopback") : socket->peerAddress().toString();
    if (m_buckets.size() > 1024)
        m_buckets.clear(); // only beyond loopback (TLS), and then full buckets are lost, never taken
    auto found = m_buckets.find(key);
    if (found == m_buckets.end())
        found = m_buckets.insert(key, Bucket { m_options.burst, now });
    auto& bucket = *found;
    bucket.tokens = std::min(m_options.burst, bucket.tokens + double(now - bucket.atMs) / 1000.0 * m_options.requestsPerSecond);
    bucket.atMs = now;
    if (bucket.tokens < 1.0)
        return false;
    bucket.tokens -= 1.0;
    return true;
}

void ControlServer::readFrom(QTcpSocket* socket)
{
    if (socket->property(Upgraded).toBool())
        return;
    const QByteArray bytes = socket->peek(socket->bytesAvailable());
    const auto parse = parseHead(bytes, m_options.limits);
    if (parse.outcome == HeadParse::Outcome::Incomplete)
        return;
    if (parse.outcome == HeadParse::Outcome::Refused)
        return refuse(socket, parse.status, parse.why);
    const auto& head = parse.head;
    if (serveFile(socket, head))
        return;
    const bool events = head.path == "/api/v1/events";
    const QByteArray token = events                          ? head.query.queryItemValue(QStringLiteral("token")).toUtf8()
        : head.header("authorization").startsWith("Bearer ") ? head.header("authorization").mid(7).trimmed()
                                                             : QByteArray();
    // The caller first, then the rate: a page or process without the token must not spend the
    // requests of those that hold it (every local caller comes from one address).
    if (const auto [status, why] = checkCaller(head, token); status != 0)
        return refuse(socket, status, why);
    if (!allowedAddress(socket))
        return refuse(socket, 429, QStringLiteral("more than %1 requests a second").arg(m_options.requestsPerSecond));
    if (events)
        return upgrade(socket, head);
    if (bytes.size() < head.length + head.contentLength)
        return; // the body is still coming
    const QByteArray request = socket->read(head.length + head.contentLength);
    handle(socket, head, request.mid(head.length));
}

std::pair<int, QString> ControlServer::checkCaller(const HttpHead& head, const QByteArray& token) const
{
    if (auto refused = checkHost(head); refused.first != 0)
        return refused;
    if (!sameSecret(token, m_options.token))
        return { 401, token.isEmpty() ? QStringLiteral("no token") : QStringLiteral("a wrong token") };
    return { 0, {} };
}

QStringList ControlServer::ownHosts() const
{
    const QString port = QString::number(this->port());
    const auto hostOf = [&](const QHostAddress& address) {
        return address.protocol() == QAbstractSocket::IPv6Protocol
            ? QStringLiteral("[%1]:%2").arg(address.toString().toLower(), port)
            : QStringLiteral("%1:%2").arg(address.toString(), port);
    };
    QStringList hosts { QStringLiteral("127.0.0.1:") + port, QStringLiteral("localhost:") + port,
        QStringLiteral("[::1]:") + port };
    QList<QHostAddress> addresses { m_options.address };
    if (isEveryAddress(m_options.address)) { // reached by any of this machine's addresses, or by its name
        addresses = QNetworkInterface::allAddresses();
        const QString name = QHostInfo::localHostName().toLower();
        if (!name.isEmpty())
            hosts << name + u':' + port << name + QStringLiteral(".local:") + port;
    }
    for (const auto& address : addresses) {
        if (!address.isNull() && address.scopeId().isEmpty() && !hosts.contains(hostOf(address)))
            hosts.append(hostOf(address));
    }
    return hosts;
}

std::pair<int, QString> ControlServer::checkHost(const HttpHead& head) const
{
    const QString host = QString::fromUtf8(head.header("host")).toLower();
    if (!m_hosts.contains(host))
        return { 403, QStringLiteral("the Host %1 is not this API's address").arg(host.left(100)) };
    if (head.has("origin")) {
        const QString origin = QString::fromUtf8(head.header("origin")).toLower();
        const QString scheme = m_options.tls ? QStringLiteral("https://") : QStringLiteral("http://");
        if (!origin.startsWith(scheme) || !m_hosts.contains(origin.mid(scheme.size())))
            return { 403, QStringLiteral("the Origin %1 is not this API's own").arg(origin.left(100)) };
    }
    return { 0, {} };
}

const QStringList& ControlServer::actions()
{
    static const QStringList names { QStringLiteral("pause"), QStringLiteral("resume"), QStringLiteral("snooze"),
        QStringLiteral("finish"), QStringLiteral("device"), QStringLiteral("limits") };
    return names;
}

void ControlServer::handle(QTcpSocket* socket, const HttpHead& head, const QByteArray& body)
{
    const bool action = head.path.startsWith("/api/v1/") && actions().contains(QString::fromUtf8(head.path.mid(8)));
    if (head.path != "/api/v1/state" && !action)
        return refuse(socket, 404, QStringLiteral("no such path"));
    if (head.method != (action ? "POST" : "GET"))
        return refuse(socket, 405,
            QStringLiteral("%1 takes %2")
                .arg(QString::fromUtf8(head.path), action ? QStringLiteral("POST") : QStringLiteral("GET")));
    if (action) {
        QJsonObject arguments;
        if (!body.trimmed().isEmpty()) {
            const auto document = QJsonDocument::fromJson(body);
            if (!document.isObject())
                return refuse(socket, 400, QStringLiteral("the body is not a JSON object"));
            arguments = document.object();
        }
        if (auto done = m_action(QString::fromUtf8(head.path.mid(8)), arguments); !done)
            return refuse(socket, 400, done.error().toString());
        stateChanged();
    }
    answer(socket, 200, m_state());
}

bool ControlServer::serveFile(QTcpSocket* socket, const HttpHead& head)
{
    // The page holds no secret: it asks its user for the token, so it is served without one, to the
    // API's own Host only (a rebinding page must not read it either).
    static const QHash<QByteArray, std::pair<QString, QByteArray>> files {
        { "/", { QStringLiteral("index.html"), "text/html; charset=utf-8" } },
        { "/app.js", { QStringLiteral("app.js"), "text/javascript; charset=utf-8" } },
        { "/style.css", { QStringLiteral("style.css"), "text/css; charset=utf-8" } },
        { "/icon.svg", { QStringLiteral("icon.svg"), "image/svg+xml" } },
    };
    const auto found = files.find(head.path);
    if (found == files.end())
        return false;
    if (const auto [status, why] = checkHost(head); status != 0) {
        refuse(socket, status, why);
        return true;
    }
    if (head.method != "GET") {
        refuse(socket, 405, QStringLiteral("%1 takes GET").arg(QString::fromUtf8(head.path)));
        return true;
    }
    QFile file(QStringLiteral(":/tessera/dashboard/") + found->first);
    const QByteArray content = file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
    // Its scripts and styles are its own files only, it talks to this API only, and no other page
    // may frame it (clickjacking) or learn its address (the token may be in it).
    const QByteArray host = head.header("host");
    send(socket, 200,
        "Content-Type: " + found->second
            + "\r\nContent-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
              "connect-src 'self' "
            + (m_options.tls ? "wss://" : "ws://") + host + "; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
            + "\r\nX-Frame-Options: DENY\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer"
              "\r\nCache-Control: no-cache",
        content);
    return true;
}

void ControlServer::upgrade(QTcpSocket* socket, const HttpHead& head)
{
    if (head.method != "GET" || head.header("upgrade").toLower() != "websocket")
        return refuse(socket, 400, QStringLiteral("/api/v1/events is a WebSocket"));
    if (m_open.size() >= m_options.maxWebSockets)
        return refuse(socket, 503, QStringLiteral("%1 WebSockets are open already").arg(m_options.maxWebSockets));
    socket->setProperty(Upgraded, true);
    disconnect(socket, nullptr, this, nullptr); // the destroyed() that counts it waiting too
    --m_waiting;
    m_webSockets->handleConnection(socket); // reads the handshake we only peeked at
}

void ControlServer::answer(QTcpSocket* socket, int status, const QJsonObject& body)
{
    send(socket, status, "Content-Type: application/json\r\nCache-Control: no-store",
        QJsonDocument(body).toJson(QJsonDocument::Compact));
}

void ControlServer::send(QTcpSocket* socket, int status, const QByteArray& headers, const QByteArray& body)
{
    socket->write("HTTP/1.1 " + QByteArray::number(status) + ' ' + reasonOf(status) + "\r\n" + headers
        + "\r\nConnection: close\r\nContent-Length: " + QByteArray::number(body.size()) + "\r\n\r\n" + body);
    disconnect(socket, &QTcpSocket::readyRead, this, nullptr);
    socket->readAll(); // what came unread (a refused body's start) would make the close a reset
    socket->disconnectFromHost(); // once what was written is sent
}

void ControlServer::refuse(QTcpSocket* socket, int status, const QString& why)
{
    answer(socket, status, QJsonObject { { QStringLiteral("error"), why } });
}

QByteArray fingerprintOf(const QByteArray& certificatePem)
{
    const QSslCertificate certificate(certificatePem, QSsl::Pem);
    return certificate.isNull() ? QByteArray() : certificate.digest(QCryptographicHash::Sha256).toHex();
}

core::Result<ControlServer::Options::Tls> loadOrCreateCertificate(const QString& directory, const QStringList& altNames)
{
    const QDir dir(directory);
    const QString certificatePath = dir.filePath(QStringLiteral("control.crt"));
    const QString keyPath = dir.filePath(QStringLiteral("control.key"));
    if (QFile::exists(certificatePath) || QFile::exists(keyPath)) {
        auto certificate = core::readFile(certificatePath);
        auto key = core::readFile(keyPath);
        if (!certificate || !key)
            return core::Error { keyPath,
                QStringLiteral("the control API's certificate or key is missing or unreadable; delete "
                               "control.crt and control.key and a new pair is made") };
        if (QFileInfo(keyPath).permissions() & (QFileDevice::ReadGroup | QFileDevice::ReadOther))
            return core::Error { keyPath,
                QStringLiteral("other users may read the control API's key: make it private (chmod 600)") };
        const QSslCertificate parsed(*certificate, QSsl::Pem);
        if (parsed.isNull() || QSslKey(*key, QSsl::Ec, QSsl::Pem).isNull() || !core::certificateMatchesKey(*certificate, *key))
            return core::Error { keyPath,
                QStringLiteral("is not the control API's certificate and key; delete control.crt and "
                               "control.key and a new pair is made") };
        if (parsed.expiryDate() > QDateTime::currentDateTimeUtc().addDays(30))
            return ControlServer::Options::Tls { *certificate, *key };
        qWarning("tessera: the control API's certificate expires within 30 days: a new one is made, and clients that "
                 "pinned the old one (ctl url's &fp=) must be given the new address");
    }
    constexpr std::int64_t TenYears = 10LL * 365 * 24 * 3600;
    auto made = core::makeServerCertificate(QStringLiteral("Tessera control API"), altNames, TenYears);
    if (!made)
        return made.error();
    QDir().mkpath(directory);
    if (auto written = core::writePrivateFile(keyPath, made->privateKeyPem, QStringLiteral("the control API's key")); !written)
        return written.error();
    if (auto written
        = core::writePrivateFile(certificatePath, made->certificatePem, QStringLiteral("the control API's certificate"));
        !written)
        return written.error();
    return ControlServer::Options::Tls { made->certificatePem, made->privateKeyPem };
}

core::Result<QByteArray> loadOrCreateToken(const QString& directory)
{
    const QString path = QDir(directory).filePath(QStringLiteral("control.token"));
    constexpr auto Others = QFileDevice::ReadGroup | QFileDevice::WriteGroup | QFileDevice::ReadOther | QFileDevice::WriteOther;
    if (QFile::exists(path)) {
        if (QFileInfo(path).permissions() & Others)
            return core::Error { path,
                QStringLiteral("other users may read the control token: make it private (chmod 600) or delete it and a new "
                               "one is made") };
        auto text = core::readFile(path);
        if (!text)
            return text.error();
        const QByteArray token = text->trimmed();
        if (!isToken(token))
            return core::Error { path,
                QStringLiteral("is not a control token (64 hexadecimal digits); delete it and a new one is made") };
        return token;
    }
    std::array<quint32, 8> words {};
    QRandomGenerator::system()->generate(words.begin(), words.end()); // the system's random source
    const QByteArray token = QByteArray(reinterpret_cast<const char*>(words.data()), qsizetype(sizeof words)).toHex();
    QDir().mkpath(directory);
    // Made private as it is created (never readable by others for a moment), and only if no other
    // node made it meanwhile: then that one's is read.
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::NewOnly, QFileDevice::ReadOwner | QFileDevice::WriteOwner)) {
        if (QFile::exists(path))
            return loadOrCreateToken(directory);
        return core::Error { path, QStringLiteral("cannot write the control token: %1").arg(file.errorString()) };
    }
    if (file.write(token + '\n') != token.size() + 1 || !file.flush())
        return core::Error { path, QStringLiteral("cannot write the control token: %1").arg(file.errorString()) };
    return token;
}

} // namespace tessera::control
