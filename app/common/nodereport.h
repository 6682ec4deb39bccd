#pragma once

#include <compute/devices/sensors.h>
#include <core/deviceinfo.h>
#include <core/resultlog.h>

#include <QDateTime>
#include <QJsonArray>
#include <QJsonObject>
#include <QStringList>

#include <cstdint>
#include <memory>
#include <optional>

namespace tessera::app {

// What a node's control API says beside its state (docs/CONTROL.md, "The state"): its devices with
// their load, temperature and power, what it earned, its recent results' lifecycle and its log's
// tail. Lives on the control thread, which calls refresh() every RefreshMs.
class NodeReport {
public:
    static constexpr int RefreshMs = 2000;
    static constexpr int Results = 20; // the newest results the state lists
    static constexpr int LogLines = 50;
    static constexpr int Jobs = 20; // earnings by job: the jobs that paid most
    static constexpr int MaxSteps = 8; // of a result's history: the newest
    static constexpr int MaxText = 400; // characters of a broker's words (a job's id: a quarter)

    // `root`: where /proc and /sys are ("/", or a fake tree in a test).
    NodeReport(QString dataDirectory, QList<core::DeviceInfo> devices, QString root = QStringLiteral("/"));

    // Reads the sensors, the result log and the log's tail again. `now`: the wall clock (days of
    // earnings); `monotonicMs`: a steady clock (power and load between two reads).
    void refresh(const QDateTime& now, std::int64_t monotonicMs);

    QJsonArray devices() const; // without "paused", which is the control API's word
    QJsonObject earnings() const { return m_earnings; }
    QJsonArray results() const { return m_results; }
    QJsonArray log() const;
    // An error reading the result log, said in the log's tail once; empty when it reads.
    QString resultsError() const { return m_resultsError; }

    // What the results earned (credits, as strings): today, the last 7 days (with each day, oldest
    // first, for a chart) and by job. Public for its test.
    static QJsonObject earningsOf(const QList<core::ResultEntry>& results, const QDateTime& now);

private:
    void readResults(const QDateTime& now);
    void readLoad();

    QString m_dataDirectory;
    QList<core::DeviceInfo> m_devices;
    QString m_root;
    compute::Sensors m_sensors;
    compute::Sensors::Readings m_readings;
    std::optional<double> m_load; // the machine's CPUs, busy fraction since the last read
    std::optional<std::pair<std::uint64_t, std::uint64_t>> m_lastTicks; // busy, all
    std::unique_ptr<core::ResultLog> m_log;
    QJsonObject m_earnings;
    QJsonArray m_results;
    QString m_resultsError;
};

} // namespace tessera::app
