#include <core/verification/verification.h>

#include <QTest>

#include <cmath>

using namespace tessera::core;
using namespace tessera::core::verification;

class VerificationTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void samplingFallsWithTheStreakToItsFloor()
    {
        SamplingPolicy policy;
        NodeRecord record;
        QCOMPARE(samplingProbability(record, policy), 1.0);
        record.streak = 24;
        QCOMPARE(samplingProbability(record, policy), 1.0);
        record.streak = 50;
        QCOMPARE(samplingProbability(record, policy), 0.5);
        record.streak = 100000;
        QCOMPARE(samplingProbability(record, policy), 0.05);
        record.streak = 0; // after a failure
        QCOMPARE(samplingProbability(record, policy), 1.0);
    }

    void drawsAreReproducibleAndFair()
    {
        QVERIFY(drawSample(1.0, 7));
        QVERIFY(!drawSample(0.0, 7));
        QCOMPARE(drawSample(0.3, 12345), drawSample(0.3, 12345));
        int hits = 0;
        for (std::uint64_t seed = 0; seed < 100000; ++seed)
            hits += drawSample(0.3, seed) ? 1 : 0;
        QVERIFY2(hits > 29000 && hits < 31000, qPrintable(QString::number(hits)));
    }

    void divergenceAndRefereeing()
    {
        const QList<Digest> honest { Digest::ofBytes("0"), Digest::ofBytes("1"), Digest::ofBytes("2") };
        auto forged = honest;
        forged[2] = Digest::ofBytes("x");
        QVERIFY(!firstDivergence(honest, honest).has_value());
        QCOMPARE(*firstDivergence(honest, forged), 2);
        QCOMPARE(*firstDivergence(honest, honest.mid(0, 2)), 2); // a short chain: fewer steps than asked
        QCOMPARE(referee(honest[2], forged[2], honest[2]), Ruling::FirstHonest);
        QCOMPARE(referee(forged[2], honest[2], honest[2]), Ruling::SecondHonest);
        QCOMPARE(referee(forged[2], Digest::ofBytes("y"), honest[2]), Ruling::BothWrong);
    }

    // An unchecked update far from its round's median (either way), or not finite, is re-executed
    // before the round aggregates; with too few results to compare, every one is.
    void implausibleUpdatesAreFarFromTheRoundsMedian()
    {
        const QList<double> round { 1.0, 1.2, 0.9, 50.0, 0.1, std::nan(""), 3.9 };
        QCOMPARE(implausibleUpdates(round, {}, 4.0), (QList<qsizetype> { 3, 4, 5 }));
        QCOMPARE(implausibleUpdates(round, {}, 2.0), (QList<qsizetype> { 3, 4, 5, 6 }));
        QCOMPARE(implausibleUpdates({ 1.0, 30.0 }, { 1.1, 0.9 }, 4.0), (QList<qsizetype> { 1 }));
        QCOMPARE(implausibleUpdates({ 1.0, 30.0 }, {}, 4.0), (QList<qsizetype> { 0, 1 }));
        QCOMPARE(implausibleUpdates({ 1.0 }, { 30.0 }, 4.0), (QList<qsizetype> { 0 }));
    }

    void simulationMeetsTheGoals()
    {
        SimulationConfig config;
        const auto result = simulate(config);
        QCOMPARE(result.honestSlashed, 0);
        QVERIFY(result.honestShards == std::int64_t(config.honestNodes) * config.shardsPerNode);
        QVERIFY2(result.cheatersCaughtWithinWindow >= 0.99, qPrintable(QString::number(result.cheatersCaughtWithinWindow)));
        QVERIFY2(result.steadyStateOverhead <= 0.10, qPrintable(QString::number(result.steadyStateOverhead)));
    }
};

QTEST_GUILESS_MAIN(VerificationTest)
#include "tst_verification.moc"
