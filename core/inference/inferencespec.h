#pragma once

#include "../enumnames.h"
#include "../hash.h"
#include "../jsonreader.h"

#include <QByteArray>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <cstdint>

namespace tessera::core {

// What an inference job asks of each input (docs/JOBS.md, "Inference jobs"): the part of a job
// file, and of each of its shard tasks, under "inference".
struct InferenceSpec {
    enum class Task { Classify, Generate, Score, Serve };
    enum class Split { Test, Train };
    // fast: LibTorch, lines equal between nodes of one runtime profile; portable: Tessera's own
    // kernels, the same lines on every CPU (docs/DETERMINISM.md, "Inference in portable mode").
    enum class Determinism { Fast, Portable };

    static constexpr std::int64_t MaxBatch = 4096;
    static constexpr std::int64_t MaxSamplesPerShard = 100000;
    static constexpr std::int64_t MaxTokens = 4096;
    static constexpr std::int64_t MaxPrompts = 10'000'000;
    static constexpr qsizetype MaxStops = 4;
    static constexpr qsizetype MaxStopBytes = 32;
    static constexpr qsizetype MaxPromptBytes = 4096; // of the one `text` prompt (it travels in every task)
    // Batches (generate: prompts) a shard: its chain travels in RESULT's header.
    static constexpr std::int64_t MaxStepsPerShard = 500;
    static constexpr qint64 MaxPromptsFileBytes = qint64(64) << 20;
    static constexpr qint64 MaxResultBytes = qint64(1) << 30; // a job's assembled lines, as fetched

    Task task = Task::Classify;
    Split split = Split::Test; // classify, score: which part of the dataset is the inputs
    std::int64_t batchSize = 0; // inputs per forward pass (generate: 1)
    std::int64_t samplesPerShard = 0; // a multiple of batchSize
    std::int64_t threads = 1;
    // generate: `promptCount` copies of promptText, or the lines of a file (by sha256 once uploaded)
    QByteArray promptText;
    Digest promptsSha256;
    QString promptsFile; // local path, only until tessera-job uploads it
    std::int64_t promptCount = 0;
    std::int64_t maxTokens = 100;
    double temperature = 0.8;
    std::int64_t seed = 0;
    QList<QByteArray> stop;
    // serve (docs/JOBS.md, "Served models"): nodes that hold the model, for how long, and the share
    // of answers re-executed by a second replica
    static constexpr std::int64_t MaxReplicas = 16;
    static constexpr std::int64_t MaxServeSeconds = 7 * 24 * 3600;
    std::int64_t replicas = 0;
    std::int64_t seconds = 0;
    double checkShare = 0.0;
    Determinism determinism = Determinism::Fast;

    bool serves() const { return task == Task::Serve; }
    bool portable() const { return determinism == Determinism::Portable; }
    bool promptsInFile() const { return !promptsSha256.isNull() || !promptsFile.isEmpty(); }
    bool operator==(const InferenceSpec&) const = default;
};

// Reads "inference" of a job file (defaults filled in: docs/JOBS.md) or of a task.
InferenceSpec readInferenceSpec(JsonReader reader);
QJsonObject inferenceSpecToJson(const InferenceSpec& spec);

template<> struct EnumNames<InferenceSpec::Task> {
    static constexpr std::array names { "classify", "generate", "score", "serve" };
};
template<> struct EnumNames<InferenceSpec::Determinism> {
    static constexpr std::array names { "fast", "portable" };
};
template<> struct EnumNames<InferenceSpec::Split> {
    static constexpr std::array names { "test", "train" };
};

} // namespace tessera::core
