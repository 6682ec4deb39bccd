#include <core/benchmark.h>

#include <QTemporaryDir>
#include <QTest>
#include <QTimeZone>

using namespace tessera::core;

class BenchmarkStoreTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void spread()
    {
        const auto s = spreadOf({ 10.0, 12.0, 8.0, 10.0 });
        QCOMPARE(s.mean, 10.0);
        QVERIFY(qAbs(s.cv - 0.16329931618554522) < 1e-12); // sample standard deviation 1.633 / 10
        QCOMPARE(spreadOf({ 5.0 }).cv, 0.0);
        QCOMPARE(spreadOf({}).mean, 0.0);
    }

    void savesAndReadsTheLatest()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("node.sqlite"));
        auto store = BenchmarkStore::open(path);
        QVERIFY2(store.ok(), qPrintable(store.ok() ? QString() : store.error().toString()));
        QVERIFY(!(*store)->latest(QStringLiteral("cpu:0"))->has_value());

        BenchmarkRecord older { QStringLiteral("cpu:0"), QStringLiteral("p1"),
            QDateTime(QDate(2026, 1, 2), QTime(3, 4, 5), QTimeZone::utc()),
            { { QStringLiteral("mlp"), 5000.5, QStringLiteral("samples/s"), 0.02, 7 } } };
        BenchmarkRecord newer = older;
        newer.measuredAt = older.measuredAt.addDays(1);
        newer.runtimeProfile = QStringLiteral("p2");
        newer.measurements.append({ QStringLiteral("matmul"), 80.25, QStringLiteral("GFLOPS"), 0.01, 5 });
        QVERIFY((*store)->save(older).ok());
        QVERIFY((*store)->save(newer).ok());
        store->reset();

        auto reopened = BenchmarkStore::open(path); // survives a restart
        QVERIFY(reopened.ok());
        const auto latest = (*reopened)->latest(QStringLiteral("cpu:0"));
        QVERIFY(latest.ok() && latest->has_value());
        QCOMPARE(**latest, newer);
        QCOMPARE((*latest)->measurement(u"matmul")->value, 80.25);
        QVERIFY(!(*latest)->measurement(u"cnn").has_value());
    }
};

QTEST_GUILESS_MAIN(BenchmarkStoreTest)
#include "tst_benchmarkstore.moc"
