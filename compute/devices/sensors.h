#pragma once

#include <QString>

#include <cstdint>
#include <map>
#include <optional>

namespace tessera::compute {

// What the kernel tells of this machine's heat and energy (docs/APP.md, "Heat and energy"),
// read from sysfs under `root` ("/", or a fake tree in a test):
//   CPU temperature: the hottest temp*_input of a hwmon chip that measures CPUs (k10temp, coretemp,
//     zenpower, cpu_thermal, ...), else the hottest thermal zone of a CPU type (x86_pkg_temp,
//     cpu-thermal, ...); millidegrees Celsius.
//   CPU energy: RAPL's package counters (/sys/class/powercap/intel-rapl:N/energy_uj, which AMD's
//     driver offers too), summed, with their wrap at max_energy_range_uj; readable by root only on
//     most kernels, so often absent.
// Anything missing or unreadable is nullopt, never an error: the app estimates instead and says so.
class Sensors {
public:
    explicit Sensors(QString root = QStringLiteral("/"));

    struct Readings {
        std::optional<double> cpuTemperatureC;
        QString cpuTemperatureSource; // "hwmon k10temp", "thermal x86_pkg_temp"
        std::optional<double> cpuWatts; // RAPL over the time since the last read
    };
    // nowMs: a monotonic clock's milliseconds (the caller's), for the power between two reads.
    Readings read(std::int64_t nowMs);
    // Joules RAPL counted since this object's first read (nullopt: no RAPL here).
    std::optional<double> cpuJoules() const { return m_rapl ? std::optional<double>(m_joules) : std::nullopt; }

private:
    QString m_root;
    bool m_rapl = true; // until a read finds none
    std::map<QString, double> m_lastZones; // each RAPL package's counter at the last read
    bool m_readBefore = false;
    std::int64_t m_lastMs = 0;
    double m_joules = 0.0;
};

} // namespace tessera::compute
