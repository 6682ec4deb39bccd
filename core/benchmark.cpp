#include "benchmark.h"

#include <QJsonArray>

#include <cmath>

namespace tessera::core {

std::optional<BenchmarkMeasurement> BenchmarkRecord::measurement(QStringView name) const
{
    for (const auto& m : measurements) {
        if (m.name == name)
            return m;
    }
    return std::nullopt;
}

QJsonObject BenchmarkRecord::toJson() const
{
    QJsonArray list;
    for (const auto& m : measurements) {
        list.append(QJsonObject {
            { QStringLiteral("name"), m.name },
            { QStringLiteral("value"), m.value },
            { QStringLiteral("unit"), m.unit },
            { QStringLiteral("cv"), m.cv },
            { QStringLiteral("repetitions"), m.repetitions },
        });
    }
    return QJsonObject {
        { QStringLiteral("device"), device },
        { QStringLiteral("runtimeProfile"), runtimeProfile },
        { QStringLiteral("measuredAt"), measuredAt.toString(Qt::ISODate) },
        { QStringLiteral("measurements"), list },
    };
}

Result<BenchmarkRecord> BenchmarkRecord::fromJson(const QJsonObject& json)
{
    BenchmarkRecord record;
    record.device = json.value(QStringLiteral("device")).toString();
    record.runtimeProfile = json.value(QStringLiteral("runtimeProfile")).toString();
    record.measuredAt = QDateTime::fromString(json.value(QStringLiteral("measuredAt")).toString(), Qt::ISODate).toUTC();
    if (record.device.isEmpty() || !record.measuredAt.isValid() || !json.value(QStringLiteral("measurements")).isArray())
        return Error { QStringLiteral("benchmark"), QStringLiteral("not a benchmark record") };
    for (const auto& entry : json.value(QStringLiteral("measurements")).toArray()) {
        const auto m = entry.toObject();
        record.measurements.append({ m.value(QStringLiteral("name")).toString(), m.value(QStringLiteral("value")).toDouble(),
            m.value(QStringLiteral("unit")).toString(), m.value(QStringLiteral("cv")).toDouble(),
            m.value(QStringLiteral("repetitions")).toInt() });
    }
    return record;
}

Spread spreadOf(const QList<double>& values)
{
    if (values.isEmpty())
        return {};
    double sum = 0.0;
    for (double v : values)
        sum += v;
    const double mean = sum / double(values.size());
    if (values.size() < 2 || mean == 0.0)
        return { mean, 0.0 };
    double squares = 0.0;
    for (double v : values)
        squares += (v - mean) * (v - mean);
    return { mean, std::sqrt(squares / double(values.size() - 1)) / std::fabs(mean) };
}

BenchmarkStore::BenchmarkStore(std::unique_ptr<storage::Database> database)
    : m_database(std::move(database))
{ }

Result<std::unique_ptr<BenchmarkStore>> BenchmarkStore::open(const QString& path)
{
    auto database = storage::openMigrated(path, QStringLiteral(":/migrations/node"));
    if (!database)
        return database.error();
    return std::unique_ptr<BenchmarkStore>(new BenchmarkStore(std::move(*database)));
}

Status BenchmarkStore::save(const BenchmarkRecord& record)
{
    auto transaction = m_database->begin();
    if (!transaction)
        return transaction.error().toError();
    auto run = m_database->prepare(
        QStringLiteral("INSERT INTO benchmark_runs (measured_at, device, runtime_profile) VALUES (?, ?, ?)"));
    if (!run)
        return run.error().toError();
    run->bind(1, record.measuredAt.toUTC().toString(Qt::ISODateWithMs)).bind(2, record.device).bind(3, record.runtimeProfile);
    if (auto status = run->run(); !status)
        return status.error().toError();
    const auto runId = m_database->lastInsertRowId();
    auto insert = m_database->prepare(
        QStringLiteral("INSERT INTO benchmark_measurements (run, name, value, unit, cv, repetitions) VALUES (?, ?, ?, ?, ?, ?)"));
    if (!insert)
        return insert.error().toError();
    for (const auto& m : record.measurements) {
        insert->bind(1, runId)
            .bind(2, m.name)
            .bind(3, m.value)
            .bind(4, m.unit)
            .bind(5, m.cv)
            .bind(6, std::int64_t(m.repetitions));
        if (auto status = insert->run(); !status)
            return status.error().toError();
    }
    if (auto status = transaction->commit(); !status)
        return status.error().toError();
    return {};
}

Result<std::optional<BenchmarkRecord>> BenchmarkStore::latest(const QString& device)
{
    auto run = m_database->prepare(QStringLiteral("SELECT id, measured_at, runtime_profile FROM benchmark_runs WHERE device = ? "
                                                  "ORDER BY measured_at DESC, id DESC LIMIT 1"));
    if (!run)
        return run.error().toError();
    run->bind(1, device);
    auto row = run->step();
    if (!row)
        return row.error().toError();
    if (!*row)
        return std::optional<BenchmarkRecord> {};
    BenchmarkRecord record;
    record.device = device;
    const auto runId = run->columnInt(0);
    record.measuredAt = QDateTime::fromString(run->columnText(1), Qt::ISODateWithMs);
    record.runtimeProfile = run->columnText(2);
    auto measurements = m_database->prepare(
        QStringLiteral("SELECT name, value, unit, cv, repetitions FROM benchmark_measurements WHERE run = ? ORDER BY rowid"));
    if (!measurements)
        return measurements.error().toError();
    measurements->bind(1, runId);
    for (;;) {
        auto next = measurements->step();
        if (!next)
            return next.error().toError();
        if (!*next)
            break;
        record.measurements.append({ measurements->columnText(0), measurements->columnDouble(1), measurements->columnText(2),
            measurements->columnDouble(3), int(measurements->columnInt(4)) });
    }
    return std::optional<BenchmarkRecord>(record);
}

} // namespace tessera::core
