#include <core/hash.h>
#include <core/readfile.h>

#include <QTemporaryDir>
#include <QTest>

using tessera::core::Digest;
using tessera::core::Sha256;

class HashTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void matchesKnownVectors()
    {
        // FIPS 180-2 test vectors.
        QCOMPARE(
            Digest::ofBytes("abc").toHex(), QStringLiteral("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
        QCOMPARE(Digest::ofBytes("").toHex(), QStringLiteral("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    }

    void incrementalEqualsOneShot()
    {
        QByteArray data(100'000, '\0');
        for (int i = 0; i < data.size(); ++i)
            data[i] = char(i * 31 + 7);
        Sha256 hasher;
        for (qsizetype offset = 0; offset < data.size(); offset += 4096)
            hasher.addData(QByteArrayView(data).sliced(offset, std::min<qsizetype>(4096, data.size() - offset)));
        QCOMPARE(hasher.result(), Digest::ofBytes(data));
    }

    // A file's digest, read in pieces, is its bytes' (across the 4 MiB piece boundary); a missing
    // file is an error that names it.
    void aFilesDigestIsItsBytesDigest()
    {
        QTemporaryDir dir;
        QByteArray bytes((4 << 20) + 3, Qt::Uninitialized);
        for (qsizetype i = 0; i < bytes.size(); ++i)
            bytes[i] = char(i * 31);
        const QString path = dir.filePath(QStringLiteral("f"));
        QFile file(path);
        QVERIFY(file.open(QIODevice::WriteOnly) && file.write(bytes) == bytes.size());
        file.close();
        QCOMPARE(*tessera::core::Digest::ofFile(path), tessera::core::Digest::ofBytes(bytes));
        const auto missing = tessera::core::Digest::ofFile(dir.filePath(QStringLiteral("none")));
        QVERIFY(!missing.ok());
        QVERIFY(missing.error().message.contains(QStringLiteral("none")));

        // core::readFile reads the same bytes into a buffer of the file's size; an empty file is
        // empty; a file whose size is not known ahead (/proc) is read whole all the same.
        const auto read = tessera::core::readFile(path);
        QCOMPARE(read->size(), bytes.size());
        QVERIFY(read->capacity() <= bytes.size() + 64); // no doubling as it grew
        QCOMPARE(*read, bytes);
        QFile empty(dir.filePath(QStringLiteral("empty")));
        QVERIFY(empty.open(QIODevice::WriteOnly));
        empty.close();
        QVERIFY(tessera::core::readFile(empty.fileName())->isEmpty());
        QVERIFY(tessera::core::readFile(QStringLiteral("/proc/self/status"))->contains("VmRSS"));
        QVERIFY(tessera::core::readFile(dir.filePath(QStringLiteral("none"))).error().message.contains(QStringLiteral("none")));
    }

    void hexRoundTripAndErrors()
    {
        const auto digest = Digest::ofBytes("tessera");
        QCOMPARE(*Digest::fromHex(digest.toHex()), digest);
        QCOMPARE(*Digest::fromHex(digest.toHex().toUpper()), digest);
        QVERIFY(!Digest::fromHex(u"abc").ok());
        QVERIFY(Digest::fromHex(QString(64, u'g')).error().message.contains(QStringLiteral("hex digit")));
        QVERIFY(!Digest::fromRaw(QByteArray(31, 'x')).ok());
        QVERIFY(Digest().isNull());
        QVERIFY(!digest.isNull());
    }
};

QTEST_GUILESS_MAIN(HashTest)
#include "tst_hash.moc"
