#include "zoo.h"

#include <algorithm>

namespace tessera::compute::portable {

StepBuilder::StepBuilder(Program& program, const OptimizerSettings& optimizer, const StepSettings& step)
    : m_program(program)
    , m_optimizer(optimizer)
    , m_step(step)
{ }

int StepBuilder::parameter(const std::string& name, std::vector<std::int64_t> shape)
{
    const int v = m_program.add({ "model/" + name, DType::Float32, std::move(shape) });
    m_program.stateBefore.push_back(v);
    return v;
}

int StepBuilder::temporary(const std::string& name, std::vector<std::int64_t> shape, DType dtype)
{
    return m_program.add({ name, dtype, std::move(shape) });
}

int StepBuilder::add(Op op, std::vector<int> inputs, std::vector<int> outputs, const std::string& label,
    std::vector<double> reals, std::vector<std::int64_t> integers)
{
    return m_program.addInstruction({ op, std::move(inputs), std::move(outputs), std::move(reals), std::move(integers), label });
}

void StepBuilder::gradient(int parameter, int gradient)
{
    m_parameters.emplace_back(parameter, gradient);
}

void StepBuilder::finish()
{
    auto& values = m_program.values;
    auto nameOf = [&](int v) { return values[std::size_t(v)].name; };
    // Parameters in name order: the order of the clipping norm's sum and of the updates.
    std::sort(m_parameters.begin(), m_parameters.end(),
        [&](const auto& a, const auto& b) { return nameOf(a.first) < nameOf(b.first); });
    auto bare = [&](int parameter) { return nameOf(parameter).substr(std::string("model/").size()); };
    auto shapeOf = [&](int v) { return values[std::size_t(v)].shape; };

    if (m_optimizer.clipNorm > 0.0) {
        std::vector<int> gradients;
        for (const auto& [parameter, gradient] : m_parameters)
            gradients.push_back(gradient);
        const int factor = temporary("clip.factor", {});
        add(Op::ClipFactor, gradients, { factor }, "the gradients' global norm, clipped", { m_optimizer.clipNorm });
        for (auto& [parameter, gradient] : m_parameters) {
            const int clipped = temporary(nameOf(gradient) + ".clipped", shapeOf(gradient));
            add(Op::Scale, { gradient, factor }, { clipped }, bare(parameter) + ": gradient clipped");
            gradient = clipped;
        }
    }

    const bool adam = m_optimizer.kind != OptimizerSettings::Kind::Sgd;
    const bool buffers = adam || m_optimizer.momentum != 0.0;
    int stepBefore = -1, stepAfter = -1;
    if (adam) {
        stepBefore = m_program.add({ "optimizer/adam_step", DType::Int64, {} });
        m_program.stateBefore.push_back(stepBefore);
        stepAfter = m_program.add({ "optimizer/adam_step", DType::Int64, {} });
        add(Op::Count, { stepBefore }, { stepAfter }, "Adam's step count");
    }
    std::vector<int> after;
    if (stepAfter >= 0)
        after.push_back(stepAfter);
    for (const auto& [parameter, gradient] : m_parameters) {
        const auto name = bare(parameter);
        const auto shape = shapeOf(parameter);
        const int updated = m_program.add({ nameOf(parameter), DType::Float32, shape });
        after.push_back(updated);
        if (!adam) {
            std::vector<int> inputs { parameter, gradient }, outputs { updated };
            const bool first = buffers && !m_step.buffersBefore;
            if (buffers) {
                const std::string buffer = "optimizer/momentum/" + name;
                if (!first) {
                    const int before = m_program.add({ buffer, DType::Float32, shape });
                    m_program.stateBefore.push_back(before);
                    inputs.push_back(before);
                }
                outputs.push_back(m_program.add({ buffer, DType::Float32, shape }));
                after.push_back(outputs.back());
            }
            add(Op::Sgd, inputs, outputs, name + ": SGD update",
                { m_step.learningRate, m_optimizer.momentum, m_optimizer.weightDecay },
                { m_optimizer.nesterov ? 1 : 0, first ? 1 : 0 });
            continue;
        }
        const bool fresh = !m_step.buffersBefore;
        std::vector<int> inputs { parameter, gradient };
        const std::string first = "optimizer/exp_avg/" + name, second = "optimizer/exp_avg_sq/" + name;
        if (!fresh) {
            for (const auto& buffer : { first, second }) {
                const int before = m_program.add({ buffer, DType::Float32, shape });
                m_program.stateBefore.push_back(before);
                inputs.push_back(before);
            }
        }
        inputs.push_back(stepAfter);
        const int m = m_program.add({ first, DType::Float32, shape }), v = m_program.add({ second, DType::Float32, shape });
        after.push_back(m);
        after.push_back(v);
        add(Op::Adam, inputs, { updated, m, v },
            name + (m_optimizer.kind == OptimizerSettings::Kind::AdamW ? ": AdamW update" : ": Adam update"),
            { m_step.learningRate, m_optimizer.beta1, m_optimizer.beta2, m_optimizer.eps, m_optimizer.weightDecay },
            { m_optimizer.kind == OptimizerSettings::Kind::AdamW ? 1 : 0, fresh ? 1 : 0 });
    }
    auto byName = [&](int a, int b) { return nameOf(a) < nameOf(b); };
    std::sort(m_program.stateBefore.begin(), m_program.stateBefore.end(), byName);
    std::sort(after.begin(), after.end(), byName);
    m_program.stateAfter = after;
}

Program mlpStep(std::int64_t batch, std::int64_t inputs, const std::vector<std::int64_t>& hidden, std::int64_t classes,
    const OptimizerSettings& optimizer, const StepSettings& step)
{
    Program program;
    StepBuilder b(program, optimizer, step);
    const int x = b.temporary("batch.x", { batch, inputs });
    const int y = b.temporary("batch.y", { batch }, DType::Int64);
    b.add(Op::Batch, {}, { x, y }, "the step's samples and targets");

    struct Layer {
        int weight, bias, input, output, activation;
    };
    std::vector<Layer> layers;
    std::int64_t width = inputs;
    int h = x;
    const auto count = std::int64_t(hidden.size()) + 1;
    for (std::int64_t i = 0; i < count; ++i) {
        const std::string name = "fc" + std::to_string(i);
        const std::int64_t out = i < std::int64_t(hidden.size()) ? hidden[std::size_t(i)] : classes;
        Layer layer { b.parameter(name + ".weight", { out, width }), b.parameter(name + ".bias", { out }), h, -1, -1 };
        layer.output = b.temporary(name + ".out", { batch, out });
        b.add(Op::Linear, { h, layer.weight, layer.bias }, { layer.output }, name + ": forward");
        if (i + 1 < count) {
            layer.activation = b.temporary(name + ".relu", { batch, out });
            b.add(Op::Relu, { layer.output }, { layer.activation }, name + ": ReLU");
            h = layer.activation;
        }
        layers.push_back(layer);
        width = out;
    }
    const int loss = b.temporary("loss", {});
    int gradient = b.temporary("fc" + std::to_string(count - 1) + ".out.grad", { batch, classes });
    b.add(Op::CrossEntropy, { layers.back().output, y }, { loss, gradient }, "mean cross-entropy and its gradient");
    for (std::int64_t i = count - 1; i >= 0; --i) {
        const auto& layer = layers[std::size_t(i)];
        const std::string name = "fc" + std::to_string(i);
        const auto& weight = program.values[std::size_t(layer.weight)];
        const int dw = b.temporary(name + ".weight.grad", weight.shape);
        b.add(Op::LinearGradWeight, { gradient, layer.input }, { dw }, name + ": gradient of the weight");
        const int db = b.temporary(name + ".bias.grad", { weight.shape[0] });
        b.add(Op::LinearGradBias, { gradient }, { db }, name + ": gradient of the bias");
        b.gradient(layer.weight, dw);
        b.gradient(layer.bias, db);
        if (i == 0)
            break;
        const auto& below = layers[std::size_t(i - 1)];
        const std::string belowName = "fc" + std::to_string(i - 1);
        const int dh = b.temporary(belowName + ".relu.grad", { batch, weight.shape[1] });
        b.add(Op::LinearGradInput, { gradient, layer.weight }, { dh }, name + ": gradient of its input");
        const int dz = b.temporary(belowName + ".out.grad", { batch, weight.shape[1] });
        b.add(Op::ReluGrad, { below.activation, dh }, { dz }, belowName + ": ReLU's gradient");
        gradient = dz;
    }
    b.finish();
    return program;
}

} // namespace tessera::compute::portable
