#pragma once

#include "credits.h"
#include "error.h"
#include "hash.h"
#include "inference/inferencespec.h"
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
    QString zoo; // "mlp", "cnn" or "gpt" when source is Zoo
    QList<std::int64_t> hidden; // widths of the fully connected hidden layers
    QList<std::int64_t> channels; // cnn: output channels of the two conv blocks
    double dropout = 0.0;
    // gpt (docs/JOBS.md, "Language models"): a decoder-only transformer over tokens.
    std::int64_t layers = 0;
    std::int64_t heads = 0;
    std::int64_t width = 0; // the embedding width, a multiple of heads
    std::int64_t context = 0; // the most positions it reads; 0 for models that read no sequences
    std::int64_t vocabulary = 0; // 0: the dataset's (256 for the built-in text)
    bool tied = true; // the output head shares the token embedding's weights
    Digest scriptSha256; // TorchScript: content address in the broker's blob store
    QString scriptFile; // TorchScript: local path, only until tessera-job uploads it
    // Fine-tuning: a state dict (torch.save) the job starts from instead of a fresh initialisation
    // (zoo) or the script's own weights (TorchScript); names and shapes must be the model's.
    Digest initialWeightsSha256;
    QString initialWeightsFile; // local path, only until tessera-job uploads it

    static QStringList zooNames();
    bool operator==(const ModelSpec&) const = default;
};

// The data a job trains on: a built-in set (Fashion-MNIST images, or the fortunes text as bytes)
// or a tensor file saved by PyTorch (torch.save({"x": X, "y": Y}) of samples and class labels, or
// torch.save({"tokens": T}) of token windows, docs/JOBS.md).
struct DatasetSpec {
    enum class Source { Builtin, Tensors, Chunks };

    Source source = Source::Builtin;
    QString builtin; // "fashion-mnist" or "fortunes"
    Digest trainSha256; // Tensors: training file
    QString trainFile;
    Digest testSha256; // Tensors: optional held-out file; Chunks: the required one
    QString testFile;
    Digest manifestSha256; // Chunks: the manifest (core/datasetchunks.h) of the training chunks
    QString manifestFile;
    std::int64_t trainSamples = 0;

    static QStringList builtinNames();
    // Number of training samples, known for built-ins and declared for tensor files. A text
    // corpus is cut into windows of `context` tokens (docs/DETERMINISM.md, "Text"), so its count
    // depends on the model's context.
    std::int64_t trainSampleCount(std::int64_t context = 0) const;
    // Whether the data is tokens for a language model (a text corpus or a tokens file).
    bool isText() const;
    bool operator==(const DatasetSpec&) const = default;
};

// Forgets the local file names a job file may give (model.torchscript.file, model.initialWeights.file,
// dataset.*.trainFile, testFile, manifestFile): what crosses the wire names files by their SHA-256
// only, so no path a job owner (or a broker) writes is ever opened on another machine.
void forgetLocalFiles(ModelSpec& model, DatasetSpec& dataset);
// The same for a whole job, an inference job's prompts file (inference.prompts.file) too: an error
// when the prompts were named only by a file, which must be uploaded first (sha256).
Status forgetLocalFiles(struct JobSpec& spec);

// The learning rate across the whole job, by global step t = round x localSteps + step (step
// 0-based within the shard): constant, or linear warmup then cosine decay to minLr at totalSteps.
struct ScheduleSpec {
    enum class Kind { Constant, Cosine };

    Kind kind = Kind::Constant;
    std::int64_t warmupSteps = 0;
    std::int64_t totalSteps = 0; // 0: rounds x localSteps, filled in when a job is read
    double minLr = 0.0;

    bool operator==(const ScheduleSpec&) const = default;
};

struct OptimizerSpec {
    enum class Kind { Sgd, Adam, AdamW };

    Kind kind = Kind::Sgd;
    double lr = 0.05;
    double momentum = 0.0; // sgd
    bool nesterov = false; // sgd
    double beta1 = 0.9; // adam, adamw
    double beta2 = 0.999; // adam, adamw
    double eps = 1e-8; // adam, adamw
    double weightDecay = 0.0; // L2 in the gradient (sgd, adam); decoupled (adamw)
    double clipNorm = 0.0; // gradients scaled to at most this global L2 norm; 0: not clipped
    ScheduleSpec schedule;

    // The learning rate at global step t (docs/DETERMINISM.md, "Steps"), in double.
    double learningRateAt(std::int64_t t) const;
    bool isAdam() const { return kind != Kind::Sgd; }
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
    // Fast: LibTorch and its BLAS, bit-identical between machines of one runtime profile. Portable:
    // Tessera's own kernels (compute/portable), the same bits on every CPU and thread count, so that
    // any node can verify any other (docs/DETERMINISM.md, "Portable kernels"); the zoo mlp so far.
    enum class Determinism { Fast, Portable };
    Determinism determinism = Determinism::Fast;
    // k: the broker keeps every k-th round's weights (rounds k-1, 2k-1, ...) for the owner beside the
    // newest few it always keeps; 0: only those (docs/BROKER.md, "Disk").
    std::int64_t keepWeightsEvery = 0;
    // e: the broker evaluates every e-th round's weights on the test set (rounds e-1, 2e-1, ...) and
    // always the last round's, like nanoGPT's eval_interval; 1 (absent): every round.
    std::int64_t evaluateEvery = 1;
    // Layers on different nodes (docs/JOBS.md, "Pipeline stages"): the zoo gpt cut into `stages`
    // of consecutive blocks, each step's batch run as `microBatches` equal micro-batches whose
    // gradients are averaged. 1 and 1 (absent): a shard is the whole model on one node.
    struct Pipeline {
        static constexpr std::int64_t MaxStages = 16;
        static constexpr std::int64_t MaxMicroBatches = 1024;
        // localSteps x microBatches of a job with stages: the tensors one boundary carries each way a shard.
        static constexpr std::int64_t MaxStageTensors = 100'000;
        std::int64_t stages = 1;
        std::int64_t microBatches = 1;
        // "tensors": "int8": what crosses a boundary (activations and their gradients) travels as
        // int8 with a float32 scale per position (docs/DETERMINISM.md, "Pipeline stages"); absent
        // or "float32": as computed.
        bool int8Tensors = false;
        bool operator==(const Pipeline&) const = default;
    };
    Pipeline pipeline;
    bool pipelined() const { return pipeline.stages > 1 || pipeline.microBatches > 1; }
    bool evaluates(std::int64_t round) const { return round + 1 >= rounds || (round + 1) % evaluateEvery == 0; }

    bool operator==(const TrainingSpec&) const = default;
};

// What a shard reveals for aggregation (docs/DETERMINISM.md, "Revealed update"): its final weights
// (None), or their difference from the round's weights quantised to int8 with a float32 scale per
// block of 256 (Int8, about a quarter of the bytes). Commitment and verification are over this form.
enum class Compression { None, Int8 };

struct AggregationSpec {
    enum class Method { FedAvg, Nesterov };

    Method method = Method::FedAvg;
    double outerLr = 1.0;
    double outerMomentum = 0.9; // nesterov only
    Compression compression = Compression::Int8; // docs/JOBS.md: within 0.3 pt of none on the example jobs
    // What the shards' optimizer (AdamW moments, SGD momentum) starts each round from: Reset, a fresh
    // state in every shard; Averaged, the mean of the previous round's shards' final states, carried
    // in the round's weights (docs/DETERMINISM.md, "Carried optimizer state").
    enum class OptimizerState { Reset, Averaged };
    OptimizerState optimizerState = OptimizerState::Reset;

    bool operator==(const AggregationSpec&) const = default;
};

// What a job owner submits. Documented in docs/JOBS.md.
struct JobSpec {
    static constexpr int FormatVersion = 1;
    // What a shard's losses and checkpoint hashes may take of its RESULT header (64 KiB at a broker).
    static constexpr std::int64_t MaxResultLossesAndHashesBytes = 60 * 1024;
    // Training (the default) or inference (docs/JOBS.md, "Inference jobs"): an inference job has
    // `inference` instead of optimizer, training and aggregation, which are filled in from it
    // (one round of ceil(inputs / samplesPerShard) shards, batches of its batchSize, no
    // compression) so that the broker schedules, prices and pays it as it does training.
    enum class Kind { Training, Inference };

    Kind kind = Kind::Training;
    QString name;
    ModelSpec model;
    DatasetSpec dataset;
    OptimizerSpec optimizer;
    TrainingSpec training;
    AggregationSpec aggregation;
    Credits budget;
    double verificationRate = 0.1; // the least share of shards re-executed by another node
    InferenceSpec inference; // kind inference only

    bool isInference() const { return kind == Kind::Inference; }
    // A pipeline job's shard is this many stage tasks (docs/PROTOCOL.md, "Stage tasks"); 1 for any
    // other job. The broker counts, hands out, pays and checks stage tasks as units: unit u of a
    // round is stage u % S of shard u / S.
    std::int64_t stagesPerShard() const { return !isInference() && training.pipeline.stages > 1 ? training.pipeline.stages : 1; }
    std::int64_t unitsPerRound() const { return training.shardsPerRound * stagesPerShard(); }
    // An inference job's inputs: the samples of its split, or its prompts.
    std::int64_t inferenceInputs() const;

    // Reads and validates; the error names the field ("training.batchSize") and says why.
    static Result<JobSpec> fromJson(const QJsonObject& json);
    static Result<JobSpec> fromJsonText(const QByteArray& text);
    QJsonObject toJson() const;

    // Rules that span fields (batch size against the shard size, and so on).
    Status validate() const;
    Status validateInference() const;
    Status validatePipeline() const;
    Status validateResultSize() const; // a shard's losses and checkpoint hashes fit in its RESULT
    Status validateModel() const;

    // Samples in each shard's slice of a round's permutation (the last shard may have more).
    std::int64_t samplesPerShard() const;
    std::int64_t trainSamples() const { return dataset.trainSampleCount(model.context); }
    // How round `round` is aggregated: the job's aggregation, except that the last round carries no
    // optimizer state on (the job's weights are the model's alone).
    AggregationSpec aggregationOfRound(std::int64_t round) const;

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

// The names job files and tasks use.
template<> struct EnumNames<JobSpec::Kind> {
    static constexpr std::array names { "training", "inference" };
};
template<> struct EnumNames<Compression> {
    static constexpr std::array names { "none", "int8" };
};
template<> struct EnumNames<ScheduleSpec::Kind> {
    static constexpr std::array names { "constant", "cosine" };
};
template<> struct EnumNames<OptimizerSpec::Kind> {
    static constexpr std::array names { "sgd", "adam", "adamw" };
};
template<> struct EnumNames<TrainingSpec::Determinism> {
    static constexpr std::array names { "fast", "portable" };
};
template<> struct EnumNames<AggregationSpec::Method> {
    static constexpr std::array names { "fedavg", "nesterov" };
};
template<> struct EnumNames<AggregationSpec::OptimizerState> {
    static constexpr std::array names { "reset", "averaged" };
};

} // namespace tessera::core

Q_DECLARE_METATYPE(tessera::core::JobSpec)
