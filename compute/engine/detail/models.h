#pragma once

// Private to compute/: includes torch.

#include "tensors.h"
#include <compute/common/environment.h>

#include <core/error.h>
#include <core/jobspec.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
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
    // Copies values into the model's own tensors; names and shapes (with sameDtype, dtypes too)
    // must match exactly, and the error names the first tensor that does not, `what` being where
    // the values come from ("the weights").
    core::Status loadState(
        const NamedTensors& values, const QString& what = QStringLiteral("the weights"), bool sameDtype = false);

    // Incremental decoding with a KV cache (the zoo gpt; docs/DETERMINISM.md, "Inference"): the
    // logits [vocabulary] of the last of `tokens` (int64 [1, n]) at positions start .. start+n-1,
    // attending to the keys and values of positions 0 .. start-1 kept in `cache` from earlier
    // calls, which this call extends. A model without one returns an undefined tensor.
    struct KvCache {
        std::vector<std::pair<at::Tensor, at::Tensor>> layers; // keys, values [1, heads, positions, head width]
    };
    virtual at::Tensor decode(const at::Tensor& tokens, std::int64_t start, KvCache& cache)
    {
        (void)tokens;
        (void)start;
        (void)cache;
        return {};
    }
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

// The zoo gpt (docs/JOBS.md, "Language models"): a decoder-only transformer with nanoGPT's
// layer names (transformer.wte, transformer.wpe, transformer.h.N.{ln_1, attn.c_attn, attn.c_proj,
// ln_2, mlp.c_fc, mlp.c_proj}, transformer.ln_f, lm_head unless tied), so that a PyTorch user's
// GPT loads its state dict. forward: tokens int64 [B, L] -> logits [B, L, vocabulary].
struct CausalSelfAttentionImpl : torch::nn::Module {
    CausalSelfAttentionImpl(std::int64_t width, std::int64_t heads, double dropout);
    at::Tensor forward(const at::Tensor& x);
    // x: the new positions [1, n, width], from position `start`; keys and values extend `cache`.
    at::Tensor decode(const at::Tensor& x, std::int64_t start, std::pair<at::Tensor, at::Tensor>& cache);
    torch::nn::Linear c_attn { nullptr };
    torch::nn::Linear c_proj { nullptr };
    torch::nn::Dropout attn_dropout { nullptr };
    torch::nn::Dropout resid_dropout { nullptr };
    std::int64_t heads = 1;
};
TORCH_MODULE(CausalSelfAttention);

struct FeedForwardImpl : torch::nn::Module {
    FeedForwardImpl(std::int64_t width, double dropout);
    at::Tensor forward(const at::Tensor& x);
    torch::nn::Linear c_fc { nullptr };
    torch::nn::Linear c_proj { nullptr };
    torch::nn::Dropout dropout { nullptr };
};
TORCH_MODULE(FeedForward);

struct BlockImpl : torch::nn::Module {
    BlockImpl(std::int64_t width, std::int64_t heads, double dropout);
    at::Tensor forward(at::Tensor x);
    torch::nn::LayerNorm ln_1 { nullptr };
    CausalSelfAttention attn { nullptr };
    torch::nn::LayerNorm ln_2 { nullptr };
    FeedForward mlp { nullptr };
};
TORCH_MODULE(Block);

struct GptBodyImpl : torch::nn::Module {
    GptBodyImpl(const core::ModelSpec& spec, std::int64_t vocabulary);
    torch::nn::Embedding wte { nullptr };
    torch::nn::Embedding wpe { nullptr };
    torch::nn::Dropout drop { nullptr };
    std::vector<Block> h;
    torch::nn::LayerNorm ln_f { nullptr };
};
TORCH_MODULE(GptBody);

struct GptImpl : torch::nn::Module {
    GptImpl(const core::ModelSpec& spec, std::int64_t vocabulary);
    at::Tensor forward(const at::Tensor& tokens);
    at::Tensor decode(const at::Tensor& tokens, std::int64_t start, Model::KvCache& cache);
    GptBody transformer { nullptr };
    torch::nn::Linear lm_head { nullptr }; // null when tied to transformer.wte
    std::int64_t context = 0;
};
TORCH_MODULE(Gpt);

// Cross-entropy of class scores [B, C] against labels [B], or of token logits [B, L, V] against
// targets [B, L] (averaged over tokens for Mean); an error (thrown) for other shapes.
at::Tensor lossOf(const at::Tensor& logits, const at::Tensor& targets, at::Reduction::Reduction reduction = at::Reduction::Mean);
// How many of those predictions (samples or tokens) are right at top 1.
std::int64_t correctOf(const at::Tensor& logits, const at::Tensor& targets);

// Builds the model a spec names for samples of this shape and this many classes. Zoo models are
// initialised from initSeed; TorchScript models keep the weights stored in their file.
core::Result<std::unique_ptr<Model>> buildModel(const core::ModelSpec& spec, const std::vector<std::int64_t>& sampleShape,
    std::int64_t classes, std::uint64_t initSeed, const ComputeEnvironment& environment);

// A TorchScript module that computes the same function as a zoo model with these weights
// (inference only), for job owners who want to run the trained model without Tessera.
// The device a ComputeEnvironment names ("", "cpu", "cuda", "cuda:N"), checked against this LibTorch.
core::Result<c10::Device> resolveDevice(const QString& name);
// A tensor's sizes as an error names them: "[4, 32]".
QString shapeOf(const at::Tensor& tensor);
// How the runtime profile names a device: "cpu", or "cuda:sm" and its compute capability.
QString deviceProfileName(const c10::Device& device);

core::Result<torch::jit::Module> zooToTorchScript(const core::ModelSpec& spec, const NamedTensors& state);

} // namespace tessera::compute::detail
