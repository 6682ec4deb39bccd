// control::RemoteNode and control::parsePairing (docs/APP.md, "Machines"; docs/CONTROL.md, "TLS"):
// another node's pushed state and actions over TLS to its pinned certificate, nothing at all to
// another certificate, and which pairing addresses are taken.

#include <control/controlserver.h>
#include <control/remotenode.h>

#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

using namespace tessera;
using control::ControlServer;

namespace {

const QByteArray Token = QByteArray(64, 'c');

} // namespace

class RemoteNodeTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void aPinnedNodeIsWatchedAndDriven()
    {
        QTemporaryDir dir;
        auto tls = control::loadOrCreateCertificate(dir.path(), { QStringLiteral("IP:127.0.0.1") });
        QVERIFY(tls);
        bool paused = false;
        QStringList asked;
        ControlServer::Options options;
        options.port = 0;
        options.token = Token;
        options.tls = *tls;
        options.pushIntervalMs = 10;
        auto server = std::make_unique<ControlServer>(
            options,
            [&] {
                return QJsonObject { { QStringLiteral("name"), QStringLiteral("garage") },
                    { QStringLiteral("state"), paused ? QStringLiteral("paused") : QStringLiteral("working") } };
            },
            [&](const QString& action, const QJsonObject&) {
                asked << action;
                paused = action == u"pause";
                return core::Status();
            });
        QVERIFY(server->listen());
        const QByteArray fingerprint = control::fingerprintOf(tls->certificatePem);

        control::RemoteNode node({ QStringLiteral("127.0.0.1"), server->port(), Token, fingerprint });
        QVERIFY(QTest::qWaitFor(
            [&] { return node.connected() && node.state().value(QStringLiteral("name")).toString() == u"garage"; }, 10'000));
        node.act(QStringLiteral("pause"));
        QVERIFY(QTest::qWaitFor([&] { return node.state().value(QStringLiteral("state")).toString() == u"paused"; }, 10'000));
        QCOMPARE(asked, QStringList { QStringLiteral("pause") });
        QVERIFY(node.problem().isEmpty());

        // Another pin: the handshake stops at the certificate; no request, no token, no action.
        control::RemoteNode impostor({ QStringLiteral("127.0.0.1"), server->port(), Token, QByteArray(64, 'e') });
        impostor.act(QStringLiteral("resume"));
        QVERIFY(QTest::qWaitFor([&] { return impostor.problem().contains(QStringLiteral("certificate")); }, 10'000));
        QTest::qWait(300);
        QVERIFY(!impostor.connected());
        QVERIFY(impostor.state().isEmpty());
        QCOMPARE(asked, QStringList { QStringLiteral("pause") });

        // A node that goes away is said to be unreachable.
        server.reset();
        QVERIFY(QTest::qWaitFor([&] { return !node.connected(); }, 10'000));
    }

    void pairingAddressesAreChecked_data()
    {
        QTest::addColumn<QString>("text");
        QTest::addColumn<bool>("taken");
        const QString token = QString::fromLatin1(Token);
        const QString pin = QString(64, u'A');
        QTest::newRow("https with its pin") << QStringLiteral("https://garage:7780/#token=%1&fp=%2").arg(token, pin) << true;
        QTest::newRow("loopback, plain") << QStringLiteral("http://127.0.0.1:7780/#token=%1").arg(token) << true;
        QTest::newRow("IPv6 loopback") << QStringLiteral("http://[::1]:7780/#token=%1").arg(token) << true;
        QTest::newRow("https without a pin") << QStringLiteral("https://garage:7780/#token=%1").arg(token) << false;
        QTest::newRow("plain beyond loopback") << QStringLiteral("http://192.0.2.7:7780/#token=%1").arg(token) << false;
        QTest::newRow("no token") << QStringLiteral("https://garage:7780/#fp=%1").arg(pin) << false;
        QTest::newRow("short token") << QStringLiteral("http://127.0.0.1:7780/#token=abc") << false;
        QTest::newRow("no port") << QStringLiteral("http://127.0.0.1/#token=%1").arg(token) << false;
        QTest::newRow("another scheme") << QStringLiteral("ftp://127.0.0.1:21/#token=%1").arg(token) << false;
        QTest::newRow("not an address") << QStringLiteral("garage") << false;
        QTest::newRow("a short pin") << QStringLiteral("https://garage:7780/#token=%1&fp=abc").arg(token) << false;
    }

    void pairingAddressesAreChecked()
    {
        QFETCH(QString, text);
        QFETCH(bool, taken);
        const auto endpoint = control::parsePairing(text);
        QCOMPARE(endpoint.ok(), taken);
        if (taken)
            QVERIFY(endpoint->fingerprint.isEmpty() || endpoint->fingerprint == QByteArray(64, 'a')); // lowercase
    }
};

QTEST_GUILESS_MAIN(RemoteNodeTest)
#include "tst_remotenode.moc"
