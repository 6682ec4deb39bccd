#include <core/blobstore.h>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

using namespace tessera::core;

namespace {

QByteArray bytesOf(char c, int size)
{
    return QByteArray(size, c);
}

} // namespace

class BlobStoreTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void storesByHashAndReadsRanges()
    {
        QTemporaryDir dir;
        auto store = *BlobStore::open(dir.path());
        const QByteArray data("0123456789");
        const auto digest = *store->put(data);
        QCOMPARE(digest, Digest::ofBytes(data));
        QVERIFY(store->contains(digest));
        QCOMPARE(*store->sizeOf(digest), 10);
        QCOMPARE(*store->readRange(digest, 3, 4), QByteArray("3456"));
        QCOMPARE(*store->readRange(digest, 8, 100), QByteArray("89"));
        QVERIFY(!store->readRange(digest, 11, 1).ok());
        QCOMPARE(*store->read(digest), data);
        QVERIFY(QFile::exists(*store->path(digest)));
        QVERIFY(!store->read(Digest::ofBytes("other")).ok());
    }

    void chunkedUploadIsCheckedBeforeItIsKept()
    {
        QTemporaryDir dir;
        auto store = *BlobStore::open(dir.path());
        const QByteArray data = bytesOf('a', 2500);
        const auto digest = Digest::ofBytes(data);
        QCOMPARE(*store->putRange(digest, 0, 2500, data.mid(0, 1000)), BlobStore::UploadState::Incomplete);
        QVERIFY(!store->putRange(digest, 2000, 2500, data.mid(2000)).ok()); // out of order
        QCOMPARE(store->uploadedBytes(digest), 1000);
        QCOMPARE(*store->putRange(digest, 1000, 2500, data.mid(1000, 1000)), BlobStore::UploadState::Incomplete);
        QVERIFY(!store->contains(digest));
        QCOMPARE(*store->putRange(digest, 2000, 2500, data.mid(2000)), BlobStore::UploadState::Complete);
        QCOMPARE(*store->read(digest), data);

        // Bytes that do not hash to the claimed name are dropped, and nothing remains of them.
        const auto claimed = Digest::ofBytes("something else");
        const auto lie = store->putRange(claimed, 0, 3, QByteArray("abc"));
        QVERIFY(!lie.ok());
        QCOMPARE(lie.error().field, QStringLiteral("sha256"));
        QVERIFY(!store->contains(claimed));
        QDir blobs(dir.path());
        QCOMPARE(blobs.entryList({ QStringLiteral("*.part") }, QDir::Files).size(), 0);
        QVERIFY(!store->putRange(claimed, 0, BlobStore::MaxBlobBytes + 1, QByteArray("x")).ok());

        // Of a blob the store has, a prover sends every byte: one byte under its hash completes
        // nothing, a wrong size or wrong bytes are refused, and nothing is written either way.
        using Stored = BlobStore::Stored;
        QCOMPARE(*store->putRange(digest, 0, 2500, QByteArray("a"), QStringLiteral("s"), 0, Stored::MustProve),
            BlobStore::UploadState::Incomplete);
        QCOMPARE(store->putRange(digest, 0, 1, QByteArray("a"), QStringLiteral("t"), 0, Stored::MustProve).error().field,
            QStringLiteral("sha256"));
        QCOMPARE(*store->putRange(digest, 0, 2500, data.mid(0, 2000), QStringLiteral("u"), 0, Stored::MustProve),
            BlobStore::UploadState::Incomplete);
        QCOMPARE(store->putRange(digest, 2000, 2500, bytesOf('b', 500), QStringLiteral("u"), 0, Stored::MustProve).error().field,
            QStringLiteral("sha256"));
        QCOMPARE(
            *store->putRange(digest, 0, 2500, data, QStringLiteral("v"), 0, Stored::MustProve), BlobStore::UploadState::Complete);
        QCOMPARE(blobs.entryList({ QStringLiteral("*.part") }, QDir::Files | QDir::NoDotAndDotDot).size(), 0);
        QCOMPARE(*store->read(digest), data);
        QCOMPARE(*store->putRange(digest, 0, 2500, QByteArray("a")), BlobStore::UploadState::Complete); // a cache's own
    }

    void evictsLeastRecentlyUsedFirstButNeverPinned()
    {
        QTemporaryDir dir;
        auto store = *BlobStore::open(dir.path(), 3000);
        const auto a = *store->put(bytesOf('a', 1000));
        const auto b = *store->put(bytesOf('b', 1000));
        const auto c = *store->put(bytesOf('c', 1000));
        QVERIFY(store->path(a)); // a is used again: b is now the oldest
        store->pin(b);
        const auto d = *store->put(bytesOf('d', 1000)); // over the limit: c goes (b is pinned)
        QVERIFY(store->contains(a));
        QVERIFY(store->contains(b));
        QVERIFY(!store->contains(c));
        QVERIFY(store->contains(d));
        QCOMPARE(store->totalSize(), 3000);
        store->unpin(b);
        (void)store->path(a);
        (void)store->path(d);
        (void)*store->put(bytesOf('e', 1000)); // now b is the oldest unpinned
        QVERIFY(!store->contains(b));
    }

    // A file written in the staging folder (by another thread) is taken in by renaming it, under
    // the digest its writer computed; one already stored is just dropped; a file a crash left in
    // the staging folder is removed when the store opens.
    void takesInAStagedFileWithoutCopyingIt()
    {
        QTemporaryDir dir;
        auto store = *BlobStore::open(dir.path());
        QVERIFY(QDir().mkpath(store->stagingDirectory()));
        auto stage = [&](const QByteArray& bytes, const QString& name) {
            QFile file(store->stagingDirectory() + u'/' + name);
            if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size())
                qFatal("cannot stage %s", qPrintable(name));
            return file.fileName();
        };
        const QByteArray state = bytesOf('s', 5000);
        const QString staged = stage(state, QStringLiteral("kept-1.part"));
        const auto digest = store->adopt(staged, Digest::ofBytes(state));
        QVERIFY(digest.ok());
        QCOMPARE(*digest, Digest::ofBytes(state));
        QVERIFY(!QFile::exists(staged));
        QCOMPARE(*store->read(*digest), state);
        QCOMPARE(store->totalSize(), 5000);
        const QString again = stage(state, QStringLiteral("kept-2.part"));
        QVERIFY(store->adopt(again, Digest::ofBytes(state)).ok());
        QVERIFY(!QFile::exists(again));
        QCOMPARE(store->totalSize(), 5000);
        QVERIFY(!store->adopt(store->stagingDirectory() + QStringLiteral("/none.part"), Digest::ofBytes("x")).ok());

        const QString left = stage(QByteArray("crash"), QStringLiteral("kept-3.part"));
        // A file named like a blob in a folder under staging (a node's swarm keeps a second name
        // there of each blob it serves) is not a blob of the store: not counted twice, not found.
        QVERIFY(QDir().mkpath(store->stagingDirectory() + QStringLiteral("/swarm-n")));
        const QByteArray other = bytesOf('o', 700);
        stage(state, QStringLiteral("swarm-n/") + digest->toHex());
        stage(other, QStringLiteral("swarm-n/") + Digest::ofBytes(other).toHex());
        store.reset();
        store = *BlobStore::open(dir.path());
        QVERIFY(!QFile::exists(left));
        QVERIFY(store->contains(*digest));
        QVERIFY(!store->contains(Digest::ofBytes(other)));
        QCOMPARE(store->totalSize(), 5000);
    }

    void indexSurvivesARestart()
    {
        QTemporaryDir dir;
        Digest digest;
        {
            auto store = *BlobStore::open(dir.path());
            digest = *store->put(QByteArray("kept"));
            (void)store->putRange(Digest::ofBytes("half"), 0, 100, QByteArray("ha")); // interrupted upload
        }
        auto store = *BlobStore::open(dir.path());
        QVERIFY(store->contains(digest));
        QCOMPARE(store->totalSize(), 4);
        QCOMPARE(store->uploadedBytes(Digest::ofBytes("half")), 0);
    }
};

QTEST_GUILESS_MAIN(BlobStoreTest)
#include "tst_blobstore.moc"
