#include "formatting.h"

#include <QLocale>

#include <array>
#include <cmath>

namespace tessera::ui {

QString formatDuration(std::int64_t milliseconds)
{
    if (milliseconds < 0)
        return QStringLiteral("-");
    const std::int64_t seconds = milliseconds / 1000;
    if (seconds < 60)
        return QStringLiteral("%1 s").arg(seconds);
    const std::int64_t minutes = seconds / 60;
    if (minutes < 60)
        return QStringLiteral("%1 min %2 s").arg(minutes).arg(seconds % 60);
    const std::int64_t hours = minutes / 60;
    if (hours < 24)
        return QStringLiteral("%1 h %2 min").arg(hours).arg(minutes % 60, 2, 10, QLatin1Char('0'));
    return QStringLiteral("%1 d %2 h").arg(hours / 24).arg(hours % 24);
}

QString formatBytes(std::int64_t bytes)
{
    static constexpr std::array units { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    if (bytes < 1024)
        return QStringLiteral("%1 B").arg(bytes);
    double value = static_cast<double>(bytes);
    std::size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < units.size()) {
        value /= 1024.0;
        ++unit;
    }
    return QStringLiteral("%1 %2").arg(value, 0, 'f', value < 10.0 ? 1 : 0).arg(QLatin1String(units[unit]));
}

QString formatRate(double perSecond, const QString& unit)
{
    const QLocale locale = QLocale::c();
    QString number;
    if (!std::isfinite(perSecond))
        number = QStringLiteral("-");
    else if (perSecond >= 100.0)
        number = QLocale(QLocale::English).toString(std::llround(perSecond));
    else
        number = locale.toString(perSecond, 'f', 1);
    return QStringLiteral("%1 %2/s").arg(number, unit);
}

} // namespace tessera::ui
