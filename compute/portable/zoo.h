#pragma once

// The programs of one training step of the zoo's models (program.h), built from plain numbers:
// the model's sizes, the optimizer and what is particular to the step. Parameter names are the
// zoo's (compute/engine/detail/models.h), so that the program's state is the trainer's training state.

#include "program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::compute::portable {

struct OptimizerSettings {
    enum class Kind { Sgd, Adam, AdamW };
    Kind kind = Kind::Sgd;
    double momentum = 0.0;
    double weightDecay = 0.0;
    bool nesterov = false;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double clipNorm = 0.0; // 0: no clipping
};

struct StepSettings {
    double learningRate = 0.0; // this step's, from the job's schedule
    // Whether the optimizer's buffers (momentum, Adam's moments) exist at the step's start: from
    // a shard's second step on, or from the first when the round's weights carry them.
    bool buffersBefore = false;
    // The step's seed (docs/DETERMINISM.md, "Seeds"): dropout layer l draws from the stream that
    // starts at splitMix(seed, l) (kernels.h), l counted from 0 in the forward order.
    std::uint64_t seed = 0;
};

// The zoo mlp: fc0 .. fcN linear layers with ReLU (then dropout, with a rate above 0) between
// them, cross-entropy on the last. The samples arrive flattened: x [batch, inputs].
Program mlpStep(std::int64_t batch, std::int64_t inputs, const std::vector<std::int64_t>& hidden, std::int64_t classes,
    double dropout, const OptimizerSettings& optimizer, const StepSettings& step);

// The zoo cnn: conv1, conv2 (3x3, padding 1, each with ReLU and 2x2 max pooling), fc0 with ReLU
// and dropout, fc1; the samples arrive as [batch, channels, height, width]. Inside, images are
// channels-last ([batch, height, width, channels]) until the feature map is flattened in
// PyTorch's order for fc0.
Program cnnStep(std::int64_t batch, std::int64_t channels, std::int64_t height, std::int64_t width,
    const std::vector<std::int64_t>& convChannels, std::int64_t hidden, std::int64_t classes, double dropout,
    const OptimizerSettings& optimizer, const StepSettings& step);

// The zoo gpt without dropout (nanoGPT's layout and names, pre-LayerNorm blocks of causal
// self-attention and a GELU feed-forward, the head tied to the token embedding unless `tied` is
// false): tokens [batch, length] in, cross-entropy per token against targets [batch, length].
Program gptStep(std::int64_t batch, std::int64_t length, std::int64_t vocabulary, std::int64_t layers, std::int64_t heads,
    std::int64_t width, std::int64_t context, bool tied, const OptimizerSettings& optimizer, const StepSettings& step);

// A model's forward pass alone (inference: docs/DETERMINISM.md, "Inference in portable mode"): the
// instructions of its training step (built without dropout) before the step's CrossEntropy, which
// read the batch and the model's parameters and write the logits. stateBefore keeps the
// parameters, stateAfter is empty; `logits` is the value the CrossEntropy would have read.
struct Forward {
    Program program;
    int logits = -1;
};
Forward forwardOf(const Program& step);

// The optimizer's part of every program (shared by the models): given the model's parameters and
// their gradients, the clipping and the updates, and the state before and after in name order.
class StepBuilder {
public:
    StepBuilder(Program& program, const OptimizerSettings& optimizer, const StepSettings& step);
    // A parameter of the model ("fc0.weight"), as a state value "model/<name>".
    int parameter(const std::string& name, std::vector<std::int64_t> shape);
    int temporary(const std::string& name, std::vector<std::int64_t> shape, DType dtype = DType::Float32);
    int add(Op op, std::vector<int> inputs, std::vector<int> outputs, const std::string& label, std::vector<double> reals = {},
        std::vector<std::int64_t> integers = {});
    // Declares a parameter's gradient (any order); finish() adds the optimizer's instructions.
    void gradient(int parameter, int gradient);
    void finish();

private:
    Program& m_program;
    OptimizerSettings m_optimizer;
    StepSettings m_step;
    std::vector<std::pair<int, int>> m_parameters; // parameter value, gradient value
};

} // namespace tessera::compute::portable
