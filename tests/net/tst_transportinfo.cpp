#include <net/transportinfo.h>

#include <QRegularExpression>
#include <QTest>

class TransportInfoTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void reportsTheLinkedLibzmq()
    {
        const auto info = tessera::net::transportInfo();
        QVERIFY2(QRegularExpression(QStringLiteral("^4\\.\\d+\\.\\d+$")).match(info.libzmqVersion).hasMatch(),
            qPrintable(info.libzmqVersion));
        // Tessera requires CURVE: Debian's libzmq is built with libsodium.
        QVERIFY(info.curve);
    }
};

QTEST_GUILESS_MAIN(TransportInfoTest)
#include "tst_transportinfo.moc"
