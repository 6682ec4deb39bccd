#include "tablemodels.h"

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

void ResultsModel::setResults(const QList<QJsonObject>& results)
{
    QList<Row> rows;
    for (const auto& result : results) {
        QStringList steps;
        std::int64_t updated = 0;
        for (const auto& step : result.value(QStringLiteral("history")).toArray()) {
            steps.append(step.toObject().value(QStringLiteral("state")).toString());
            updated = step.toObject().value(QStringLiteral("at")).toInteger();
        }
        Row row;
        row.key = result.value(QStringLiteral("assignment")).toString();
        row.cells = { result.value(QStringLiteral("jobId")).toString(), result.value(QStringLiteral("round")).toInteger(),
            result.value(QStringLiteral("shard")).toInteger(), result.value(QStringLiteral("state")).toString(),
            result.value(QStringLiteral("paid")).toString(), time(updated), steps.join(QStringLiteral(" → ")),
            result.value(QStringLiteral("detail")).toString() };
        row.tips = { result.value(QStringLiteral("broker")).toString(), {}, {}, {}, {}, {}, {},
            result.value(QStringLiteral("detail")).toString() };
        rows.append(row);
    }
    setRows(rows);
}

DevicesModel::DevicesModel(QObject* parent)
    : KeyedTableModel(headers({ "Device", "Kind", "Usable", "Why not", "Memory", "Benchmark", "Use it" }), parent)
{ }

QString DevicesModel::deviceId(const core::DeviceInfo& device)
{
    return QStringLiteral("%1:%2").arg(core::DeviceInfo::kindName(device.kind)).arg(device.index);
}

void DevicesModel::setDevices(
    const QList<core::DeviceInfo>& devices, const QHash<QString, Benchmark>& benchmarks, const QSet<QString>& disabled)
{
    m_disabled = disabled;
    m_usable.clear();
    QList<Row> rows;
    for (const auto& device : devices) {
        const QString id = deviceId(device);
        if (device.usable)
            m_usable.insert(id);
        QString benchmark;
        if (const auto it = benchmarks.constFind(id); it != benchmarks.constEnd())
            benchmark = QStringLiteral("mlp %1, cnn %2, %3 GFLOPS")
                            .arg(formatRate(it->mlpSamplesPerSecond, QStringLiteral("samples/s")),
                                formatRate(it->cnnSamplesPerSecond, QStringLiteral("samples/s")))
                            .arg(it->gflops, 0, 'f', 1);
        Row row;
        row.key = id;
        row.cells = { device.name, core::DeviceInfo::kindName(device.kind),
            device.usable ? QStringLiteral("yes") : QStringLiteral("no"), device.unusableReason,
            device.memoryBytes > 0 ? formatBytes(device.memoryBytes) : QString(),
            benchmark.isEmpty() ? QStringLiteral("not measured") : benchmark, !disabled.contains(id) && device.usable };
        row.tips
            = { QStringLiteral("%1 %2, %3 cores").arg(device.vendor, device.features.join(u' '), QString::number(device.cores)) };
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
    : KeyedTableModel(headers({ "Job", "State", "Progress", "Test accuracy", "Escrow", "Id" }), parent)
{ }

void JobsModel::setJobs(const QList<QJsonObject>& jobs)
{
    QList<Row> rows;
    for (const auto& job : jobs) {
        const auto history = job.value(QStringLiteral("history")).toArray();
        const double accuracy
            = history.isEmpty() ? -1.0 : history.last().toObject().value(QStringLiteral("testAccuracy")).toDouble();
        Row row;
        row.key = job.value(QStringLiteral("jobId")).toString();
        row.cells = { job.value(QStringLiteral("name")).toString(), job.value(QStringLiteral("state")).toString(),
            QStringLiteral("%1 / %2 rounds")
                .arg(job.value(QStringLiteral("round")).toInteger())
                .arg(job.value(QStringLiteral("rounds")).toInteger()),
            accuracy < 0 ? QString() : QStringLiteral("%1%").arg(accuracy * 100.0, 0, 'f', 2),
            job.value(QStringLiteral("escrow")).toString(), row.key };
        row.tips = { {}, job.value(QStringLiteral("failure")).toString() };
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
