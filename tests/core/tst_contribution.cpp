// The desktop app's contribute / snooze / pause logic.

#include <core/contribution.h>

#include <QTest>

using tessera::core::Contribution;
using State = Contribution::State;

class ContributionTest : public QObject {
    Q_OBJECT

    const QDateTime m_now = QDateTime(QDate(2026, 11, 30), QTime(12, 0));

private Q_SLOTS:
    void offUntilSwitchedOn()
    {
        Contribution c;
        c.update({}, m_now);
        QCOMPARE(c.state(), State::Off);
        QVERIFY(!c.mayCompute());
        c.setContributing(true);
        c.update({}, m_now);
        QCOMPARE(c.state(), State::Offline); // no broker yet
        QVERIFY(c.mayCompute());
        c.setConnected(true);
        QCOMPARE(c.state(), State::Waiting);
        c.setTraining(true);
        QCOMPARE(c.state(), State::Working);
        c.setContributing(false);
        QCOMPARE(c.state(), State::Off);
        QVERIFY(!c.mayCompute());
    }

    // A pause from another program (the control API) holds until resumed, through any update, and
    // the user's own Contribute switch ends it.
    void aPauseFromTheControlApiHoldsUntilResumed()
    {
        Contribution c;
        c.setContributing(true);
        c.setConnected(true);
        c.setHeld(true);
        c.update({}, m_now.addSecs(86400));
        QCOMPARE(c.state(), State::Paused);
        QVERIFY(!c.mayCompute());
        QCOMPARE(c.reason(), QStringLiteral("paused through the control API"));
        c.setHeld(false);
        QCOMPARE(c.state(), State::Waiting);
        c.setHeld(true);
        c.setContributing(false);
        c.setContributing(true);
        QCOMPARE(c.state(), State::Waiting);
    }

    void snoozeEndsOnTime()
    {
        Contribution c;
        c.setContributing(true);
        c.setConnected(true);
        c.snoozeUntil(m_now.addSecs(3600));
        c.update({}, m_now);
        QCOMPARE(c.state(), State::Snoozed);
        QVERIFY(!c.mayCompute());
        QVERIFY(c.reason().contains(QStringLiteral("13:00")));
        c.update({}, m_now.addSecs(3599));
        QCOMPARE(c.state(), State::Snoozed);
        c.update({}, m_now.addSecs(3600));
        QCOMPARE(c.state(), State::Waiting);
    }

    void snoozeUntilIdleEndsWhenTheUserLeaves()
    {
        Contribution c;
        c.setContributing(true);
        c.setConnected(true);
        c.setRules({ false, 300, true });
        c.snoozeUntilIdle();
        c.update({ 10, false, true }, m_now);
        QCOMPARE(c.state(), State::Snoozed);
        c.update({ 299, false, true }, m_now);
        QCOMPARE(c.state(), State::Snoozed);
        c.update({ 300, false, true }, m_now);
        QCOMPARE(c.state(), State::Waiting);
        // Switching off ends a snooze too.
        c.snoozeUntil(m_now.addSecs(60));
        c.setContributing(false);
        c.setContributing(true);
        c.update({}, m_now);
        QCOMPARE(c.state(), State::Waiting);
    }

    void rulesPauseAndResume()
    {
        Contribution c;
        c.setContributing(true);
        c.setConnected(true);
        c.setRules({ true, 300, true });
        c.update({ 5, false, true }, m_now);
        QCOMPARE(c.state(), State::Paused);
        QVERIFY(c.reason().contains(QStringLiteral("RunOnlyWhenIdle")));
        QVERIFY(!c.mayCompute());
        c.update({ 600, false, true }, m_now);
        QCOMPARE(c.state(), State::Waiting);
        c.update({ 600, true, true }, m_now);
        QCOMPARE(c.state(), State::Paused);
        QVERIFY(c.reason().contains(QStringLiteral("battery")));
        c.setRules({ true, 300, false });
        c.update({ 600, true, true }, m_now);
        QCOMPARE(c.state(), State::Waiting);
        c.update({ 600, true, false }, m_now);
        QCOMPARE(c.state(), State::Paused);
        QVERIFY(c.reason().contains(QStringLiteral("schedule")));
    }

    void errorsWinUntilCleared()
    {
        Contribution c;
        c.setContributing(true);
        c.setError(QStringLiteral("the data folder is not writable"));
        QCOMPARE(c.state(), State::Error);
        QVERIFY(!c.mayCompute());
        QCOMPARE(c.reason(), QStringLiteral("the data folder is not writable"));
        c.clearError();
        QCOMPARE(c.state(), State::Offline);
        QCOMPARE(tessera::core::nameOf(State::Snoozed), QStringLiteral("snoozed"));
    }

    void scheduleWindowsIncludingOnesAcrossMidnight()
    {
        const auto at = [](int h, int m) { return QTime(h, m); };
        QVERIFY(Contribution::insideSchedule({}, at(3, 0))); // no schedule: always
        const QString nights = QStringLiteral("22:00-06:00, 12:00-13:00");
        QVERIFY(Contribution::insideSchedule(nights, at(23, 30)));
        QVERIFY(Contribution::insideSchedule(nights, at(5, 59)));
        QVERIFY(!Contribution::insideSchedule(nights, at(6, 0))); // the end is outside
        QVERIFY(Contribution::insideSchedule(nights, at(12, 30)));
        QVERIFY(!Contribution::insideSchedule(nights, at(15, 0)));
        QVERIFY(!Contribution::insideSchedule(QStringLiteral("9-17"), at(12, 0))); // not HH:mm: no window
    }
};

QTEST_GUILESS_MAIN(ContributionTest)
#include "tst_contribution.moc"
