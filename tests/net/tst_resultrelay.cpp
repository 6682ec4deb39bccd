// The relay between a node's sessions (docs/PROTOCOL.md, "Several brokers of one network"): what
// a session stages is the relay's to name (nothing of a broker's in a path), a result goes to one
// taker of its network at a time, one a broker refused waits longer for that broker, and one
// refused MaxAttempts times goes back to the session it came from only.

#include <net/resultrelay.h>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

using namespace tessera;
using net::ResultRelay;

namespace {

ResultRelay::Handed handed(const QString& network, const QString& from, const QString& assignment)
{
    ResultRelay::Handed item;
    item.network = network;
    item.from = from;
    item.finished.assignment = assignment;
    return item;
}

} // namespace

class ResultRelayTest : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;

private Q_SLOTS:
    void stagedFilesAreNamedByTheRelayAndLinked()
    {
        const QString staging = m_dir.filePath(QStringLiteral("relay"));
        QDir().mkpath(staging + QStringLiteral("/old"));
        {
            QFile leftover(staging + QStringLiteral("/old/blob-1"));
            QVERIFY(leftover.open(QIODevice::WriteOnly));
        }
        ResultRelay relay(staging);
        QVERIFY(!QFile::exists(staging + QStringLiteral("/old/blob-1"))); // a run before's, never taken
        const QString source = m_dir.filePath(QStringLiteral("kept state"));
        {
            QFile file(source);
            QVERIFY(file.open(QIODevice::WriteOnly));
            file.write("state");
        }
        const auto first = relay.stage(source);
        const auto second = relay.stage(source);
        QVERIFY(first && second && *first != *second);
        QCOMPARE(QFileInfo(*first).absolutePath(), QDir(staging).absolutePath());
        QCOMPARE(QFile(*first).size(), 5);
        QVERIFY(!relay.stage(m_dir.filePath(QStringLiteral("missing"))));
    }

    void oneTakerOfItsNetworkAtATime()
    {
        ResultRelay relay(m_dir.filePath(QStringLiteral("taking")));
        relay.hand(handed(QStringLiteral("n1"), QStringLiteral("tcp://a:1#1"), QStringLiteral("x/../y")));
        QVERIFY(!relay.take(QStringLiteral("n2"), QStringLiteral("tcp://c:1"), 0)); // another network's
        auto taken = relay.take(QStringLiteral("n1"), QStringLiteral("tcp://b:1"), 0);
        QVERIFY(taken);
        QCOMPARE(taken->finished.assignment, QStringLiteral("x/../y"));
        QVERIFY(!relay.take(QStringLiteral("n1"), QStringLiteral("tcp://a:1#1"), 0));
        QCOMPARE(relay.size(), 0);
    }

    void aRefusedResultWaitsLongerForTheBrokerThatRefusedIt()
    {
        ResultRelay relay(m_dir.filePath(QStringLiteral("refused")));
        auto item = handed(QStringLiteral("n1"), QStringLiteral("tcp://a:1"), QStringLiteral("r1"));
        item.attempts = 1;
        item.notBefore = 1000;
        item.refusedBy = QStringLiteral("tcp://b:1");
        relay.hand(item);
        QVERIFY(!relay.take(QStringLiteral("n1"), QStringLiteral("tcp://a:1"), 999));
        QVERIFY(!relay.take(QStringLiteral("n1"), QStringLiteral("tcp://b:1"), 1000 + ResultRelay::RetryMs - 1));
        QVERIFY(relay.take(QStringLiteral("n1"), QStringLiteral("tcp://b:1"), 1000 + ResultRelay::RetryMs));
        relay.hand(item);
        QVERIFY(relay.take(QStringLiteral("n1"), QStringLiteral("tcp://a:1"), 1000));
    }

    void anExhaustedResultGoesBackToItsOwnSessionOnly()
    {
        ResultRelay relay(m_dir.filePath(QStringLiteral("exhausted")));
        auto item = handed(QStringLiteral("n1"), QStringLiteral("tcp://a:1"), QStringLiteral("e1"));
        item.attempts = ResultRelay::MaxAttempts;
        relay.hand(item);
        QVERIFY(!relay.take(QStringLiteral("n1"), QStringLiteral("tcp://b:1"), 1'000'000));
        QVERIFY(relay.take(QStringLiteral("n1"), QStringLiteral("tcp://a:1"), 1'000'000));
    }
};

QTEST_GUILESS_MAIN(ResultRelayTest)
#include "tst_resultrelay.moc"
