// The control API (docs/CONTROL.md) over real TCP: each refusal of "What is refused" with its
// status, the requests with the token, and the pushed state over a WebSocket.

#include <control/controlserver.h>

#include <QFileInfo>
#include <QJsonDocument>
#include <QSignalSpy>
#include <QSslSocket>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QTest>
#include <QWebSocket>

using namespace tessera;
using control::ControlServer;

namespace {

const QByteArray Token = QByteArray(64, 'a');

// One raw HTTP exchange: the answer's status and JSON body (status 0: no answer).
struct Answer {
    int status = 0;
    QJsonObject body;
};
// The whole reply, head and body (empty: none). With a fingerprint, over TLS, trusting exactly the
// certificate of that fingerprint. The server runs on this thread's event loop: the client waits by
// turning it.
QByteArray rawExchange(quint16 port, const QByteArray& request, const QByteArray& fingerprint = {})
{
    QSslSocket socket;
    QByteArray reply;
    QObject::connect(&socket, &QTcpSocket::readyRead, [&] { reply += socket.readAll(); });
    if (fingerprint.isEmpty()) {
        socket.connectToHost(QHostAddress::LocalHost, port);
    } else {
        QObject::connect(&socket, &QSslSocket::sslErrors, [&] {
            if (socket.peerCertificate().digest(QCryptographicHash::Sha256).toHex() == fingerprint)
                socket.ignoreSslErrors();
        });
        socket.connectToHostEncrypted(QStringLiteral("127.0.0.1"), port);
    }
    if (!QTest::qWaitFor(
            [&] { return fingerprint.isEmpty() ? socket.state() == QAbstractSocket::ConnectedState : socket.isEncrypted(); },
            10'000)) {
        qWarning("no connection: %s %d", qPrintable(socket.errorString()), int(socket.isEncrypted()));
        return {};
    }
    socket.write(request);
    if (!QTest::qWaitFor([&] { return socket.state() == QAbstractSocket::UnconnectedState; }, 10'000))
        return {};
    return reply + socket.readAll();
}

Answer exchange(quint16 port, const QByteArray& request)
{
    const QByteArray reply = rawExchange(port, request);
    const qsizetype end = reply.indexOf("\r\n\r\n");
    if (!reply.startsWith("HTTP/1.1 ") || end < 0)
        return {};
    return { reply.mid(9, 3).toInt(), QJsonDocument::fromJson(reply.mid(end + 4)).object() };
}

QByteArray request(quint16 port, const QByteArray& method, const QByteArray& path, const QByteArray& extra = {},
    const QByteArray& body = {}, const QByteArray& token = Token)
{
    QByteArray text = method + ' ' + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + QByteArray::number(port) + "\r\n";
    if (!token.isEmpty())
        text += "Authorization: Bearer " + token + "\r\n";
    text += extra;
    if (!body.isEmpty() || method == "POST")
        text += "Content-Length: " + QByteArray::number(body.size()) + "\r\n";
    return text + "\r\n" + body;
}

// A node's state as the test keeps it, and the actions it was asked for.
struct FakeNode {
    bool paused = false;
    QStringList actions;
    QJsonObject state() const
    {
        return { { QStringLiteral("version"), 1 },
            { QStringLiteral("state"), paused ? QStringLiteral("paused") : QStringLiteral("working") },
            { QStringLiteral("paused"), paused } };
    }
    core::Status act(const QString& action, const QJsonObject&)
    {
        actions.append(action);
        paused = action == u"pause";
        return {};
    }
};

std::unique_ptr<ControlServer> serve(FakeNode& node, ControlServer::Options options = {})
{
    options.port = 0;
    options.token = Token;
    auto server = std::make_unique<ControlServer>(
        options, [&node] { return node.state(); }, [&node](const QString& a, const QJsonObject& b) { return node.act(a, b); });
    if (auto listening = server->listen(); !listening)
        qFatal("%s", qPrintable(listening.error().toString()));
    return server;
}

} // namespace

class ControlServerTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void theStateAndActionsNeedTheToken()
    {
        FakeNode node;
        auto server = serve(node);
        const auto port = server->port();
        auto state = exchange(port, request(port, "GET", "/api/v1/state"));
        QCOMPARE(state.status, 200);
        QCOMPARE(state.body.value(QStringLiteral("state")).toString(), QStringLiteral("working"));
        const auto paused = exchange(port, request(port, "POST", "/api/v1/pause", {}, "{}"));
        QCOMPARE(paused.status, 200);
        QCOMPARE(paused.body.value(QStringLiteral("paused")).toBool(), true);
        QCOMPARE(exchange(port, request(port, "POST", "/api/v1/resume")).status, 200);
        QCOMPARE(node.actions, QStringList({ QStringLiteral("pause"), QStringLiteral("resume") }));

        // No token, a wrong one, one of another length: 401, and nothing done.
        QCOMPARE(exchange(port, request(port, "POST", "/api/v1/pause", {}, {}, {})).status, 401);
        QCOMPARE(exchange(port, request(port, "POST", "/api/v1/pause", {}, {}, QByteArray(64, 'b'))).status, 401);
        QCOMPARE(exchange(port, request(port, "GET", "/api/v1/state", {}, {}, "aaaa")).status, 401);
        QCOMPARE(node.actions.size(), 2);
        // Wrong paths and methods.
        QCOMPARE(exchange(port, request(port, "GET", "/api/v1/nothing")).status, 404);
        QCOMPARE(exchange(port, request(port, "GET", "/api/v1/pause")).status, 405);
        QCOMPARE(exchange(port, request(port, "POST", "/api/v1/state")).status, 405);
        QCOMPARE(exchange(port, request(port, "POST", "/api/v1/pause", {}, "[1]")).status, 400);
        QCOMPARE(node.actions.size(), 2);
    }

    // docs/CONTROL.md, "The dashboard": its files need no token (they hold no secret), come from
    // the API's own Host only, and tell the browser to run nothing else and frame nothing.
    void theDashboardIsServedWithoutTheTokenToItsOwnHostOnly()
    {
        FakeNode node;
        auto server = serve(node);
        const auto port = server->port();
        const QByteArray page = rawExchange(port, request(port, "GET", "/", {}, {}, {}));
        QVERIFY2(page.startsWith("HTTP/1.1 200 OK\r\n"), page.left(200).constData());
        QVERIFY(page.contains("Content-Type: text/html"));
        QVERIFY(page.contains("Content-Security-Policy: default-src 'none'; script-src 'self';"));
        QVERIFY(page.contains("frame-ancestors 'none'"));
        QVERIFY(page.contains("X-Frame-Options: DENY"));
        QVERIFY(page.contains("Referrer-Policy: no-referrer"));
        QVERIFY(page.contains("<script src=\"/app.js\""));
        QVERIFY(!page.contains(Token));
        for (const QByteArray path : { "/app.js", "/style.css", "/icon.svg" }) {
            const QByteArray file = rawExchange(port, request(port, "GET", path, {}, {}, {}));
            QVERIFY2(file.startsWith("HTTP/1.1 200 OK\r\n") && file.size() > 300, path.constData());
        }
        QCOMPARE(exchange(port, request(port, "POST", "/", {}, "{}")).status, 405);
        QByteArray rebound = request(port, "GET", "/", {}, {}, {});
        rebound.replace("Host: 127.0.0.1", "Host: evil.example");
        QCOMPARE(exchange(port, rebound).status, 403);
        // Anything else still needs the token.
        QCOMPARE(exchange(port, request(port, "GET", "/index.html", {}, {}, {})).status, 401);
        QCOMPARE(exchange(port, request(port, "GET", "/api/v1/state", {}, {}, {})).status, 401);
    }

    // A web page in the user's browser (CSRF), or one that rebinds its name to this machine.
    void aForeignOriginOrHostIsRefused()
    {
        FakeNode node;
        auto server = serve(node);
        const auto port = server->port();
        const QByteArray own = "http://127.0.0.1:" + QByteArray::number(port);
        QCOMPARE(exchange(port, request(port, "POST", "/api/v1/pause", "Origin: " + own + "\r\n")).status, 200);
        QCOMPARE(exchange(port, request(port, "POST", "/api/v1/pause", "Origin: http://evil.example\r\n")).status, 403);
        QCOMPARE(exchange(port, request(port, "POST", "/api/v1/pause", "Origin: null\r\n")).status, 403);
        QCOMPARE(exchange(port, request(port, "POST", "/api/v1/pause", "Origin: https://127.0.0.1:1\r\n")).status, 403);
        QByteArray rebound = request(port, "GET", "/api/v1/state");
        rebound.replace("Host: 127.0.0.1", "Host: evil.example");
        QCOMPARE(exchange(port, rebound).status, 403);
        QCOMPARE(node.actions.size(), 1);
    }

    // An oversized body is refused from its Content-Length, before it is sent; an oversized head
    // and malformed requests too.
    void oversizedAndMalformedRequestsAreRefused()
    {
        FakeNode node;
        auto server = serve(node);
        const auto port = server->port();
        QByteArray huge = request(port, "POST", "/api/v1/pause", {}, "{}");
        huge.replace("Content-Length: 2", "Content-Length: 100000000");
        QCOMPARE(exchange(port, huge.left(huge.size() - 2)).status, 413);
        QCOMPARE(
            exchange(port, request(port, "GET", "/api/v1/state", "X-Filler: " + QByteArray(20'000, 'x') + "\r\n")).status, 413);
        QCOMPARE(exchange(port, "GET /api/v1/state HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").status, 400);
        QCOMPARE(exchange(port, request(port, "POST", "/api/v1/pause", "Transfer-Encoding: chunked\r\n")).status, 400);
        QCOMPARE(exchange(port, request(port, "GET", "/api/v1/state", "Bad Header\r\n")).status, 400);
        QCOMPARE(exchange(port, request(port, "GET", "/api/v1/state", "Content-Length: -1\r\n")).status, 400);
        QCOMPARE(exchange(port, "GET /api/v1/state HTTP/1.1\r\n\r\n").status, 400); // no Host
        QCOMPARE(exchange(port, request(port, "GET", "/api/v1/state", "Host: evil.example\r\n")).status, 400); // two
        QCOMPARE(
            exchange(port, request(port, "GET", "//evil.example/api/v1/state")).status, 400); // an authority (fuzz_httprequest)
        QCOMPARE(node.actions.size(), 0);
    }

    // Past the rate, 429; but requests without the token (a web page's, a stranger's) never spend
    // the rate of those that hold it.
    void tooManyRequestsAreRefused()
    {
        FakeNode node;
        ControlServer::Options options;
        options.requestsPerSecond = 0.001; // no refill within the test: the burst alone
        options.burst = 3;
        auto server = serve(node, options);
        const auto port = server->port();
        for (int i = 0; i < 10; ++i)
            QCOMPARE(exchange(port, request(port, "GET", "/api/v1/state", {}, {}, {})).status, 401);
        for (int i = 0; i < 3; ++i)
            QCOMPARE(exchange(port, request(port, "GET", "/api/v1/state")).status, 200);
        QCOMPARE(exchange(port, request(port, "GET", "/api/v1/state")).status, 429);
    }

    // A body that comes after its head, in another packet; and at most maxConnections waiting at
    // once (the node's file descriptors are its sessions' too).
    void aBodyMayComeLaterButConnectionsAreCapped()
    {
        FakeNode node;
        ControlServer::Options options;
        options.maxConnections = 2;
        auto server = serve(node, options);
        const auto port = server->port();
        QTcpSocket slow;
        QByteArray reply;
        QObject::connect(&slow, &QTcpSocket::readyRead, [&] { reply += slow.readAll(); });
        slow.connectToHost(QHostAddress::LocalHost, port);
        QVERIFY(QTest::qWaitFor([&] { return slow.state() == QAbstractSocket::ConnectedState; }, 10'000));
        const QByteArray whole = request(port, "POST", "/api/v1/pause", {}, "{}");
        slow.write(whole.left(whole.size() - 2));
        QTest::qWait(100);
        // Meanwhile a second connection waits, and a third is turned away.
        QTcpSocket idle;
        idle.connectToHost(QHostAddress::LocalHost, port);
        QVERIFY(QTest::qWaitFor([&] { return idle.state() == QAbstractSocket::ConnectedState; }, 10'000));
        QTest::qWait(100);
        QCOMPARE(exchange(port, request(port, "GET", "/api/v1/state")).status, 0);
        QVERIFY(node.actions.isEmpty());
        slow.write("{}");
        QVERIFY(QTest::qWaitFor([&] { return slow.state() == QAbstractSocket::UnconnectedState; }, 10'000));
        QVERIFY2(reply.startsWith("HTTP/1.1 200 "), reply.constData());
        QCOMPARE(node.actions, QStringList({ QStringLiteral("pause") }));
    }

    // The state at once, then each change pushed; a WebSocket without the token or of a foreign
    // origin is refused.
    void aWebSocketGetsTheStateAndEachChange()
    {
        FakeNode node;
        auto server = serve(node);
        const auto port = server->port();
        const QString url = QStringLiteral("ws://127.0.0.1:%1/api/v1/events?token=%2").arg(port).arg(QString::fromLatin1(Token));
        QWebSocket socket;
        QSignalSpy messages(&socket, &QWebSocket::textMessageReceived);
        socket.open(QUrl(url));
        QVERIFY(QTest::qWaitFor([&] { return messages.count() == 1; }, 10'000));
        QCOMPARE(QJsonDocument::fromJson(messages.at(0).at(0).toString().toUtf8()).object().value(QStringLiteral("state")),
            QJsonValue(QStringLiteral("working")));
        QCOMPARE(exchange(port, request(port, "POST", "/api/v1/pause")).status, 200);
        QVERIFY(QTest::qWaitFor([&] { return messages.count() == 2; }, 10'000));
        QCOMPARE(QJsonDocument::fromJson(messages.at(1).at(0).toString().toUtf8()).object().value(QStringLiteral("state")),
            QJsonValue(QStringLiteral("paused")));

        QWebSocket noToken;
        QSignalSpy closed(&noToken, &QWebSocket::disconnected);
        QSignalSpy none(&noToken, &QWebSocket::textMessageReceived);
        noToken.open(QUrl(QStringLiteral("ws://127.0.0.1:%1/api/v1/events").arg(port)));
        QVERIFY(QTest::qWaitFor([&] { return closed.count() == 1; }, 10'000));
        QCOMPARE(none.count(), 0);

        QWebSocket foreign;
        QSignalSpy foreignClosed(&foreign, &QWebSocket::disconnected);
        QSignalSpy foreignMessages(&foreign, &QWebSocket::textMessageReceived);
        QNetworkRequest fromPage { QUrl(url) };
        fromPage.setRawHeader("Origin", "http://evil.example");
        foreign.open(fromPage);
        QVERIFY(QTest::qWaitFor([&] { return foreignClosed.count() == 1; }, 10'000));
        QCOMPARE(foreignMessages.count(), 0);
    }

    void oneWebSocketTooManyIsRefused()
    {
        FakeNode node;
        ControlServer::Options options;
        options.maxWebSockets = 1;
        auto server = serve(node, options);
        const QString url
            = QStringLiteral("ws://127.0.0.1:%1/api/v1/events?token=%2").arg(server->port()).arg(QString::fromLatin1(Token));
        QWebSocket first, second;
        QSignalSpy firstMessages(&first, &QWebSocket::textMessageReceived);
        QSignalSpy secondMessages(&second, &QWebSocket::textMessageReceived);
        QSignalSpy secondClosed(&second, &QWebSocket::disconnected);
        first.open(QUrl(url));
        QVERIFY(QTest::qWaitFor([&] { return firstMessages.count() == 1; }, 10'000));
        second.open(QUrl(url));
        QVERIFY(QTest::qWaitFor([&] { return secondClosed.count() == 1; }, 10'000));
        QCOMPARE(secondMessages.count(), 0);
    }

    void aBindBeyondLoopbackIsRefusedWithoutTls()
    {
        FakeNode node;
        ControlServer::Options options;
        options.address = QHostAddress(QStringLiteral("0.0.0.0"));
        options.token = Token;
        ControlServer server(
            options, [&node] { return node.state(); }, [](const QString&, const QJsonObject&) { return core::Status(); });
        const auto listening = server.listen();
        QVERIFY(!listening);
        QCOMPARE(listening.error().field, QStringLiteral("Control/Bind"));
        QVERIFY2(listening.error().message.contains(QStringLiteral("TLS")), qPrintable(listening.error().message));
        // Nor an address that is none (a mistyped one would listen on every address).
        options.address = QHostAddress();
        ControlServer nowhere(
            options, [&node] { return node.state(); }, [](const QString&, const QJsonObject&) { return core::Status(); });
        QVERIFY(!nowhere.listen());
    }

    // docs/CONTROL.md, "TLS": beyond loopback the API speaks TLS only, with a self-signed
    // certificate that clients pin; its origins are https ones.
    void overTlsOnlyAPinnedClientIsAnswered()
    {
        QTemporaryDir dir;
        auto tls = control::loadOrCreateCertificate(dir.path(), { QStringLiteral("IP:127.0.0.1") });
        QVERIFY2(tls, tls ? "" : qPrintable(tls.error().toString()));
        const QByteArray fingerprint = control::fingerprintOf(tls->certificatePem);
        QCOMPARE(fingerprint.size(), 64);
        QCOMPARE(control::fingerprintOf(control::loadOrCreateCertificate(dir.path(), {})->certificatePem), fingerprint); // kept
        QCOMPARE(QFileInfo(dir.filePath(QStringLiteral("control.key"))).permissions()
                & (QFileDevice::ReadGroup | QFileDevice::ReadOther),
            QFileDevice::Permissions());
        FakeNode node;
        ControlServer::Options options;
        options.tls = *tls;
        auto server = serve(node, options);
        const auto port = server->port();
        const QByteArray state = rawExchange(port, request(port, "GET", "/api/v1/state"), fingerprint);
        QVERIFY2(state.startsWith("HTTP/1.1 200 OK\r\n"), state.left(100).constData());
        QVERIFY(rawExchange(port, request(port, "GET", "/", {}, {}, {}), fingerprint)
                    .contains("connect-src 'self' wss://127.0.0.1:"));
        // Another certificate (a program in its place), or plain HTTP: nothing is said.
        QVERIFY(rawExchange(port, request(port, "GET", "/api/v1/state"), QByteArray(64, '0')).isEmpty());
        QVERIFY(!rawExchange(port, request(port, "GET", "/api/v1/state")).startsWith("HTTP/1.1 200"));
        // An http origin is not this API's: it is https now.
        const QByteArray own = "127.0.0.1:" + QByteArray::number(port);
        QVERIFY(rawExchange(port, request(port, "POST", "/api/v1/pause", "Origin: http://" + own + "\r\n"), fingerprint)
                    .startsWith("HTTP/1.1 403"));
        QVERIFY(rawExchange(port, request(port, "POST", "/api/v1/pause", "Origin: https://" + own + "\r\n"), fingerprint)
                    .startsWith("HTTP/1.1 200"));
        // The pushed state over wss.
        QWebSocket socket;
        QObject::connect(&socket, &QWebSocket::sslErrors, [&] {
            if (socket.sslConfiguration().peerCertificate().digest(QCryptographicHash::Sha256).toHex() == fingerprint)
                socket.ignoreSslErrors();
        });
        QSignalSpy messages(&socket, &QWebSocket::textMessageReceived);
        socket.open(QUrl(QStringLiteral("wss://127.0.0.1:%1/api/v1/events?token=%2").arg(port).arg(QString::fromLatin1(Token))));
        QVERIFY(QTest::qWaitFor([&] { return messages.count() == 1; }, 10'000));
        socket.close();
        // Connections count from their TCP accept, handshake or not: a fourth silent one is closed
        // at once, while the first three wait for the handshake's limit (5 s).
        options.maxConnections = 2;
        options.maxWebSockets = 1; // 3 connections at once in all
        auto capped = serve(node, options);
        const auto cappedPort = capped->port();
        QTcpSocket silent[4];
        for (auto& one : silent) {
            one.connectToHost(QHostAddress::LocalHost, cappedPort);
            QVERIFY(QTest::qWaitFor([&] { return one.state() == QAbstractSocket::ConnectedState; }, 10'000));
        }
        QVERIFY(QTest::qWaitFor([&] { return silent[3].state() == QAbstractSocket::UnconnectedState; }, 10'000));
        QCOMPARE(silent[0].state(), QAbstractSocket::ConnectedState);
        QVERIFY(QTest::qWaitFor([&] { return silent[0].state() == QAbstractSocket::UnconnectedState; }, 20'000));
        QVERIFY(rawExchange(cappedPort, request(cappedPort, "GET", "/api/v1/state"), fingerprint).startsWith("HTTP/1.1 200"));
    }

    void theTokenIsMadeOnceAndPrivate()
    {
        QTemporaryDir dir;
        const auto made = control::loadOrCreateToken(dir.path());
        QVERIFY(made);
        QCOMPARE(made->size(), 64);
        QCOMPARE(control::loadOrCreateToken(dir.path()).value(), *made);
        const QFileInfo file(dir.filePath(QStringLiteral("control.token")));
        QCOMPARE(file.permissions() & (QFileDevice::ReadGroup | QFileDevice::ReadOther), QFileDevice::Permissions());
        QVERIFY(QFile::setPermissions(file.filePath(), file.permissions() | QFileDevice::ReadOther));
        const auto shared = control::loadOrCreateToken(dir.path());
        QVERIFY(!shared);
        QVERIFY2(shared.error().message.contains(QStringLiteral("chmod 600")), qPrintable(shared.error().message));
        QVERIFY(QFile::setPermissions(file.filePath(), QFileDevice::ReadOwner | QFileDevice::WriteOwner));
        QFile damaged(file.filePath());
        QVERIFY(damaged.open(QIODevice::WriteOnly));
        damaged.write("not a token\n");
        damaged.close();
        QVERIFY(!control::loadOrCreateToken(dir.path()));
    }
};

QTEST_GUILESS_MAIN(ControlServerTest)
#include "tst_controlserver.moc"
