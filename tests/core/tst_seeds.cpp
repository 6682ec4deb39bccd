#include <core/decomposition.h>
#include <core/seeds.h>

#include <QSet>
#include <QTest>

using namespace tessera::core;

class SeedsTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void splitMixMatchesTheReferenceStream()
    {
        // The first outputs of SplitMix64 seeded with 0, from the reference implementation
        // (Steele, Lea and Flood; as in Vigna's splitmix64.c): third-party nodes must match them.
        SplitMix64 random(0);
        QCOMPARE(random.next(), 0xE220A8397B1DCDAFULL);
        QCOMPARE(random.next(), 0x6E789E6AA1B965F4ULL);
        QCOMPARE(random.next(), 0x06C45D188009454FULL);
    }

    void belowStaysInRange()
    {
        SplitMix64 random(42);
        QList<int> counts(7, 0);
        for (int i = 0; i < 70000; ++i) {
            const auto value = random.below(7);
            QVERIFY(value < 7);
            ++counts[int(value)];
        }
        for (int count : counts)
            QVERIFY2(count > 9500 && count < 10500, qPrintable(QString::number(count)));
    }

    void derivedSeedsDependOnEveryPart()
    {
        const auto base = deriveSeed(7, { 1, 2, 3 });
        QCOMPARE(deriveSeed(7, { 1, 2, 3 }), base);
        QVERIFY(deriveSeed(8, { 1, 2, 3 }) != base);
        QVERIFY(deriveSeed(7, { 1, 2, 4 }) != base);
        QVERIFY(deriveSeed(7, { 1, 3, 2 }) != base);
        QVERIFY(deriveSeed(7, { 1, 2 }) != base);
    }

    void permutationIsAPermutationAndSeeded()
    {
        const auto a = seededPermutation(1000, 99);
        QCOMPARE(a.size(), 1000);
        QCOMPARE(QSet<std::int64_t>(a.begin(), a.end()).size(), 1000);
        QCOMPARE(*std::min_element(a.begin(), a.end()), 0);
        QCOMPARE(*std::max_element(a.begin(), a.end()), 999);
        QCOMPARE(seededPermutation(1000, 99), a);
        QVERIFY(seededPermutation(1000, 100) != a);
        QVERIFY(seededPermutation(0, 1).isEmpty());
        QCOMPARE(seededPermutation(1, 1), QList<std::int64_t> { 0 });
    }

    void roundSplitsTheDataIntoDisjointShards()
    {
        JobSpec spec;
        spec.name = QStringLiteral("t");
        spec.model.zoo = QStringLiteral("mlp");
        spec.dataset.builtin = QStringLiteral("fashion-mnist");
        spec.training.shardsPerRound = 7;
        spec.training.localSteps = 10;
        spec.training.checkpointInterval = 3;
        spec.budget = Credits::fromMicro(1);
        const auto start = Digest::ofBytes("w");
        const auto tasks = decomposeRound(QStringLiteral("job"), spec, 4, start);
        QCOMPARE(tasks.size(), 7);
        std::int64_t expectedBegin = 0;
        for (const auto& task : tasks) {
            QCOMPARE(task.sampleBegin, expectedBegin);
            const auto size = task.sampleEnd - task.sampleBegin;
            QVERIFY(size == 60000 / 7 || size == 60000 / 7 + 1);
            expectedBegin = task.sampleEnd;
            QCOMPARE(task.round, 4);
            QCOMPARE(task.startWeights, start);
            QVERIFY(task.validate().ok());
        }
        QCOMPARE(expectedBegin, 60000);
    }
};

QTEST_GUILESS_MAIN(SeedsTest)
#include "tst_seeds.moc"
