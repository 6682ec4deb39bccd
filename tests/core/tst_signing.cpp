#include <core/signing.h>

#include <QJsonDocument>
#include <QTemporaryDir>
#include <QTest>

using namespace tessera::core;

class SigningTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void signsAndVerifies()
    {
        const auto keys = SigningKeys::generate();
        QCOMPARE(keys.publicKey.size(), 32);
        const auto signature = keys.sign("pay 5 credits");
        QVERIFY(verifySignature("pay 5 credits", signature, keys.publicKey));
        QVERIFY(!verifySignature("pay 6 credits", signature, keys.publicKey));
        QVERIFY(!verifySignature("pay 5 credits", signature, SigningKeys::generate().publicKey));
        QVERIFY(!verifySignature("pay 5 credits", QByteArray("short"), keys.publicKey));
    }

    void keysPersist()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("broker.sign"));
        const auto created = SigningKeys::loadOrCreate(path);
        QVERIFY(created.ok());
        const auto loaded = SigningKeys::loadOrCreate(path);
        QVERIFY(loaded.ok());
        QCOMPARE(loaded->publicKey, created->publicKey);
        QCOMPARE(QFile(path).permissions() & (QFileDevice::ReadOther | QFileDevice::ReadGroup), QFileDevice::Permissions {});
        QFile garbage(dir.filePath(QStringLiteral("bad.sign")));
        QVERIFY(garbage.open(QIODevice::WriteOnly));
        garbage.write("sign-public abc\n");
        garbage.close();
        QVERIFY(!SigningKeys::loadOrCreate(garbage.fileName()).ok());
    }

    void signedDocumentsResistTampering()
    {
        const auto keys = SigningKeys::generate();
        const auto document = signDocument(
            { { QStringLiteral("amount"), QStringLiteral("0.9") }, { QStringLiteral("credit"), QStringLiteral("balance:n") } },
            keys);
        QVERIFY(verifyDocument(document).ok());
        // Through a file and back: the canonical bytes do not depend on formatting.
        QVERIFY(verifyDocument(QJsonDocument::fromJson(QJsonDocument(document).toJson(QJsonDocument::Indented)).object()).ok());
        auto changed = document;
        changed.insert(QStringLiteral("amount"), QStringLiteral("9"));
        QVERIFY(!verifyDocument(changed).ok());
        auto resigned = document;
        resigned.insert(QStringLiteral("signer"), QString::fromLatin1(SigningKeys::generate().publicKey.toBase64()));
        QVERIFY(!verifyDocument(resigned).ok());
        auto unsigned_ = document;
        unsigned_.remove(QStringLiteral("signature"));
        QCOMPARE(verifyDocument(unsigned_).error().field, QStringLiteral("signature"));
    }
};

QTEST_GUILESS_MAIN(SigningTest)
#include "tst_signing.moc"
