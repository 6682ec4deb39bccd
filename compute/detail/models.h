#pragma once

// Private to compute/: includes torch.

#include "../environment.h"
#include "tensors.h"

#include <core/error.h>
#include <core/jobspec.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/script.h>

#include <memory>

namespace tessera::compute::detail {

// What the trainer needs of a model, whether built from the zoo or loaded from TorchScript.
class Model {
public:
    virtual ~Model() = default;
    virtual at::Tensor forward(const at::Tensor& input) = 0;
    // Name-sorted; the tensors alias the model's own, so training changes them.
    virtual NamedTensors parameters() = 0;
    virtual NamedTensors buffers() = 0;
    virtual void setTraining(bool training) = 0;
    virtual void to(const c10::Device& device) = 0;

    // Parameters and buffers together, name-sorted: the model's state, as hashed and shipped.
    NamedTensors state();
    // Copies values into the model's own tensors; names and shapes must match exactly.
    core::Status loadState(const NamedTensors& values);
};

struct MlpImpl : torch::nn::Module {
    MlpImpl(std::int64_t inputs, const QList<std::int64_t>& hidden, std::int64_t classes, double dropout);
    at::Tensor forward(at::Tensor x);

    std::vector<torch::nn::Linear> layers;
    torch::nn::Dropout dropout { nullptr };
};
TORCH_MODULE(Mlp);

struct CnnImpl : torch::nn::Module {
    CnnImpl(std::int64_t channels, std::int64_t height, std::int64_t width, const QList<std::int64_t>& convChannels,
        std::int64_t hidden, std::int64_t classes, double dropout);
    at::Tensor forward(at::Tensor x);

    torch::nn::Conv2d conv1 { nullptr };
    torch::nn::Conv2d conv2 { nullptr };
    torch::nn::Linear fc0 { nullptr };
    torch::nn::Linear fc1 { nullptr };
    torch::nn::Dropout dropout { nullptr };
};
TORCH_MODULE(Cnn);

// Builds the model a spec names for samples of this shape and this many classes. Zoo models are
// initialised from initSeed; TorchScript models keep the weights stored in their file.
core::Result<std::unique_ptr<Model>> buildModel(const core::ModelSpec& spec, const std::vector<std::int64_t>& sampleShape,
    std::int64_t classes, std::uint64_t initSeed, const ComputeEnvironment& environment);

// A TorchScript module that computes the same function as a zoo model with these weights
// (inference only), for job owners who want to run the trained model without Tessera.
// The device a ComputeEnvironment names ("", "cpu", "cuda", "cuda:N"), checked against this LibTorch.
core::Result<c10::Device> resolveDevice(const QString& name);
// How the runtime profile names a device: "cpu", or "cuda:sm" and its compute capability.
QString deviceProfileName(const c10::Device& device);

core::Result<torch::jit::Module> zooToTorchScript(const core::ModelSpec& spec, const NamedTensors& state);

} // namespace tessera::compute::detail
