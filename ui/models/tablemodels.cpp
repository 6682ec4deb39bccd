#include "tablemodels.h"

#include <cmath>

#include "../formatting.h"

#include <QJsonArray>
#include <QLocale>

namespace tessera::ui {

namespace {

QStringList headers(std::initializer_list<const char*> names)
{
    QStringList list;
    for (const auto* name : names)
        list.append(QString::fromUtf8(name));
    return list;
}

QString time(std::int64_t ms)
{
    return ms > 0 ? QDateTime::fromMSecsSinceEpoch(ms).toString(QStringLiteral("yyyy-MM-dd HH:mm:ss")) : QString();
}

} // namespace

ResultsModel::ResultsModel(QObject* parent)
    : KeyedTableModel(headers({ "Job", "Round", "Shard", "State", "Paid", "Updated", "Lifecycle", "Detail" }), parent)
{ }

void ResultsModel::setResults(const QList<core::ResultEntry>& results)
{
    QList<Row> rows;
    for (const auto& result : results) {
        QStringList steps;
        for (const auto& step : result.history)
            steps.append(core::nameOf(step.state));
        Row row;
        row.key = result.assignment;
        row.cells = { result.jobId, static_cast<qint64>(result.round), static_cast<qint64>(result.shard),
            core::nameOf(result.state), result.paid, time(result.history.isEmpty() ? 0 : result.history.last().at),
            steps.join(QStringLiteral(" → ")), result.detail };
        row.tips = { result.broker, {}, {}, {}, {}, {}, {}, result.detail };
        rows.append(row);
    }
    setRows(rows);
}

DevicesModel::DevicesModel(QObject* parent)
    : KeyedTableModel(
        headers({ "Device", "Kind", "Usable", "Why not", "Memory", "Benchmark", "Load", "Temperature", "Power", "Use it" }),
        parent)
{ }

QString DevicesModel::deviceId(const core::DeviceInfo& device)
{
    return core::deviceIdOf(device);
}

void DevicesModel::setDevices(
    const QList<core::DeviceInfo>& devices, const QHash<QString, Benchmark>& benchmarks, const QSet<QString>& disabled)
{
    m_list = devices;
    m_benchmarks = benchmarks;
    m_disabled = disabled;
    rebuild();
}

void DevicesModel::setReadings(const QHash<QString, Reading>& readings)
{
    m_readings = readings;
    rebuild();
}

void DevicesModel::rebuild()
{
    m_usable.clear();
    QList<Row> rows;
    for (const auto& device : m_list) {
        const QString id = deviceId(device);
        if (device.usable)
            m_usable.insert(id);
        QString benchmark;
        if (const auto it = m_benchmarks.constFind(id); it != m_benchmarks.constEnd()) {
            // What was measured (the first-start benchmark measures the mlp only).
            QStringList measured;
            if (it->mlpSamplesPerSecond > 0.0)
                measured << QStringLiteral("mlp ") + formatRate(it->mlpSamplesPerSecond, QStringLiteral("samples"));
            if (it->cnnSamplesPerSecond > 0.0)
                measured << QStringLiteral("cnn ") + formatRate(it->cnnSamplesPerSecond, QStringLiteral("samples"));
            if (it->gflops > 0.0)
                measured << QStringLiteral("%1 GFLOPS").arg(it->gflops, 0, 'f', 1);
            benchmark = measured.join(QStringLiteral(", "));
        }
        const Reading reading = m_readings.value(id);
        const QString unknown = QStringLiteral("\u2014"); // an em dash: no sensor to read
        Row row;
        row.key = id;
        row.cells = { device.name, core::nameOf(device.kind), device.usable ? QStringLiteral("yes") : QStringLiteral("no"),
            device.unusableReason, device.memoryBytes > 0 ? formatBytes(device.memoryBytes) : QString(),
            benchmark.isEmpty() ? QStringLiteral("not measured") : benchmark,
            reading.loadPercent ? QStringLiteral("%1%").arg(*reading.loadPercent) : unknown,
            reading.temperatureC ? QStringLiteral("%1 \u00b0C").arg(*reading.temperatureC, 0, 'f', 0) : unknown,
            reading.watts ? QStringLiteral("%1%2 W")
                                .arg(reading.wattsEstimated ? QStringLiteral("~") : QString())
                                .arg(*reading.watts, 0, 'f', 0)
                          : unknown,
            !m_disabled.contains(id) && device.usable };
        row.tips
            = { QStringLiteral("%1 %2, %3 cores").arg(device.vendor, device.features.join(u' '), QString::number(device.cores)),
                  {}, {}, {}, {}, {}, QStringLiteral("The share of time Tessera computes on it"),
                  reading.temperatureC ? QStringLiteral("Read from %1").arg(reading.temperatureSource)
                                       : QStringLiteral("No temperature sensor is readable for this device"),
                  reading.watts
                      ? (reading.wattsEstimated ? QStringLiteral("Estimated from the threads in use: no power meter is readable")
                                                : QStringLiteral("Measured"))
                      : QStringLiteral("No power meter is readable for this device") };
        rows.append(row);
    }
    setRows(rows);
}

Qt::ItemFlags DevicesModel::flags(const QModelIndex& index) const
{
    auto flags = KeyedTableModel::flags(index);
    if (index.isValid() && index.column() == int(Column::Enabled) && m_usable.contains(rowAt(index.row()).key))
        flags |= Qt::ItemIsUserCheckable | Qt::ItemIsEnabled;
    return flags;
}

QVariant DevicesModel::data(const QModelIndex& index, int role) const
{
    if (index.isValid() && index.column() == int(Column::Enabled)) {
        const QString id = rowAt(index.row()).key;
        if (role == Qt::CheckStateRole)
            return m_usable.contains(id) && !m_disabled.contains(id) ? Qt::Checked : Qt::Unchecked;
        if (role == Qt::DisplayRole)
            return {};
    }
    return KeyedTableModel::data(index, role);
}

bool DevicesModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    if (!index.isValid() || index.column() != int(Column::Enabled) || role != Qt::CheckStateRole)
        return false;
    const QString id = rowAt(index.row()).key;
    if (!m_usable.contains(id))
        return false;
    const bool enabled = value.toInt() == Qt::Checked;
    if (enabled)
        m_disabled.remove(id);
    else
        m_disabled.insert(id);
    Q_EMIT dataChanged(index, index, { Qt::CheckStateRole });
    Q_EMIT enabledChanged(id, enabled);
    return true;
}

JobsModel::JobsModel(QObject* parent)
    : KeyedTableModel(headers({ "Job", "State", "Progress", "Test accuracy / perplexity", "Escrow", "Id" }), parent)
{ }

void JobsModel::setJobs(const QList<core::broker::JobStatus>& jobs)
{
    QList<Row> rows;
    for (const auto& job : jobs) {
        Row row;
        row.key = job.id;
        // An inference job's progress is its shards, and it has a figure once finished (classify:
        // the accuracy against the labels; score: the perplexity); generate has none.
        // A served job's is its replicas up and the requests it answered.
        const bool inference = !job.inference.isEmpty();
        const bool figure = !job.history.isEmpty() && job.inference != u"generate";
        const auto& serving = job.serving;
        const QString progress = job.inference == u"serve" ? QStringLiteral("%1 / %2 replicas, %3 answered")
                                                                 .arg(serving.value(QStringLiteral("replicas")).toInteger())
                                                                 .arg(job.shards)
                                                                 .arg(serving.value(QStringLiteral("answered")).toInteger())
            : inference ? QStringLiteral("%1 / %2 shards").arg(QString::number(job.shardsDone), QString::number(job.shards))
                        : QStringLiteral("%1 / %2 rounds").arg(QString::number(job.round), QString::number(job.rounds));
        row.cells = { job.name, core::broker::nameOf(job.state), progress,
            !figure                 ? QString()
                : job.languageModel ? QStringLiteral("perplexity %1").arg(std::exp(job.history.last().testLoss), 0, 'f', 2)
                                    : QStringLiteral("%1%").arg(job.history.last().testAccuracy * 100.0, 0, 'f', 2),
            job.escrow.toString(), row.key };
        row.tips = { {}, job.failure };
        rows.append(row);
    }
    setRows(rows);
}

StakeEventsModel::StakeEventsModel(QObject* parent)
    : KeyedTableModel(headers({ "Time", "Event", "Credits", "Detail" }), parent)
{ }

void StakeEventsModel::setEvents(const QList<Event>& events)
{
    QList<Row> rows;
    for (const auto& event : events)
        rows.append(
            { event.key, { event.at.toString(QStringLiteral("yyyy-MM-dd HH:mm")), event.event, event.amount, event.detail },
                { {}, {}, {}, event.detail } });
    setRows(rows);
}

LogModel::LogModel(QObject* parent, int capacity)
    : KeyedTableModel(headers({ "Time", "Level", "Source", "Message" }), parent)
    , m_capacity(capacity)
{ }

void LogModel::append(const QDateTime& at, const QString& level, const QString& source, const QString& message)
{
    Row row;
    row.key = QString::number(m_next++);
    row.cells = { at.toString(QStringLiteral("HH:mm:ss")), level, source, message };
    row.tips = { at.toString(Qt::ISODate), {}, {}, message };
    m_entries.append(row);
    while (m_entries.size() > m_capacity)
        m_entries.removeFirst();
    setRows(m_entries);
}

} // namespace tessera::ui
