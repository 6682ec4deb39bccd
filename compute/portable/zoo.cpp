#include "zoo.h"

#include "kernels.h"

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

namespace {

// A dropout layer's stream of the step (StepSettings::seed).
std::int64_t dropoutSeed(const StepSettings& step, std::uint64_t layer)
{
    return std::int64_t(splitMix(step.seed, layer));
}

} // namespace

Forward forwardOf(const Program& step)
{
    Forward forward;
    forward.program.values = step.values;
    for (const auto& instruction : step.instructions) {
        if (instruction.op == Op::CrossEntropy) {
            forward.logits = instruction.inputs.at(0);
            break;
        }
        forward.program.instructions.push_back(instruction);
    }
    for (int v : step.stateBefore) {
        if (step.values[std::size_t(v)].name.starts_with("model/"))
            forward.program.stateBefore.push_back(v);
    }
    return forward;
}

Program mlpStep(std::int64_t batch, std::int64_t inputs, const std::vector<std::int64_t>& hidden, std::int64_t classes,
    double dropout, const OptimizerSettings& optimizer, const StepSettings& step)
{
    Program program;
    StepBuilder b(program, optimizer, step);
    const int x = b.temporary("batch.x", { batch, inputs });
    const int y = b.temporary("batch.y", { batch }, DType::Int64);
    b.add(Op::Batch, {}, { x, y }, "the step's samples and targets");

    struct Layer {
        int weight, bias, input, output, activation, dropped;
    };
    std::vector<Layer> layers;
    std::int64_t width = inputs;
    int h = x;
    const auto count = std::int64_t(hidden.size()) + 1;
    for (std::int64_t i = 0; i < count; ++i) {
        const std::string name = "fc" + std::to_string(i);
        const std::int64_t out = i < std::int64_t(hidden.size()) ? hidden[std::size_t(i)] : classes;
        Layer layer { b.parameter(name + ".weight", { out, width }), b.parameter(name + ".bias", { out }), h, -1, -1, -1 };
        layer.output = b.temporary(name + ".out", { batch, out });
        b.add(Op::Linear, { h, layer.weight, layer.bias }, { layer.output }, name + ": forward");
        if (i + 1 < count) {
            layer.activation = b.temporary(name + ".relu", { batch, out });
            b.add(Op::Relu, { layer.output }, { layer.activation }, name + ": ReLU");
            h = layer.activation;
            if (dropout > 0.0) {
                layer.dropped = b.temporary(name + ".drop", { batch, out });
                b.add(Op::Dropout, { h }, { layer.dropped }, name + ": dropout", { dropout },
                    { dropoutSeed(step, std::uint64_t(i)) });
                h = layer.dropped;
            }
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
        const auto weight = program.values[std::size_t(layer.weight)]; // a copy: temporary() grows the values
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
        const std::vector<std::int64_t> shape { batch, weight.shape[1] };
        int dh = b.temporary(belowName + (below.dropped >= 0 ? ".drop.grad" : ".relu.grad"), shape);
        b.add(Op::LinearGradInput, { gradient, layer.weight }, { dh }, name + ": gradient of its input");
        if (below.dropped >= 0) {
            const int undropped = b.temporary(belowName + ".relu.grad", shape);
            b.add(Op::DropoutGrad, { dh }, { undropped }, belowName + ": dropout's gradient", { dropout },
                { dropoutSeed(step, std::uint64_t(i - 1)) });
            dh = undropped;
        }
        const int dz = b.temporary(belowName + ".out.grad", shape);
        b.add(Op::ReluGrad, { below.activation, dh }, { dz }, belowName + ": ReLU's gradient");
        gradient = dz;
    }
    b.finish();
    return program;
}

Program cnnStep(std::int64_t batch, std::int64_t channels, std::int64_t height, std::int64_t width,
    const std::vector<std::int64_t>& convChannels, std::int64_t hidden, std::int64_t classes, double dropout,
    const OptimizerSettings& optimizer, const StepSettings& step)
{
    Program program;
    StepBuilder b(program, optimizer, step);
    const int x = b.temporary("batch.x", { batch, channels, height, width });
    const int y = b.temporary("batch.y", { batch }, DType::Int64);
    b.add(Op::Batch, {}, { x, y }, "the step's samples and targets");
    int image = x;
    if (channels > 1) { // one channel is the same bytes either way
        image = b.temporary("batch.x.last", { batch, height, width, channels });
        b.add(Op::ChannelsLast, { x }, { image }, "the samples channels-last", {}, { batch, height, width, channels });
    }

    struct Conv {
        int weight, bias, input, output, activation, pooled;
        std::int64_t height, width, in, out;
    };
    std::vector<Conv> convs;
    std::int64_t h = height, w = width, c = channels;
    for (std::size_t i = 0; i < 2; ++i) {
        const std::string name = "conv" + std::to_string(i + 1);
        const std::int64_t out = convChannels[i];
        Conv conv { b.parameter(name + ".weight", { out, c, 3, 3 }), b.parameter(name + ".bias", { out }), image, -1, -1, -1, h,
            w, c, out };
        conv.output = b.temporary(name + ".out", { batch, h, w, out });
        b.add(Op::Conv3x3, { image, conv.weight, conv.bias }, { conv.output }, name + ": forward", {}, { batch, h, w, c, out });
        conv.activation = b.temporary(name + ".relu", { batch, h, w, out });
        b.add(Op::Relu, { conv.output }, { conv.activation }, name + ": ReLU");
        conv.pooled = b.temporary(name + ".pool", { batch, h / 2, w / 2, out });
        b.add(Op::MaxPool2, { conv.activation }, { conv.pooled }, name + ": max pooling", {}, { batch, h, w, out });
        convs.push_back(conv);
        image = conv.pooled;
        h /= 2;
        w /= 2;
        c = out;
    }
    const std::int64_t features = c * h * w;
    const int flat = b.temporary("flat", { batch, features });
    b.add(Op::ChannelsFirst, { image }, { flat }, "the feature map flattened in PyTorch's order", {}, { batch, h, w, c });
    const int fc0w = b.parameter("fc0.weight", { hidden, features }), fc0b = b.parameter("fc0.bias", { hidden });
    const int fc0 = b.temporary("fc0.out", { batch, hidden });
    b.add(Op::Linear, { flat, fc0w, fc0b }, { fc0 }, "fc0: forward");
    const int relu = b.temporary("fc0.relu", { batch, hidden });
    b.add(Op::Relu, { fc0 }, { relu }, "fc0: ReLU");
    int features0 = relu;
    if (dropout > 0.0) {
        features0 = b.temporary("fc0.drop", { batch, hidden });
        b.add(Op::Dropout, { relu }, { features0 }, "fc0: dropout", { dropout }, { dropoutSeed(step, 0) });
    }
    const int fc1w = b.parameter("fc1.weight", { classes, hidden }), fc1b = b.parameter("fc1.bias", { classes });
    const int logits = b.temporary("fc1.out", { batch, classes });
    b.add(Op::Linear, { features0, fc1w, fc1b }, { logits }, "fc1: forward");
    const int loss = b.temporary("loss", {});
    const int dlogits = b.temporary("fc1.out.grad", { batch, classes });
    b.add(Op::CrossEntropy, { logits, y }, { loss, dlogits }, "mean cross-entropy and its gradient");

    // fc1, fc0
    const int dfc1w = b.temporary("fc1.weight.grad", { classes, hidden }), dfc1b = b.temporary("fc1.bias.grad", { classes });
    b.add(Op::LinearGradWeight, { dlogits, features0 }, { dfc1w }, "fc1: gradient of the weight");
    b.add(Op::LinearGradBias, { dlogits }, { dfc1b }, "fc1: gradient of the bias");
    int dfeatures = b.temporary(dropout > 0.0 ? "fc0.drop.grad" : "fc0.relu.grad", { batch, hidden });
    b.add(Op::LinearGradInput, { dlogits, fc1w }, { dfeatures }, "fc1: gradient of its input");
    if (dropout > 0.0) {
        const int undropped = b.temporary("fc0.relu.grad", { batch, hidden });
        b.add(Op::DropoutGrad, { dfeatures }, { undropped }, "fc0: dropout's gradient", { dropout }, { dropoutSeed(step, 0) });
        dfeatures = undropped;
    }
    const int dfc0 = b.temporary("fc0.out.grad", { batch, hidden });
    b.add(Op::ReluGrad, { relu, dfeatures }, { dfc0 }, "fc0: ReLU's gradient");
    const int dfc0w = b.temporary("fc0.weight.grad", { hidden, features }), dfc0b = b.temporary("fc0.bias.grad", { hidden });
    b.add(Op::LinearGradWeight, { dfc0, flat }, { dfc0w }, "fc0: gradient of the weight");
    b.add(Op::LinearGradBias, { dfc0 }, { dfc0b }, "fc0: gradient of the bias");
    const int dflat = b.temporary("flat.grad", { batch, features });
    b.add(Op::LinearGradInput, { dfc0, fc0w }, { dflat }, "fc0: gradient of its input");
    int dimage = b.temporary("conv2.pool.grad", { batch, h, w, c });
    b.add(Op::ChannelsLast, { dflat }, { dimage }, "the flattened gradient channels-last", {}, { batch, h, w, c });
    b.gradient(fc1w, dfc1w);
    b.gradient(fc1b, dfc1b);
    b.gradient(fc0w, dfc0w);
    b.gradient(fc0b, dfc0b);

    // conv2, conv1
    for (std::size_t i = convs.size(); i-- > 0;) {
        const auto& conv = convs[i];
        const std::string name = "conv" + std::to_string(i + 1);
        const std::vector<std::int64_t> shape { batch, conv.height, conv.width, conv.out };
        const int dout = b.temporary(name + ".out.grad", shape);
        b.add(Op::MaxPool2ReluGrad, { conv.activation, dimage }, { dout }, name + ": max pooling's and ReLU's gradient", {},
            { batch, conv.height, conv.width, conv.out });
        const std::vector<std::int64_t> geometry { batch, conv.height, conv.width, conv.in, conv.out };
        const int dw = b.temporary(name + ".weight.grad", { conv.out, conv.in, 3, 3 }),
                  db = b.temporary(name + ".bias.grad", { conv.out });
        b.add(Op::Conv3x3GradWeight, { dout, conv.input }, { dw }, name + ": gradient of the weight", {}, geometry);
        b.add(Op::LinearGradBias, { dout }, { db }, name + ": gradient of the bias");
        b.gradient(conv.weight, dw);
        b.gradient(conv.bias, db);
        if (i == 0)
            break;
        dimage = b.temporary("conv" + std::to_string(i) + ".pool.grad", { batch, conv.height, conv.width, conv.in });
        b.add(Op::Conv3x3GradInput, { dout, conv.weight }, { dimage }, name + ": gradient of its input", {}, geometry);
    }
    b.finish();
    return program;
}

Program gptStep(std::int64_t batch, std::int64_t length, std::int64_t vocabulary, std::int64_t layers, std::int64_t heads,
    std::int64_t width, std::int64_t context, bool tied, const OptimizerSettings& optimizer, const StepSettings& step)
{
    Program program;
    StepBuilder b(program, optimizer, step);
    const std::int64_t C = width;
    const std::vector<std::int64_t> rows { batch, length, C };
    const int tokens = b.temporary("batch.x", { batch, length }, DType::Int64);
    const int targets = b.temporary("batch.y", { batch, length }, DType::Int64);
    b.add(Op::Batch, {}, { tokens, targets }, "the step's tokens and targets");
    const int wte = b.parameter("transformer.wte.weight", { vocabulary, C });
    const int wpe = b.parameter("transformer.wpe.weight", { context, C });
    int x = b.temporary("embedding", rows);
    b.add(Op::Embed, { tokens, wte, wpe }, { x }, "token and position embeddings", {}, { batch, length, C });

    struct Linear {
        int weight = -1, bias = -1;
    };
    auto linear = [&](const std::string& name, std::int64_t out, std::int64_t in, bool bias = true) {
        Linear layer;
        layer.weight = b.parameter(name + ".weight", { out, in });
        if (bias)
            layer.bias = b.parameter(name + ".bias", { out });
        return layer;
    };
    auto apply = [&](const Linear& layer, int input, const std::string& name, std::int64_t out, const std::string& label) {
        const int y = b.temporary(name, { batch, length, out });
        std::vector<int> inputs { input, layer.weight };
        if (layer.bias >= 0)
            inputs.push_back(layer.bias);
        b.add(Op::Linear, inputs, { y }, label);
        return y;
    };
    // A linear layer's gradients from dy: its weight's and bias's (declared), and its input's.
    auto backLinear
        = [&](const Linear& layer, int dy, int input, const std::string& name, std::int64_t in, const std::string& label) {
              const auto weight = program.values[std::size_t(layer.weight)]; // a copy: temporary() grows the values
              const int dw = b.temporary(name + ".weight.grad", weight.shape);
              b.add(Op::LinearGradWeight, { dy, input }, { dw }, label + ": gradient of the weight");
              b.gradient(layer.weight, dw);
              if (layer.bias >= 0) {
                  const int db = b.temporary(name + ".bias.grad", { weight.shape[0] });
                  b.add(Op::LinearGradBias, { dy }, { db }, label + ": gradient of the bias");
                  b.gradient(layer.bias, db);
              }
              const int dx = b.temporary(name + ".input.grad", { batch, length, in });
              b.add(Op::LinearGradInput, { dy, layer.weight }, { dx }, label + ": gradient of its input");
              return dx;
          };
    struct Norm {
        int gamma, beta;
    };
    auto norm = [&](const std::string& name) {
        return Norm { b.parameter(name + ".weight", { C }), b.parameter(name + ".bias", { C }) };
    };
    auto backNorm = [&](const Norm& layer, int input, int dy, const std::string& name) {
        const int dx = b.temporary(name + ".input.grad", rows);
        const int dgamma = b.temporary(name + ".weight.grad", { C }), dbeta = b.temporary(name + ".bias.grad", { C });
        b.add(Op::LayerNormGrad, { input, layer.gamma, dy }, { dx, dgamma, dbeta }, name + ": LayerNorm's gradients");
        b.gradient(layer.gamma, dgamma);
        b.gradient(layer.beta, dbeta);
        return dx;
    };

    struct Block {
        std::string name;
        Norm ln1, ln2;
        Linear attn, proj, fc, mlpProj;
        int input, normed1, qkv, attended, x1, normed2, fc1, activated, output;
    };
    std::vector<Block> blocks;
    for (std::int64_t i = 0; i < layers; ++i) {
        Block block;
        block.name = "transformer.h." + std::to_string(i);
        const auto& n = block.name;
        block.ln1 = norm(n + ".ln_1");
        block.attn = linear(n + ".attn.c_attn", 3 * C, C);
        block.proj = linear(n + ".attn.c_proj", C, C);
        block.ln2 = norm(n + ".ln_2");
        block.fc = linear(n + ".mlp.c_fc", 4 * C, C);
        block.mlpProj = linear(n + ".mlp.c_proj", C, 4 * C);
        block.input = x;
        block.normed1 = b.temporary(n + ".ln_1.out", rows);
        b.add(Op::LayerNorm, { x, block.ln1.gamma, block.ln1.beta }, { block.normed1 }, n + ".ln_1: LayerNorm");
        block.qkv = apply(block.attn, block.normed1, n + ".attn.qkv", 3 * C, n + ".attn.c_attn: forward");
        block.attended = b.temporary(n + ".attn.out", rows);
        b.add(Op::Attention, { block.qkv }, { block.attended }, n + ".attn: causal self-attention", {},
            { batch, length, heads, C });
        const int projected = apply(block.proj, block.attended, n + ".attn.proj", C, n + ".attn.c_proj: forward");
        block.x1 = b.temporary(n + ".attn.residual", rows);
        b.add(Op::Add, { x, projected }, { block.x1 }, n + ": the attention's residual");
        block.normed2 = b.temporary(n + ".ln_2.out", rows);
        b.add(Op::LayerNorm, { block.x1, block.ln2.gamma, block.ln2.beta }, { block.normed2 }, n + ".ln_2: LayerNorm");
        block.fc1 = apply(block.fc, block.normed2, n + ".mlp.fc", 4 * C, n + ".mlp.c_fc: forward");
        block.activated = b.temporary(n + ".mlp.gelu", { batch, length, 4 * C });
        b.add(Op::Gelu, { block.fc1 }, { block.activated }, n + ".mlp: GELU");
        const int mlpOut = apply(block.mlpProj, block.activated, n + ".mlp.proj", C, n + ".mlp.c_proj: forward");
        block.output = b.temporary(n + ".out", rows);
        b.add(Op::Add, { block.x1, mlpOut }, { block.output }, n + ": the feed-forward's residual");
        x = block.output;
        blocks.push_back(block);
    }
    const Norm lnf = norm("transformer.ln_f");
    const int normed = b.temporary("transformer.ln_f.out", rows);
    b.add(Op::LayerNorm, { x, lnf.gamma, lnf.beta }, { normed }, "transformer.ln_f: LayerNorm");
    Linear head;
    head.weight = tied ? wte : b.parameter("lm_head.weight", { vocabulary, C });
    const int logits = apply(head, normed, "logits", vocabulary, tied ? "the head (tied to wte): forward" : "lm_head: forward");
    const int loss = b.temporary("loss", {});
    const int dlogits = b.temporary("logits.grad", { batch, length, vocabulary });
    b.add(Op::CrossEntropy, { logits, targets }, { loss, dlogits }, "mean cross-entropy per token and its gradient");

    // The head: its weight's gradient (for a tied head, the start of wte's), then its input's.
    const int dhead = b.temporary(tied ? "head.weight.grad" : "lm_head.weight.grad", { vocabulary, C });
    b.add(Op::LinearGradWeight, { dlogits, normed }, { dhead }, "the head: gradient of the weight");
    if (!tied)
        b.gradient(head.weight, dhead);
    const int dnormed = b.temporary("transformer.ln_f.out.grad", rows);
    b.add(Op::LinearGradInput, { dlogits, head.weight }, { dnormed }, "the head: gradient of its input");
    int dx = backNorm(lnf, x, dnormed, "transformer.ln_f");
    for (std::size_t i = blocks.size(); i-- > 0;) {
        const auto& block = blocks[i];
        const auto& n = block.name;
        const int dact = backLinear(block.mlpProj, dx, block.activated, n + ".mlp.c_proj", 4 * C, n + ".mlp.c_proj");
        const int dfc = b.temporary(n + ".mlp.fc.grad", { batch, length, 4 * C });
        b.add(Op::GeluGrad, { block.fc1, dact }, { dfc }, n + ".mlp: GELU's gradient");
        const int dnormed2 = backLinear(block.fc, dfc, block.normed2, n + ".mlp.c_fc", C, n + ".mlp.c_fc");
        const int branch2 = backNorm(block.ln2, block.x1, dnormed2, n + ".ln_2");
        const int dx1 = b.temporary(n + ".attn.residual.grad", rows);
        b.add(Op::Add, { dx, branch2 }, { dx1 }, n + ": the gradient through the feed-forward's residual");
        const int datt = backLinear(block.proj, dx1, block.attended, n + ".attn.c_proj", C, n + ".attn.c_proj");
        const int dqkv = b.temporary(n + ".attn.qkv.grad", { batch, length, 3 * C });
        b.add(Op::AttentionGrad, { block.qkv, datt }, { dqkv }, n + ".attn: self-attention's gradient", {},
            { batch, length, heads, C });
        const int dnormed1 = backLinear(block.attn, dqkv, block.normed1, n + ".attn.c_attn", C, n + ".attn.c_attn");
        const int branch1 = backNorm(block.ln1, block.input, dnormed1, n + ".ln_1");
        const int dinput = b.temporary(n + ".input.grad", rows);
        b.add(Op::Add, { dx1, branch1 }, { dinput }, n + ": the gradient through the attention's residual");
        dx = dinput;
    }
    const int dwpe = b.temporary("transformer.wpe.weight.grad", { context, C });
    b.add(Op::EmbedGradPosition, { dx }, { dwpe }, "the position embedding: gradient", {}, { batch, length, C });
    b.gradient(wpe, dwpe);
    const int dwte = b.temporary("transformer.wte.weight.grad", { vocabulary, C });
    std::vector<int> inputs { dx, tokens };
    if (tied)
        inputs.push_back(dhead);
    b.add(Op::EmbedGradToken, inputs, { dwte },
        tied ? "the token embedding: gradient, after the head's" : "the token embedding: gradient", {},
        { batch, length, C, vocabulary });
    b.gradient(wte, dwte);
    b.finish();
    return program;
}

} // namespace tessera::compute::portable
