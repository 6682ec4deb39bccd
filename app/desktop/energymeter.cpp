#include "energymeter.h"

#include <QCoreApplication>

#include <algorithm>

namespace tessera::app {

QString EnergyMeter::Shard::describe() const
{
    return QStringLiteral(", %1 s of computing, %2 Wh of CPU energy (%3)")
        .arg(seconds, 0, 'f', seconds < 1.0 ? 3 : 1)
        .arg(joules / 3600.0, 0, 'f', 3)
        .arg(measured ? QStringLiteral("RAPL") : QStringLiteral("estimated"));
}

void EnergyMeter::shardBegan(std::int64_t nowMs, std::optional<double> joules)
{
    m_startMs = nowMs;
    m_startJoules = joules;
}

std::optional<EnergyMeter::Shard> EnergyMeter::shardEnded(
    std::int64_t nowMs, std::optional<double> joules, double busySeconds, int threads, const QDate& today)
{
    if (!m_startMs)
        return std::nullopt;
    const double window = double(nowMs - *m_startMs) / 1000.0;
    Shard shard;
    shard.seconds = busySeconds;
    // RAPL's counter only grows; one that went back (a wrap, a reset) says nothing of this shard.
    shard.measured = joules && m_startJoules && window >= MinimumWindowSeconds && *joules >= *m_startJoules;
    shard.joules = shard.measured ? (*joules - *m_startJoules) / window * std::max(window, busySeconds)
                                  : EstimatedWattsPerThread * double(std::max(threads, 1)) * busySeconds;
    m_startMs.reset();
    m_startJoules.reset();
    if (m_day != today) {
        m_day = today;
        m_todayJoules = 0.0;
    }
    m_todayJoules += shard.joules;
    m_measured = shard.measured;
    return shard;
}

QString EnergyMeter::overviewLine(const QDate& today, double pricePerKWh, double earnedToday) const
{
    const double kWh = todayJoules(today) / 3.6e6;
    QString line = QCoreApplication::translate("tessera::app::DesktopApp", "%1 Wh of CPU energy for training today (%2)")
                       .arg(kWh * 1000.0, 0, 'f', kWh < 0.01 ? 2 : 1) // a practice job takes hundredths
                       .arg(m_measured ? QCoreApplication::translate("tessera::app::DesktopApp", "measured by RAPL")
                                       : QCoreApplication::translate("tessera::app::DesktopApp",
                                           "estimated: this computer does not let Tessera read its power"));
    if (pricePerKWh > 0.0)
        line += QCoreApplication::translate(
            "tessera::app::DesktopApp", "; at %1 credits a kWh that is %2 credits, so %3 credits net")
                    .arg(pricePerKWh)
                    .arg(kWh * pricePerKWh, 0, 'f', 4)
                    .arg(earnedToday - kWh * pricePerKWh, 0, 'f', 2);
    return line;
}

} // namespace tessera::app
