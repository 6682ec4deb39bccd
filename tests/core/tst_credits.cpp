#include <core/credits.h>
#include <core/pricing.h>

#include <QTest>

#include <limits>

using tessera::core::Credits;

class CreditsTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void parsesExactDecimals_data()
    {
        QTest::addColumn<QString>("text");
        QTest::addColumn<qint64>("micro");
        QTest::newRow("whole") << QStringLiteral("12") << qint64(12'000'000);
        QTest::newRow("fraction") << QStringLiteral("12.5") << qint64(12'500'000);
        QTest::newRow("smallest unit") << QStringLiteral("0.000001") << qint64(1);
        QTest::newRow("leading dot") << QStringLiteral(".25") << qint64(250'000);
        QTest::newRow("negative") << QStringLiteral("-3.000002") << qint64(-3'000'002);
        QTest::newRow("plus sign") << QStringLiteral("+1") << qint64(1'000'000);
        QTest::newRow("largest") << QStringLiteral("9223372036854.775807") << std::numeric_limits<qint64>::max();
    }
    void parsesExactDecimals()
    {
        QFETCH(QString, text);
        QFETCH(qint64, micro);
        const auto credits = Credits::parse(text);
        QVERIFY2(credits.ok(), qPrintable(credits.ok() ? QString() : credits.error().message));
        QCOMPARE(credits->micro(), micro);
    }

    void rejectsWhatIsNotAnAmount_data()
    {
        QTest::addColumn<QString>("text");
        QTest::addColumn<QString>("why");
        QTest::newRow("empty") << QString() << QStringLiteral("empty");
        QTest::newRow("seven places") << QStringLiteral("0.0000001") << QStringLiteral("6 decimal places");
        QTest::newRow("exponent") << QStringLiteral("1e6") << QStringLiteral("not a digit");
        QTest::newRow("two dots") << QStringLiteral("1.2.3") << QStringLiteral("decimal point");
        QTest::newRow("too large") << QStringLiteral("9223372036854.775808") << QStringLiteral("too large");
        QTest::newRow("huge") << QStringLiteral("99999999999999999999999") << QStringLiteral("too large");
        QTest::newRow("only a sign") << QStringLiteral("-") << QStringLiteral("no digits");
        QTest::newRow("space") << QStringLiteral("1 000") << QStringLiteral("not a digit");
    }
    void rejectsWhatIsNotAnAmount()
    {
        QFETCH(QString, text);
        QFETCH(QString, why);
        const auto credits = Credits::parse(text);
        QVERIFY(!credits.ok());
        QVERIFY2(credits.error().message.contains(why), qPrintable(credits.error().message));
    }

    void printsExactly_data()
    {
        QTest::addColumn<qint64>("micro");
        QTest::addColumn<QString>("text");
        QTest::newRow("zero") << qint64(0) << QStringLiteral("0");
        QTest::newRow("whole") << qint64(3'000'000) << QStringLiteral("3");
        QTest::newRow("trimmed") << qint64(12'500'000) << QStringLiteral("12.5");
        QTest::newRow("smallest") << qint64(1) << QStringLiteral("0.000001");
        QTest::newRow("negative") << qint64(-1'000'001) << QStringLiteral("-1.000001");
        QTest::newRow("min") << std::numeric_limits<qint64>::min() << QStringLiteral("-9223372036854.775808");
    }
    void printsExactly()
    {
        QFETCH(qint64, micro);
        QFETCH(QString, text);
        QCOMPARE(Credits::fromMicro(micro).toString(), text);
        if (micro != std::numeric_limits<qint64>::min())
            QCOMPARE(Credits::parse(text)->micro(), micro);
    }

    void arithmeticIsCheckedForOverflow()
    {
        const auto max = Credits::fromMicro(std::numeric_limits<qint64>::max());
        const auto min = Credits::fromMicro(std::numeric_limits<qint64>::min());
        const auto one = Credits::fromMicro(1);
        QVERIFY(!max.checkedAdd(one).has_value());
        QVERIFY(!min.checkedSubtract(one).has_value());
        QVERIFY(!max.checkedMultiply(2).has_value());
        QVERIFY(!min.checkedMultiply(-1).has_value());
        QVERIFY(!Credits::fromCredits(std::numeric_limits<qint64>::max() / 1000).has_value());
        QCOMPARE(max.checkedSubtract(one)->micro(), std::numeric_limits<qint64>::max() - 1);
        QCOMPARE(Credits::fromMicro(5).checkedAdd(Credits::fromMicro(-7))->micro(), -2);
        QCOMPARE(Credits::fromCredits(3)->checkedMultiply(4)->micro(), 12'000'000);
    }

    void scalingIsExactWithoutFloatingPoint()
    {
        // 1/3 of 1 credit rounds toward zero; the three parts leave 1 micro-credit over, never more.
        const auto credit = *Credits::fromCredits(1);
        QCOMPARE(credit.checkedScale(1, 3)->micro(), 333'333);
        // A product that overflows int64 on the way is still exact through 128 bits.
        const auto big = Credits::fromMicro(std::numeric_limits<qint64>::max());
        QCOMPARE(big.checkedScale(3, 3)->micro(), std::numeric_limits<qint64>::max());
        QVERIFY(!big.checkedScale(2, 1).has_value());
        QVERIFY(!credit.checkedScale(1, 0).has_value());
    }

    // A broker's QUOTE, read back by the desktop app's submit panel, keeps every amount exactly.
    void quotesRoundTripThroughJson()
    {
        tessera::core::Quote quote;
        quote.flopsPerSample = 1.5e6;
        quote.unitsPerShard = 7;
        quote.shards = 45;
        quote.pricePerUnit = Credits::fromMicro(100'000);
        quote.pricePerShard = Credits::fromMicro(700'001);
        quote.training = Credits::fromMicro(31'500'045);
        quote.verification = Credits::fromMicro(3'150'004);
        quote.total = Credits::fromMicro(34'650'049);
        quote.worstCase = Credits::fromMicro(63'000'090);
        const auto back = tessera::core::Quote::fromJson(quote.toJson());
        QCOMPARE(back.toJson(), quote.toJson());
        QCOMPARE(back.worstCase.micro(), 63'000'090);
        QCOMPARE(tessera::core::Quote::fromJson({}).total.micro(), 0);
    }
};

QTEST_GUILESS_MAIN(CreditsTest)
#include "tst_credits.moc"
