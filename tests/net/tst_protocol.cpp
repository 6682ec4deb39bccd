// The codec against golden bytes: what docs/PROTOCOL.md promises, frame by frame.

#include <net/protocol.h>

#include <QJsonArray>
#include <QTest>

using namespace tessera::net;

class ProtocolTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void encodesGoldenBytes()
    {
        const Message ready { Command::Ready, QJsonObject { { QStringLiteral("id"), 7 }, { QStringLiteral("slots"), 1 } }, {} };
        const QList<QByteArray> frames = encode(ready);
        QCOMPARE(frames.size(), 3);
        QCOMPARE(frames[0], QByteArray("TESSERA/1"));
        QCOMPARE(frames[1], QByteArray("\x04", 1));
        QCOMPARE(frames[2], QByteArray(R"({"id":7,"slots":1})"));

        const Message chunk { Command::Chunk, QJsonObject { { QStringLiteral("offset"), 0 } }, QByteArray("\x00\xff", 2) };
        const auto chunkFrames = encode(chunk);
        QCOMPARE(chunkFrames.size(), 4);
        QCOMPARE(chunkFrames[1], QByteArray("\x11", 1));
        QCOMPARE(chunkFrames[3], QByteArray("\x00\xff", 2));
    }

    void decodesWhatItEncodes()
    {
        const Message put { Command::Put,
            QJsonObject { { QStringLiteral("sha256"), QStringLiteral("ab") }, { QStringLiteral("size"), 3 } },
            QByteArray("xyz") };
        const auto decoded = decode(encode(put));
        QVERIFY(decoded.ok());
        QCOMPARE(*decoded, put);
        const auto fromPython = decode({ QByteArray("TESSERA/1"), QByteArray("\x22", 1), QByteArray(R"({"id": 1})") });
        QVERIFY(fromPython.ok());
        QCOMPARE(fromPython->command, Command::List);
        QCOMPARE(fromPython->header.value(QStringLiteral("id")).toInt(), 1);
    }

    void refusesBadFrames_data()
    {
        QTest::addColumn<QList<QByteArray>>("frames");
        QTest::addColumn<QString>("code");
        const QByteArray id("TESSERA/1");
        QTest::newRow("empty") << QList<QByteArray> {} << errors::BadMessage;
        QTest::newRow("two frames") << QList<QByteArray> { id, QByteArray("\x03", 1) } << errors::BadMessage;
        QTest::newRow("other protocol") << QList<QByteArray> { QByteArray("HTTP/1.1"), QByteArray("\x03", 1), QByteArray("{}") }
                                        << errors::BadMessage;
        QTest::newRow("other version") << QList<QByteArray> { QByteArray("TESSERA/2"), QByteArray("\x03", 1), QByteArray("{}") }
                                       << errors::BadVersion;
        QTest::newRow("long command") << QList<QByteArray> { id, QByteArray("\x03\x03", 2), QByteArray("{}") }
                                      << errors::BadMessage;
        QTest::newRow("unknown command") << QList<QByteArray> { id, QByteArray("\x7f", 1), QByteArray("{}") }
                                         << errors::UnknownCommand;
        QTest::newRow("header not json") << QList<QByteArray> { id, QByteArray("\x03", 1), QByteArray("{oops") }
                                         << errors::BadMessage;
        QTest::newRow("header an array") << QList<QByteArray> { id, QByteArray("\x03", 1), QByteArray("[1]") }
                                         << errors::BadMessage;
        QTest::newRow("header too large") << QList<QByteArray> { id, QByteArray("\x03", 1), QByteArray(MaxHeaderBytes + 1, ' ') }
                                          << errors::TooLarge;
        QTest::newRow("put without payload")
            << QList<QByteArray> { id, QByteArray("\x12", 1), QByteArray("{}") } << errors::BadMessage;
        QTest::newRow("payload on ready") << QList<QByteArray> { id, QByteArray("\x04", 1), QByteArray("{}"), QByteArray("x") }
                                          << errors::BadMessage;
        QTest::newRow("chunk too large") << QList<QByteArray> { id, QByteArray("\x12", 1), QByteArray("{}"),
            QByteArray(MaxChunkBytes + 1, 'x') }
                                         << errors::TooLarge;
        QTest::newRow("message too large") << QList<QByteArray> { id, QByteArray("\x12", 1), QByteArray("{}"),
            QByteArray(MaxMessageBytes, 'x') }
                                           << errors::TooLarge;
    }
    void refusesBadFrames()
    {
        QFETCH(QList<QByteArray>, frames);
        QFETCH(QString, code);
        const auto decoded = decode(frames);
        QVERIFY(!decoded.ok());
        QCOMPARE(decoded.error().code, code);
        QVERIFY(!decoded.error().message.isEmpty());
    }

    void errorRepliesCarryTheRequestId()
    {
        const auto error = errorMessage(errors::Invalid, QStringLiteral("job.name: is required"), 0x20, 5);
        QCOMPARE(encode(error)[2], QByteArray(R"({"code":"invalid","id":5,"message":"job.name: is required","re":32})"));
    }
};

QTEST_GUILESS_MAIN(ProtocolTest)
#include "tst_protocol.moc"
