#include <ui/formatting.h>

#include <QTest>

using namespace tessera::ui;

class FormattingTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void durations()
    {
        QCOMPARE(formatDuration(45'900), QStringLiteral("45 s"));
        QCOMPARE(formatDuration(200'000), QStringLiteral("3 min 20 s"));
        QCOMPARE(formatDuration(7'500'000), QStringLiteral("2 h 05 min"));
        QCOMPARE(formatDuration(3LL * 86'400'000 + 4 * 3'600'000), QStringLiteral("3 d 4 h"));
        QCOMPARE(formatDuration(-1), QStringLiteral("-"));
    }

    void bytes()
    {
        QCOMPARE(formatBytes(512), QStringLiteral("512 B"));
        QCOMPARE(formatBytes(1536), QStringLiteral("1.5 KiB"));
        QCOMPARE(formatBytes(3435973837LL), QStringLiteral("3.2 GiB"));
        QCOMPARE(formatBytes(200LL << 20), QStringLiteral("200 MiB"));
    }

    void rates()
    {
        QCOMPARE(formatRate(1234.4, QStringLiteral("samples")), QStringLiteral("1,234 samples/s"));
        QCOMPARE(formatRate(12.34, QStringLiteral("samples")), QStringLiteral("12.3 samples/s"));
    }
};

QTEST_MAIN(FormattingTest)
#include "tst_formatting.moc"
