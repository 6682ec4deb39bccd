// The desktop app's energy meter: RAPL's count over the shard, the estimate where it cannot be
// read, today's total across a day's end, and the Overview's line with a price.
#include <app/desktop/energymeter.h>

#include <QTest>

using tessera::app::EnergyMeter;

class TestEnergyMeter : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void measuredShardScalesPowerToComputingTime()
    {
        EnergyMeter meter;
        const QDate day(2026, 12, 4);
        meter.shardBegan(1000, 500.0);
        QVERIFY(meter.shardRunning());
        // 2 s watched, 40 J counted: 20 W, drawn for the 3 s the shard computed.
        const auto shard = meter.shardEnded(3000, 540.0, 3.0, 4, day);
        QVERIFY(shard);
        QVERIFY(shard->measured);
        QCOMPARE(shard->joules, 60.0);
        QCOMPARE(shard->seconds, 3.0);
        QVERIFY(shard->describe().contains(QStringLiteral("(RAPL)")));
        QVERIFY(!meter.shardRunning());
        QCOMPARE(meter.todayJoules(day), 60.0);
        QVERIFY(meter.measured());
    }

    void estimatedWithoutRaplOrOnATooShortWindow()
    {
        EnergyMeter meter;
        const QDate day(2026, 12, 4);
        meter.shardBegan(0, std::nullopt);
        auto shard = meter.shardEnded(5000, std::nullopt, 2.0, 3, day);
        QVERIFY(shard && !shard->measured);
        QCOMPARE(shard->joules, EnergyMeter::EstimatedWattsPerThread * 3 * 2.0);
        QVERIFY(shard->describe().contains(QStringLiteral("(estimated)")));
        // RAPL readable, but watched 0.2 s: not a power.
        meter.shardBegan(0, 100.0);
        shard = meter.shardEnded(200, 101.0, 1.0, 1, day);
        QVERIFY(shard && !shard->measured);
        QCOMPARE(shard->joules, EnergyMeter::EstimatedWattsPerThread * 1.0);
        // A counter that went back (wrapped, reset) says nothing of the shard.
        meter.shardBegan(0, 900.0);
        shard = meter.shardEnded(4000, 10.0, 1.0, 2, day);
        QVERIFY(shard && !shard->measured);
        QVERIFY(shard->joules > 0.0);
        QVERIFY(!meter.measured());
    }

    void noShardNoEnergy()
    {
        EnergyMeter meter;
        QVERIFY(!meter.shardEnded(1000, 10.0, 1.0, 1, QDate(2026, 12, 4)));
        QCOMPARE(meter.todayJoules(QDate(2026, 12, 4)), 0.0);
    }

    void aNewDayStartsFromZero()
    {
        EnergyMeter meter;
        const QDate monday(2026, 11, 30);
        const QDate tuesday = monday.addDays(1);
        meter.shardBegan(0, std::nullopt);
        meter.shardEnded(1000, std::nullopt, 1.0, 1, monday);
        meter.shardBegan(1000, std::nullopt);
        meter.shardEnded(2000, std::nullopt, 1.0, 1, monday);
        QCOMPARE(meter.todayJoules(monday), 20.0);
        // Seen on Tuesday before any shard of Tuesday ended: nothing yet.
        QCOMPARE(meter.todayJoules(tuesday), 0.0);
        meter.shardBegan(2000, std::nullopt);
        meter.shardEnded(3000, std::nullopt, 1.0, 1, tuesday);
        QCOMPARE(meter.todayJoules(tuesday), 10.0);
    }

    void overviewLineWithAndWithoutAPrice()
    {
        EnergyMeter meter;
        const QDate day(2026, 12, 4);
        meter.shardBegan(0, 0.0);
        meter.shardEnded(3'600'000, 36'000.0, 3600.0, 1, day); // 10 W for an hour: 10 Wh
        const QString plain = meter.overviewLine(day, 0.0, 5.0);
        QCOMPARE(plain, QStringLiteral("10.0 Wh of CPU energy for training today (measured by RAPL)"));
        const QString priced = meter.overviewLine(day, 2.0, 5.0);
        QVERIFY2(priced.endsWith(QStringLiteral("; at 2 credits a kWh that is 0.0200 credits, so 4.98 credits net")),
            qPrintable(priced));
    }
};

QTEST_GUILESS_MAIN(TestEnergyMeter)
#include "tst_energymeter.moc"
