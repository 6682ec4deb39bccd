#pragma once

#include "keyedtablemodel.h"

#include <core/broker/records.h>
#include <core/deviceinfo.h>

#include <core/resultlog.h>
#include <optional>

#include <QDateTime>
#include <QHash>
#include <QJsonObject>
#include <QSet>

namespace tessera::ui {

// The Verification tab: every result this node produced or re-executed, with its lifecycle, from
// the node's result log (core::ResultLog::list()).
class ResultsModel final : public KeyedTableModel {
    Q_OBJECT
public:
    enum class Column { Job, Round, Shard, State, Paid, Updated, History, Detail };
    explicit ResultsModel(QObject* parent = nullptr);
    void setResults(const QList<core::ResultEntry>& results);
};

// The Devices tab: each device, whether Tessera can use it and why not, its benchmark, its load,
// temperature and power as last read (docs/APP.md, "Heat and energy"), and a check box to leave it out.
class DevicesModel final : public KeyedTableModel {
    Q_OBJECT
public:
    enum class Column { Device, Kind, Usable, Why, Memory, Benchmark, Load, Temperature, Power, Enabled };
    struct Benchmark {
        double mlpSamplesPerSecond = 0.0;
        double cnnSamplesPerSecond = 0.0;
        double gflops = 0.0;
    };
    // What a device's sensors said last; nullopt: nothing to read (the cell says so).
    struct Reading {
        std::optional<int> loadPercent; // the duty cycle Tessera gives it
        std::optional<double> temperatureC;
        QString temperatureSource; // "hwmon k10temp", "NVML"
        std::optional<double> watts;
        bool wattsEstimated = false; // from the thread count, not a meter
    };
    explicit DevicesModel(QObject* parent = nullptr);
    void setDevices(
        const QList<core::DeviceInfo>& devices, const QHash<QString, Benchmark>& benchmarks, const QSet<QString>& disabled);
    void setReadings(const QHash<QString, Reading>& readings);
    // "cpu:0", "cuda:1": the name Compute/DisabledDevices uses.
    static QString deviceId(const core::DeviceInfo& device);

    Qt::ItemFlags flags(const QModelIndex& index) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

Q_SIGNALS:
    void enabledChanged(const QString& deviceId, bool enabled);

private:
    void rebuild();

    QList<core::DeviceInfo> m_list;
    QHash<QString, Benchmark> m_benchmarks;
    QHash<QString, Reading> m_readings;
    QSet<QString> m_disabled;
    QSet<QString> m_usable;
};

// The Jobs tab: the jobs this user submitted, from the broker's STATUS/LIST replies.
class JobsModel final : public KeyedTableModel {
    Q_OBJECT
public:
    enum class Column { Name, State, Progress, Accuracy, Escrow, Id };
    explicit JobsModel(QObject* parent = nullptr);
    void setJobs(const QList<core::broker::JobStatus>& jobs);
};

// The Earnings tab's stake history: bonds, slashes and unbonding, newest first.
class StakeEventsModel final : public KeyedTableModel {
    Q_OBJECT
public:
    enum class Column { Time, Event, Amount, Detail };
    struct Event {
        QString key;
        QDateTime at;
        QString event; // "slashed", "bonded", ...
        QString amount;
        QString detail;
    };
    explicit StakeEventsModel(QObject* parent = nullptr);
    void setEvents(const QList<Event>& events);
};

// The Log tab: the event log, newest last, at most `capacity` entries.
class LogModel final : public KeyedTableModel {
    Q_OBJECT
public:
    enum class Column { Time, Level, Source, Message };
    explicit LogModel(QObject* parent = nullptr, int capacity = 5000);
    void append(const QDateTime& time, const QString& level, const QString& source, const QString& message);

private:
    int m_capacity;
    std::int64_t m_next = 0;
    QList<Row> m_entries;
};

} // namespace tessera::ui
