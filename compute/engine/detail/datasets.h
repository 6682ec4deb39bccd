#pragma once

// Private to compute/: includes torch.

#include <compute/common/environment.h>

#include <core/datasetchunks.h>
#include <core/error.h>
#include <core/jobspec.h>
#include <core/shardtask.h>

#include <ATen/core/Tensor.h>

#include <QHash>
#include <QList>

#include <memory>
#include <optional>
#include <vector>

namespace tessera::compute::detail {

// Samples as one tensor [N, ...] and labels as int64 [N], in memory; for a language model,
// token windows: inputs int64 [N, L] and targets int64 [N, L] (the inputs shifted by one). Built-in image data stays in
// its uint8 form (a quarter of float32) and each batch is scaled and normalised as it is taken,
// with the same float32 operations as on the whole set, so the bits of every batch are the same.
struct Dataset {
    at::Tensor x; // float32, or uint8 when `normalised`
    at::Tensor y;
    std::int64_t classes = 0;
    struct Normalisation {
        double mean = 0.0;
        double std = 1.0;
    };
    std::optional<Normalisation> normalised; // x is uint8 pixels: a batch is (x / 255 - mean) / std

    std::int64_t size() const { return y.size(0); }
    std::vector<std::int64_t> sampleShape() const;
    // The samples at `index` (int64 [B]), or in [begin, end), as float32. portable: pixels are
    // normalised by compute/portable (the same bits on every CPU) instead of LibTorch.
    at::Tensor samples(const at::Tensor& index, bool portable = false) const;
    at::Tensor slice(std::int64_t begin, std::int64_t end, bool portable = false) const;

private:
    at::Tensor toFloat(const at::Tensor& raw) const;
};

// Where the chunks of a chunked dataset that were loaded sit in its training set: the set holds
// only the chunks a task reads, one after the other in the manifest's order.
struct ChunkRows {
    QList<std::int64_t> chunkSamples; // of every chunk of the manifest
    QList<core::Digest> digests; // of every chunk of the manifest
    QHash<qsizetype, std::int64_t> start; // chunk index: its first row in the training set

    std::int64_t sampleCount() const;
};

struct DatasetSplits {
    std::shared_ptr<const Dataset> train;
    std::shared_ptr<const Dataset> test; // may be null for a tensor dataset without a test file
    std::shared_ptr<const ChunkRows> chunked; // a chunked dataset; null for the others

    // N, the training samples the data order permutes: the whole corpus of a chunked dataset.
    std::int64_t trainSampleCount() const { return chunked ? chunked->sampleCount() : train->size(); }
};

// Loads (once per process; later calls share the tensors) the data a job names. context: the
// model's, which a text corpus is cut into windows of (0 for models that read no sequences).
// chunks: of a chunked dataset, the ones to load (a task's dataChunks); without them its
// training set is empty but has the manifest's sample shape and classes.
core::Result<DatasetSplits> loadDataset(const core::DatasetSpec& spec, const ComputeEnvironment& environment,
    std::int64_t context = 0, const QList<core::Digest>& chunks = {});
// A chunked dataset's manifest, from the blob store or (before upload) its file.
core::Result<core::DatasetManifest> readManifest(const core::DatasetSpec& spec, const ComputeEnvironment& environment);
// The data of a task: its dataset with the chunks it reads.
inline core::Result<DatasetSplits> loadTaskData(const core::ShardTask& task, const ComputeEnvironment& environment)
{
    return loadDataset(task.dataset, environment, task.model.context, task.dataChunks);
}

// Fashion-MNIST from its four gzip IDX files, scaled to [0, 1] and normalised with the training
// set's mean and standard deviation (0.2860, 0.3530), shape [N, 1, 28, 28].
core::Result<DatasetSplits> loadFashionMnist(const QString& directory);
// Its sample shape and classes, known without loading it.
inline const std::vector<std::int64_t> FashionMnistSampleShape { 1, 28, 28 };
inline constexpr std::int64_t FashionMnistClasses = 10;

// A file written by torch.save({"x": X, "y": Y}), or torch.save({"tokens": T}) with T integer
// [N, L+1] (inputs T[:, :-1], targets T[:, 1:]).
core::Result<std::shared_ptr<const Dataset>> loadTensorFile(const QString& path, std::int64_t classes = 0);

// The fortunes text (Debian's fortunes, pinned by its SHA-256) as bytes: split into fortunes,
// every 20th to the test stream, each stream cut into windows of context + 1 bytes with stride
// context (docs/DETERMINISM.md, "Text"). Vocabulary 256.
core::Result<DatasetSplits> loadFortunes(const QString& directory, std::int64_t context);
// The two streams themselves (train, test), for tests and for sampling prompts.
core::Result<std::pair<QByteArray, QByteArray>> fortunesStreams(const QString& directory);
inline constexpr std::int64_t ByteVocabulary = 256;

} // namespace tessera::compute::detail
