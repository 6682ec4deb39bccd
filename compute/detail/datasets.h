#pragma once

// Private to compute/: includes torch.

#include "../environment.h"

#include <core/error.h>
#include <core/jobspec.h>

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace tessera::compute::detail {

// Samples as one float32 tensor [N, ...] and labels as int64 [N], in memory.
struct Dataset {
    at::Tensor x;
    at::Tensor y;
    std::int64_t classes = 0;

    std::int64_t size() const { return y.size(0); }
    std::vector<std::int64_t> sampleShape() const;
};

struct DatasetSplits {
    std::shared_ptr<const Dataset> train;
    std::shared_ptr<const Dataset> test; // may be null for a tensor dataset without a test file
};

// Loads (once per process; later calls share the tensors) the data a job names.
core::Result<DatasetSplits> loadDataset(const core::DatasetSpec& spec, const ComputeEnvironment& environment);

// Fashion-MNIST from its four gzip IDX files, scaled to [0, 1] and normalised with the training
// set's mean and standard deviation (0.2860, 0.3530), shape [N, 1, 28, 28].
core::Result<DatasetSplits> loadFashionMnist(const QString& directory);
// Its sample shape and classes, known without loading it.
inline const std::vector<std::int64_t> FashionMnistSampleShape { 1, 28, 28 };
inline constexpr std::int64_t FashionMnistClasses = 10;

// A file written by torch.save({"x": X, "y": Y}).
core::Result<std::shared_ptr<const Dataset>> loadTensorFile(const QString& path, std::int64_t classes = 0);

} // namespace tessera::compute::detail
