#include "sensors.h"

#include <QDir>
#include <QFile>

namespace tessera::compute {

namespace {

std::optional<double> number(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return std::nullopt;
    bool ok = false;
    const double value = QString::fromLatin1(file.readAll()).trimmed().toDouble(&ok);
    return ok ? std::optional<double>(value) : std::nullopt;
}

QString text(const QString& path)
{
    QFile file(path);
    return file.open(QIODevice::ReadOnly) ? QString::fromLatin1(file.readAll()).trimmed() : QString();
}

// hwmon chips and thermal zones that measure the CPU package or its cores.
bool cpuChip(const QString& name)
{
    static const QStringList names { QStringLiteral("k10temp"), QStringLiteral("coretemp"), QStringLiteral("zenpower"),
        QStringLiteral("cpu_thermal"), QStringLiteral("cpu-thermal"), QStringLiteral("soc_thermal") };
    return names.contains(name);
}

bool cpuZone(const QString& type)
{
    return type == u"x86_pkg_temp" || type.startsWith(QStringLiteral("cpu")) || type == u"soc_thermal" || type == u"soc-thermal";
}

} // namespace

Sensors::Sensors(QString root)
    : m_root(std::move(root))
{ }

Sensors::Readings Sensors::read(std::int64_t nowMs)
{
    Readings readings;
    const QDir hwmon(QDir(m_root).filePath(QStringLiteral("sys/class/hwmon")));
    for (const auto& chip : hwmon.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
        const QDir dir(hwmon.filePath(chip));
        const QString name = text(dir.filePath(QStringLiteral("name")));
        if (!cpuChip(name))
            continue;
        for (const auto& input : dir.entryList({ QStringLiteral("temp*_input") }, QDir::Files, QDir::Name)) {
            if (auto milli = number(dir.filePath(input));
                milli && (!readings.cpuTemperatureC || *milli / 1000.0 > *readings.cpuTemperatureC)) {
                readings.cpuTemperatureC = *milli / 1000.0;
                readings.cpuTemperatureSource = QStringLiteral("hwmon ") + name;
            }
        }
    }
    if (!readings.cpuTemperatureC) {
        const QDir thermal(QDir(m_root).filePath(QStringLiteral("sys/class/thermal")));
        for (const auto& zone : thermal.entryList({ QStringLiteral("thermal_zone*") }, QDir::Dirs, QDir::Name)) {
            const QDir dir(thermal.filePath(zone));
            const QString type = text(dir.filePath(QStringLiteral("type")));
            if (!cpuZone(type))
                continue;
            if (auto milli = number(dir.filePath(QStringLiteral("temp")));
                milli && (!readings.cpuTemperatureC || *milli / 1000.0 > *readings.cpuTemperatureC)) {
                readings.cpuTemperatureC = *milli / 1000.0;
                readings.cpuTemperatureSource = QStringLiteral("thermal ") + type;
            }
        }
    }
    if (m_rapl) {
        const QDir powercap(QDir(m_root).filePath(QStringLiteral("sys/class/powercap")));
        // The packages (intel-rapl:0, intel-rapl:1), not their subzones (intel-rapl:0:0, counted
        // in them); each counter wraps at its max_energy_range_uj.
        double microjoules = 0.0;
        bool any = false;
        for (const auto& zone : powercap.entryList({ QStringLiteral("intel-rapl:*") }, QDir::Dirs | QDir::System, QDir::Name)) {
            if (zone.count(u':') != 1)
                continue;
            const QDir dir(powercap.filePath(zone));
            const auto energy = number(dir.filePath(QStringLiteral("energy_uj")));
            if (!energy)
                continue;
            any = true;
            if (const auto last = m_lastZones.find(zone); last != m_lastZones.end()) {
                double delta = *energy - last->second;
                if (delta < 0.0)
                    delta += number(dir.filePath(QStringLiteral("max_energy_range_uj"))).value_or(0.0);
                microjoules += delta;
            }
            m_lastZones[zone] = *energy;
        }
        if (!any) {
            m_rapl = false;
        } else {
            if (m_readBefore && nowMs > m_lastMs) {
                m_joules += microjoules / 1e6;
                readings.cpuWatts = (microjoules / 1e6) / (double(nowMs - m_lastMs) / 1000.0);
            }
            m_readBefore = true;
            m_lastMs = nowMs;
        }
    }
    return readings;
}

} // namespace tessera::compute
