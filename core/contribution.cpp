#include "contribution.h"

namespace tessera::core {

void Contribution::setContributing(bool on)
{
    m_contributing = on;
    m_held = false; // the user's own switch, in the app, ends a pause from elsewhere
    if (!on)
        endSnooze();
}

void Contribution::snoozeUntil(const QDateTime& until)
{
    m_snoozeUntil = until;
    m_snoozedUntilIdle = false;
}

void Contribution::snoozeUntilIdle()
{
    m_snoozeUntil.reset();
    m_snoozedUntilIdle = true;
}

void Contribution::endSnooze()
{
    m_snoozeUntil.reset();
    m_snoozedUntilIdle = false;
}

void Contribution::update(const Inputs& inputs, const QDateTime& now)
{
    const bool idle = inputs.userIdleSeconds >= m_rules.idleSeconds;
    if (m_snoozeUntil && now >= *m_snoozeUntil)
        endSnooze();
    if (m_snoozedUntilIdle && idle)
        endSnooze();
    m_pausedBecause.clear();
    if (m_rules.runOnlyWhenIdle && !idle)
        m_pausedBecause = QStringLiteral("the computer is in use (Compute/RunOnlyWhenIdle)");
    else if (m_rules.pauseOnBattery && inputs.onBattery)
        m_pausedBecause = QStringLiteral("on battery (Compute/PauseOnBattery)");
    else if (!inputs.insideSchedule)
        m_pausedBecause = QStringLiteral("outside the schedule (Compute/Schedule)");
}

Contribution::State Contribution::state() const
{
    if (!m_error.isEmpty())
        return State::Error;
    if (!m_contributing)
        return State::Off;
    if (m_snoozeUntil || m_snoozedUntilIdle)
        return State::Snoozed;
    if (m_held || !m_pausedBecause.isEmpty())
        return State::Paused;
    if (!m_connected)
        return State::Offline;
    return m_training ? State::Working : State::Waiting;
}

bool Contribution::mayCompute() const
{
    const auto now = state();
    return now == State::Working || now == State::Waiting || now == State::Offline;
}

QString Contribution::reason() const
{
    switch (state()) {
    case State::Error:
        return m_error;
    case State::Paused:
        return m_held ? QStringLiteral("paused through the control API") : m_pausedBecause;
    case State::Snoozed:
        return m_snoozeUntil ? QStringLiteral("snoozed until %1").arg(m_snoozeUntil->toString(QStringLiteral("HH:mm")))
                             : QStringLiteral("snoozed until the computer is idle");
    case State::Offline:
        return QStringLiteral("no broker answers");
    default:
        return {};
    }
}

bool Contribution::insideSchedule(const QString& schedule, const QTime& now)
{
    const auto windows = schedule.split(u',', Qt::SkipEmptyParts);
    if (windows.isEmpty())
        return true;
    for (const auto& window : windows) {
        const auto from = QTime::fromString(window.section(u'-', 0, 0).trimmed(), QStringLiteral("HH:mm"));
        const auto to = QTime::fromString(window.section(u'-', 1, 1).trimmed(), QStringLiteral("HH:mm"));
        if (!from.isValid() || !to.isValid())
            continue;
        if (from <= to ? (now >= from && now < to) : (now >= from || now < to))
            return true;
    }
    return false;
}

} // namespace tessera::core
