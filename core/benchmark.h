#pragma once

#include "error.h"
#include "storage/database.h"

#include <QDateTime>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <memory>
#include <optional>

namespace tessera::core {

struct BenchmarkMeasurement {
    QString name; // "mlp", "cnn", "matmul"
    double value = 0.0; // mean over the repetitions
    QString unit; // "samples/s", "GFLOPS"
    double cv = 0.0; // coefficient of variation (standard deviation / mean)
    int repetitions = 0;

    bool operator==(const BenchmarkMeasurement&) const = default;
};

struct BenchmarkRecord {
    QString device;
    QString runtimeProfile;
    QDateTime measuredAt; // UTC
    QList<BenchmarkMeasurement> measurements;

    std::optional<BenchmarkMeasurement> measurement(QStringView name) const;
    QJsonObject toJson() const;
    // What toJson() wrote (a compute worker's benchmark, read by its supervisor).
    static Result<BenchmarkRecord> fromJson(const QJsonObject& json);
    bool operator==(const BenchmarkRecord&) const = default;
};

// Mean and coefficient of variation of repeated measurements.
struct Spread {
    double mean = 0.0;
    double cv = 0.0;
};
Spread spreadOf(const QList<double>& values);

// Benchmark history in the node's database (resources/migrations/node).
class BenchmarkStore {
public:
    // Opens (creating and migrating) the node database at path.
    static Result<std::unique_ptr<BenchmarkStore>> open(const QString& path);

    Status save(const BenchmarkRecord& record);
    // The newest record for a device, if any.
    Result<std::optional<BenchmarkRecord>> latest(const QString& device);

private:
    explicit BenchmarkStore(std::unique_ptr<storage::Database> database);
    std::unique_ptr<storage::Database> m_database;
};

} // namespace tessera::core
