#pragma once

#include "credits.h"
#include "error.h"
#include "hash.h"
#include "jsonreader.h"

#include <QJsonObject>
#include <QList>
#include <QMetaType>
#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::core {

// The model a job trains: a zoo model built by name, or a TorchScript file exported by PyTorch.
struct ModelSpec {
    enum class Source { Zoo, TorchScript };

    Source source = Source::Zoo;
    QString zoo; // "mlp" or "cnn" when source is Zoo
    QList<std::int64_t> hidden; // widths of the fully connected hidden layers
    QList<std::int64_t> channels; // cnn: output channels of the two conv blocks
    double dropout = 0.0;
    Digest scriptSha256; // TorchScript: content address in the broker's blob store
    QString scriptFile; // TorchScript: local path, only until tessera-job uploads it

    static QStringList zooNames();
    bool operator==(const ModelSpec&) const = default;
};

// The data a job trains on: the built-in Fashion-MNIST or a tensor file saved by PyTorch
// (torch.save({"x": X, "y": Y})).
struct DatasetSpec {
    enum class Source { Builtin, Tensors };

    Source source = Source::Builtin;
    QString builtin; // "fashion-mnist"
    Digest trainSha256; // Tensors: training file
    QString trainFile;
    Digest testSha256; // Tensors: optional held-out file
    QString testFile;
    std::int64_t trainSamples = 0;

    static QStringList builtinNames();
    // Number of training samples, known for built-ins and declared for tensor files.
    std::int64_t trainSampleCount() const;
    bool operator==(const DatasetSpec&) const = default;
};

struct OptimizerSpec {
    enum class Kind { Sgd, Adam };

    Kind kind = Kind::Sgd;
    double lr = 0.05;
    double momentum = 0.0; // sgd
    bool nesterov = false; // sgd
    double beta1 = 0.9; // adam
    double beta2 = 0.999; // adam
    double eps = 1e-8; // adam
    double weightDecay = 0.0;

    bool operator==(const OptimizerSpec&) const = default;
};

struct TrainingSpec {
    std::int64_t rounds = 1;
    std::int64_t shardsPerRound = 1;
    std::int64_t localSteps = 1; // H: optimizer steps per shard
    std::int64_t batchSize = 64;
    std::int64_t seed = 0;
    std::int64_t threads = 1; // fixed per shard: bitwise reproducibility depends on it
    std::int64_t checkpointInterval = 1; // c: a checkpoint hash every c steps

    bool operator==(const TrainingSpec&) const = default;
};

// What a shard reveals for aggregation (docs/DETERMINISM.md, "Revealed update"): its final weights
// (None), or their difference from the round's weights quantised to int8 with a float32 scale per
// block of 256 (Int8, about a quarter of the bytes). Commitment and verification are over this form.
enum class Compression { None, Int8 };
QString compressionName(Compression compression); // as in job files and tasks: none, int8
std::optional<Compression> compressionFromName(QStringView name);

struct AggregationSpec {
    enum class Method { FedAvg, Nesterov };

    Method method = Method::FedAvg;
    double outerLr = 1.0;
    double outerMomentum = 0.9; // nesterov only
    Compression compression = Compression::Int8; // docs/JOBS.md: within 0.3 pt of none on the example jobs

    bool operator==(const AggregationSpec&) const = default;
};

// What a job owner submits. Documented in docs/JOBS.md.
struct JobSpec {
    static constexpr int FormatVersion = 1;

    QString name;
    ModelSpec model;
    DatasetSpec dataset;
    OptimizerSpec optimizer;
    TrainingSpec training;
    AggregationSpec aggregation;
    Credits budget;
    double verificationRate = 0.1; // the least share of shards re-executed by another node

    // Reads and validates; the error names the field ("training.batchSize") and says why.
    static Result<JobSpec> fromJson(const QJsonObject& json);
    static Result<JobSpec> fromJsonText(const QByteArray& text);
    QJsonObject toJson() const;

    // Rules that span fields (batch size against the shard size, and so on).
    Status validate() const;

    // Samples in each shard's slice of a round's permutation (the last shard may have more).
    std::int64_t samplesPerShard() const;

    bool operator==(const JobSpec&) const = default;
};

// The pieces of a job spec, for documents that embed them (a ShardTask carries model, dataset,
// optimizer). Readers record problems in the reader; writers produce what the readers accept.
ModelSpec readModelSpec(JsonReader reader);
QJsonObject modelSpecToJson(const ModelSpec& model);
DatasetSpec readDatasetSpec(JsonReader reader);
QJsonObject datasetSpecToJson(const DatasetSpec& dataset);
OptimizerSpec readOptimizerSpec(JsonReader reader);
QJsonObject optimizerSpecToJson(const OptimizerSpec& optimizer);
TrainingSpec readTrainingSpec(JsonReader reader);
QJsonObject trainingSpecToJson(const TrainingSpec& training);
AggregationSpec readAggregationSpec(JsonReader reader);
QJsonObject aggregationSpecToJson(const AggregationSpec& aggregation);

} // namespace tessera::core

Q_DECLARE_METATYPE(tessera::core::JobSpec)
