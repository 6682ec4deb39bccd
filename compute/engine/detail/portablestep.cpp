#include "portablestep.h"

#include <compute/portable/pipeline.h>
#include <compute/portable/zoo.h>
#include <core/seeds.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <span>

namespace tessera::compute::detail {

namespace {

portable::OptimizerSettings settingsOf(const core::OptimizerSpec& spec)
{
    portable::OptimizerSettings settings;
    switch (spec.kind) {
    case core::OptimizerSpec::Kind::Sgd:
        settings.kind = portable::OptimizerSettings::Kind::Sgd;
        break;
    case core::OptimizerSpec::Kind::Adam:
        settings.kind = portable::OptimizerSettings::Kind::Adam;
        break;
    case core::OptimizerSpec::Kind::AdamW:
        settings.kind = portable::OptimizerSettings::Kind::AdamW;
        break;
    }
    settings.momentum = spec.momentum;
    settings.weightDecay = spec.weightDecay;
    settings.nesterov = spec.nesterov;
    settings.beta1 = spec.beta1;
    settings.beta2 = spec.beta2;
    settings.eps = spec.eps;
    settings.clipNorm = spec.clipNorm;
    return settings;
}

core::Error uncovered(const QString& what)
{
    return { QStringLiteral("training.determinism"), QStringLiteral("the portable kernels do not cover %1").arg(what) };
}

// The step program of a zoo model for a batch of `batch` samples of this shape.
core::Result<portable::Program> stepProgram(const core::ModelSpec& model, std::int64_t batch,
    const std::vector<std::int64_t>& sampleShape, std::int64_t classes, const portable::OptimizerSettings& optimizer,
    const portable::StepSettings& settings)
{
    if (model.source != core::ModelSpec::Source::Zoo)
        return uncovered(QStringLiteral("TorchScript models"));
    const std::vector<std::int64_t> hidden(model.hidden.begin(), model.hidden.end());
    if (model.zoo == QLatin1String("mlp")) {
        std::int64_t inputs = 1;
        for (auto size : sampleShape)
            inputs *= size;
        return portable::mlpStep(batch, inputs, hidden, classes, model.dropout, optimizer, settings);
    }
    if (model.zoo == QLatin1String("gpt")) {
        if (model.dropout > 0.0)
            return uncovered(QStringLiteral("the gpt with dropout yet"));
        if (model.heads < 1 || model.width % model.heads != 0)
            return uncovered(QStringLiteral("a gpt whose width is no multiple of its heads"));
        if (sampleShape.size() != 1 || sampleShape[0] < 1 || sampleShape[0] > model.context)
            return uncovered(QStringLiteral("a gpt on other than token windows within its context"));
        return portable::gptStep(batch, sampleShape[0], model.vocabulary > 0 ? model.vocabulary : classes, model.layers,
            model.heads, model.width, model.context, model.tied, optimizer, settings);
    }
    if (model.zoo == QLatin1String("cnn")) {
        if (sampleShape.size() != 3 || model.channels.size() != 2 || hidden.size() != 1)
            return uncovered(QStringLiteral("a cnn of other than images [channels, height, width]"));
        return portable::cnnStep(batch, sampleShape[0], sampleShape[1], sampleShape[2],
            std::vector<std::int64_t>(model.channels.begin(), model.channels.end()), hidden[0], classes, model.dropout, optimizer,
            settings);
    }
    return uncovered(QStringLiteral("the zoo %1 yet").arg(model.zoo));
}

} // namespace

namespace {

portable::StepSettings stepSettingsOf(const core::ShardTask& task, std::int64_t step)
{
    portable::StepSettings settings;
    settings.learningRate = task.optimizer.learningRateAt(task.round * task.localSteps + step);
    settings.buffersBefore = step > 0 || task.carriesOptimizer;
    settings.seed = core::deriveSeed(std::uint64_t(task.seed),
        { std::uint64_t(core::SeedPurpose::Step), std::uint64_t(task.round), std::uint64_t(task.shard), std::uint64_t(step) });
    return settings;
}

} // namespace

core::Result<portable::Program> portableProgram(
    const core::ShardTask& task, std::int64_t step, const std::vector<std::int64_t>& sampleShape, std::int64_t classes)
{
    if (step < 0 || step >= task.localSteps)
        return core::Error { QStringLiteral("step"), QStringLiteral("the shard has no step %1").arg(step + 1) };
    return stepProgram(task.model, task.batchSize, sampleShape, classes, settingsOf(task.optimizer), stepSettingsOf(task, step));
}

core::Result<portable::Forward> portableForward(
    const core::ModelSpec& model, std::int64_t batch, const std::vector<std::int64_t>& sampleShape, std::int64_t classes)
{
    auto withoutDropout = model;
    withoutDropout.dropout = 0.0; // off in inference
    auto step = stepProgram(withoutDropout, batch, sampleShape, classes, {}, {});
    if (!step)
        return core::Error { QStringLiteral("inference.determinism"), step.error().message };
    auto forward = portable::forwardOf(*step);
    if (forward.logits < 0)
        return uncovered(QStringLiteral("this model's forward pass"));
    return forward;
}

namespace {

// The memory of each parameter a program reads (its stateBefore), in the model's own tensors,
// which must be what the program names: CPU, float32, contiguous, of its shape.
core::Result<std::vector<std::pair<int, void*>>> parameterMemory(const portable::Program& program, Model& model)
{
    std::vector<std::pair<int, void*>> memory;
    const auto parameters = model.parameters();
    for (int v : program.stateBefore) {
        const auto& value = program.values[std::size_t(v)];
        const auto found = std::find_if(parameters.begin(), parameters.end(),
            [&](const auto& parameter) { return value.name == "model/" + parameter.first; });
        if (found == parameters.end() || !found->second.device().is_cpu() || found->second.scalar_type() != at::kFloat
            || !found->second.is_contiguous() || !found->second.sizes().equals(value.shape))
            return core::Error { QStringLiteral("state"),
                QStringLiteral("'%1' is not what the portable program reads").arg(QString::fromStdString(value.name)) };
        memory.emplace_back(v, found->second.data_ptr());
    }
    return memory;
}

} // namespace

core::Result<std::unique_ptr<portable::GptDecoder>> PortableForward::decoder()
{
    if (m_spec.source != core::ModelSpec::Source::Zoo || m_spec.zoo != QLatin1String("gpt"))
        return core::Error { QStringLiteral("model"), QStringLiteral("only the zoo gpt decodes incrementally") };
    // The forward program of one position names the parameters and their shapes.
    auto forward = portableForward(m_spec, 1, { 1 }, m_classes);
    if (!forward)
        return forward.error();
    auto memory = parameterMemory(forward->program, m_model);
    if (!memory)
        return memory.error();
    std::map<std::string, const float*> byName;
    for (const auto& [value, pointer] : *memory)
        byName.emplace(forward->program.values[std::size_t(value)].name.substr(6), static_cast<const float*>(pointer));
    auto lookup = [&](const std::string& name) -> const float* {
        const auto found = byName.find(name);
        return found == byName.end() ? nullptr : found->second;
    };
    const auto& model = m_spec;
    portable::GptDecoder::Sizes sizes { model.vocabulary > 0 ? model.vocabulary : m_classes, model.layers, model.heads,
        model.width, model.context, model.tied };
    auto decoder = std::make_unique<portable::GptDecoder>(sizes, lookup, m_executor.threads());
    if (!decoder->missing().empty())
        return core::Error { QStringLiteral("state"),
            QStringLiteral("'%1' is not what the portable decoder reads").arg(QString::fromStdString(decoder->missing())) };
    return decoder;
}

PortableForward::PortableForward(core::ModelSpec spec, Model& model, std::int64_t classes, int threads)
    : m_spec(std::move(spec))
    , m_model(model)
    , m_classes(classes)
    , m_executor(threads)
{ }

core::Result<at::Tensor> PortableForward::logits(const at::Tensor& x)
{
    const auto sizes = x.sizes().vec();
    if (sizes.empty())
        return core::Error { QStringLiteral("inputs"), QStringLiteral("no batch") };
    const std::vector<std::int64_t> sampleShape(sizes.begin() + 1, sizes.end());
    if (m_shape != sizes) { // a program a batch shape (a generate prompt's grows a token at a time)
        auto forward = portableForward(m_spec, sizes[0], sampleShape, m_classes);
        if (!forward)
            return forward.error();
        auto memory = parameterMemory(forward->program, m_model); // found once a program
        if (!memory)
            return memory.error();
        m_bindings = std::move(*memory);
        m_forward = std::move(*forward);
        m_shape = sizes;
    }
    const auto& program = m_forward.program;
    m_executor.prepare(program);
    for (const auto& [value, memory] : m_bindings)
        m_executor.bind(value, memory);
    const auto& batch = program.instructions.front();
    const auto& xValue = program.values[std::size_t(batch.outputs[0])];
    const auto input = x.to(xValue.dtype == portable::DType::Int64 ? at::kLong : at::kFloat).contiguous();
    if (input.numel() != xValue.count())
        return core::Error { QStringLiteral("inputs"), QStringLiteral("the batch does not have the program's shape") };
    for (const auto& instruction : program.instructions) { // tokens index the embedding's rows
        if (instruction.op != portable::Op::Embed)
            continue;
        const auto rows = program.values[std::size_t(instruction.inputs.at(1))].shape.at(0);
        if (input.numel() > 0 && (input.min().item<std::int64_t>() < 0 || input.max().item<std::int64_t>() >= rows))
            return core::Error { QStringLiteral("inputs"),
                QStringLiteral("a token is not in the model's vocabulary of %1").arg(rows) };
    }
    m_executor.bind(batch.outputs[0], input.data_ptr());
    for (std::size_t i = 1; i < program.instructions.size(); ++i)
        m_executor.run(program, i);
    const auto& logits = program.values[std::size_t(m_forward.logits)];
    return torch::from_blob(m_executor.memory(m_forward.logits), logits.shape, at::kFloat).clone();
}

PortableStep::PortableStep(const core::ShardTask& task, Model& model, Optimizer& optimizer, std::vector<std::int64_t> sampleShape,
    std::int64_t classes, int threads)
    : m_task(task)
    , m_model(model)
    , m_optimizer(optimizer)
    , m_sampleShape(std::move(sampleShape))
    , m_classes(classes)
    , m_executor(threads)
    , m_adamStep(torch::zeros({}, torch::kInt64))
{ }

core::Status PortableStep::bindState(const portable::Program& program, std::int64_t step)
{
    const bool created = !(step > 0 || m_task.carriesOptimizer); // the buffers are born in this step
    m_adamStep.fill_(m_optimizer.m_steps);
    for (const bool before : { true, false }) {
        for (int v : before ? program.stateBefore : program.stateAfter) {
            auto memory = stateMemory(program.values[std::size_t(v)], before, created);
            if (!memory)
                return memory.error();
            m_executor.bind(v, *memory);
        }
    }
    return {};
}

core::Result<void*> PortableStep::stateMemory(const portable::Value& value, bool before, bool created)
{
    auto& optimizer = m_optimizer;
    if (m_parameters.empty())
        m_parameters = m_model.parameters();
    const auto& parameters = m_parameters;
    auto unfit = [](const QString& why) { return core::Error { QStringLiteral("state"), why }; };
    // The optimizer's buffers of parameter i: created where the step writes them first.
    auto buffer = [&](std::vector<at::Tensor>& buffers, std::size_t i) -> core::Result<at::Tensor> {
        if (!buffers[i].defined()) {
            if (before || !created)
                return unfit(QStringLiteral("the optimizer state lacks a buffer of '%1'")
                                 .arg(QString::fromStdString(parameters[i].first)));
            buffers[i] = torch::zeros_like(parameters[i].second);
        }
        return buffers[i];
    };
    auto tensorOf = [&]() -> core::Result<at::Tensor> {
        const auto& name = value.name;
        if (name == "optimizer/adam_step")
            return m_adamStep;
        for (std::size_t i = 0; i < parameters.size(); ++i) {
            const auto& parameter = parameters[i].first;
            if (name == "model/" + parameter)
                return parameters[i].second;
            if (name == "optimizer/momentum/" + parameter || name == "optimizer/exp_avg/" + parameter)
                return buffer(optimizer.m_first, i);
            if (name == "optimizer/exp_avg_sq/" + parameter)
                return buffer(optimizer.m_second, i);
        }
        return unfit(QStringLiteral("the model has no tensor for '%1'").arg(QString::fromStdString(name)));
    };
    auto tensor = tensorOf();
    if (!tensor)
        return tensor.error();
    const auto type = value.dtype == portable::DType::Int64 ? at::kLong : at::kFloat;
    if (!tensor->device().is_cpu() || tensor->scalar_type() != type || !tensor->is_contiguous()
        || !tensor->sizes().equals(value.shape))
        return unfit(QStringLiteral("'%1' is not what the portable program reads").arg(QString::fromStdString(value.name)));
    return tensor->data_ptr();
}

core::Result<portable::Program> PortableStep::prepare(std::int64_t step, const at::Tensor& x, const at::Tensor& y)
{
    auto program = portableProgram(m_task, step, m_sampleShape, m_classes);
    if (!program)
        return program.error();
    if (auto status = bindBatch(*program, step, x, y); !status)
        return status.error();
    return program;
}

core::Status PortableStep::bindBatch(
    const portable::Program& program, std::int64_t step, const at::Tensor& x, const at::Tensor& y)
{
    m_executor.prepare(program);
    if (auto status = bindState(program, step); !status)
        return status;
    const auto& batch = program.instructions.front();
    const auto& xValue = program.values[std::size_t(batch.outputs[0])];
    const auto& yValue = program.values[std::size_t(batch.outputs[1])];
    m_x = x.to(xValue.dtype == portable::DType::Int64 ? at::kLong : at::kFloat).contiguous();
    m_y = y.to(at::kLong).contiguous();
    if (m_x.numel() != xValue.count() || m_y.numel() != yValue.count())
        return core::Error { QStringLiteral("batch"), QStringLiteral("the batch does not have the program's shape") };
    m_executor.bind(batch.outputs[0], m_x.data_ptr());
    m_executor.bind(batch.outputs[1], m_y.data_ptr());
    return {};
}

core::Result<double> PortableStep::run(std::int64_t step, const at::Tensor& x, const at::Tensor& y, const Observer& observer)
{
    if (m_task.microBatches > 1) {
        if (observer)
            return core::Error { QStringLiteral("microBatches"), QStringLiteral("a micro-batched step has no trace yet") };
        return runMicroBatched(step, x, y);
    }
    auto program = prepare(step, x, y);
    if (!program)
        return program.error();
    if (observer)
        observer(*program, Start, m_executor);
    int loss = -1;
    for (std::size_t i = 0; i < program->instructions.size(); ++i) {
        m_executor.run(*program, i);
        if (observer)
            observer(*program, i, m_executor);
        if (program->instructions[i].op == portable::Op::CrossEntropy)
            loss = program->instructions[i].outputs[0];
    }
    m_optimizer.m_steps = m_adamStep.item<std::int64_t>();
    if (!m_task.optimizer.isAdam())
        ++m_optimizer.m_steps;
    return loss < 0 ? 0.0 : double(*m_executor.floats(loss));
}

// docs/DETERMINISM.md, "Micro-batches": micro-batch m is rows [m b, (m + 1) b) of the step's batch
// (b = batchSize / M), run through the program of a batch of b up to its update; each gradient is
// the sum of the micro-batches' in their order (from the first's, one float32 add at a time)
// divided by float(M); then the update runs on those, and the loss is the micro-batches' losses
// summed in order over float(M).
core::Result<double> PortableStep::runMicroBatched(std::int64_t step, const at::Tensor& x, const at::Tensor& y)
{
    const auto count = m_task.microBatches;
    auto micro = m_task;
    micro.batchSize = m_task.batchSize / count;
    auto program = portableProgram(micro, step, m_sampleShape, m_classes);
    if (!program)
        return program.error();
    const auto& instructions = program->instructions;
    std::size_t updateStart = instructions.size();
    int loss = -1;
    for (std::size_t i = 0; i < instructions.size() && updateStart == instructions.size(); ++i) {
        const auto op = instructions[i].op;
        if (portable::updates(op))
            updateStart = i;
        if (op == portable::Op::CrossEntropy)
            loss = instructions[i].outputs.at(0);
    }
    // The gradients: what the update reads of what the forward and backward wrote.
    std::vector<char> written(program->values.size(), 0);
    for (std::size_t i = 0; i < updateStart; ++i) {
        for (int v : instructions[i].outputs)
            written[std::size_t(v)] = 1;
    }
    std::vector<int> gradients;
    for (std::size_t i = updateStart; i < instructions.size(); ++i) {
        for (int v : instructions[i].inputs) {
            if (written[std::size_t(v)] && std::find(gradients.begin(), gradients.end(), v) == gradients.end())
                gradients.push_back(v);
        }
    }
    std::vector<std::vector<float>> sums(gradients.size());
    float losses = 0.0f;
    for (std::int64_t m = 0; m < count; ++m) {
        const auto rows = [&](const at::Tensor& t) { return t.slice(0, m * micro.batchSize, (m + 1) * micro.batchSize); };
        if (auto status = bindBatch(*program, step, rows(x), rows(y)); !status)
            return status.error();
        for (std::size_t i = 0; i < updateStart; ++i)
            m_executor.run(*program, i);
        losses = losses + (loss >= 0 ? *m_executor.floats(loss) : 0.0f);
        for (std::size_t k = 0; k < gradients.size(); ++k) {
            const float* g = m_executor.floats(gradients[k]);
            const auto n = std::size_t(program->values[std::size_t(gradients[k])].count());
            if (m == 0) {
                sums[k].assign(g, g + n);
                continue;
            }
            for (std::size_t e = 0; e < n; ++e)
                sums[k][e] = sums[k][e] + g[e];
        }
    }
    const float divisor = float(count);
    for (std::size_t k = 0; k < gradients.size(); ++k) {
        float* g = m_executor.floats(gradients[k]);
        for (std::size_t e = 0; e < sums[k].size(); ++e)
            g[e] = sums[k][e] / divisor;
    }
    for (std::size_t i = updateStart; i < instructions.size(); ++i)
        m_executor.run(*program, i);
    m_optimizer.m_steps = m_adamStep.item<std::int64_t>();
    if (!m_task.optimizer.isAdam())
        ++m_optimizer.m_steps;
    return double(losses / divisor);
}

core::Result<const std::vector<portable::Stage>*> PortableStep::stagesOf(std::int64_t step)
{
    const auto& task = m_task;
    const auto& model = task.model;
    if (!task.isStage() || model.zoo != QLatin1String("gpt") || m_sampleShape.size() != 1)
        return core::Error { QStringLiteral("stages"), QStringLiteral("stages cut a portable gpt's blocks") };
    // The programs differ from step to step only by the learning rate and whether the optimizer's
    // buffers exist (the gpt draws no dropout): built again only when one of them changes.
    const auto settings = stepSettingsOf(task, step);
    if (!m_stages.empty() && m_stagesLearningRate == settings.learningRate && m_stagesBuffersBefore == settings.buffersBefore)
        return &m_stages;
    std::string why;
    m_stages = portable::gptStages(task.batchSize / std::max<std::int64_t>(task.microBatches, 1), m_sampleShape[0],
        model.vocabulary > 0 ? model.vocabulary : m_classes, model.layers, model.heads, model.width, model.context, model.tied,
        task.stages, &why, settingsOf(task.optimizer), settings);
    m_stagesLearningRate = settings.learningRate;
    m_stagesBuffersBefore = settings.buffersBefore;
    if (std::int64_t(m_stages.size()) != task.stages)
        return core::Error { QStringLiteral("stages"), QString::fromStdString(why) };
    return &m_stages;
}

core::Result<std::set<std::string>> PortableStep::stageParameters()
{
    std::set<std::string> names;
    if (!m_task.isStage())
        return names;
    auto stages = stagesOf(0);
    if (!stages)
        return stages.error();
    const auto& stage = (**stages)[std::size_t(m_task.stage)];
    for (const auto& [parameter, gradient] : stage.gradients)
        names.insert(stage.program.values[std::size_t(parameter)].name.substr(6)); // "model/X"
    return names;
}

namespace {

// A stage's sums of squares on the wire: each tensor's name, NUL, its float64 sum (8 bytes,
// little-endian), in name order.
QByteArray squaresBytes(const std::vector<std::pair<std::string, double>>& squares)
{
    QByteArray bytes;
    for (const auto& [name, sum] : squares) {
        bytes.append(name.data(), qsizetype(name.size()));
        bytes.append('\0');
        bytes.append(reinterpret_cast<const char*>(&sum), sizeof sum);
    }
    return bytes;
}

// Another stage's sums: exactly its parameters' names, in order, each sum finite and not negative.
core::Result<std::vector<std::pair<std::string, double>>> squaresOf(const QByteArray& bytes, const portable::Stage& stage)
{
    std::vector<std::pair<std::string, double>> squares;
    qsizetype at = 0;
    for (const auto& [parameter, gradient] : stage.gradients) {
        const auto& name = stage.program.values[std::size_t(parameter)].name;
        const auto end = bytes.indexOf('\0', at);
        double sum = 0.0;
        if (end < 0 || bytes.mid(at, end - at) != QByteArray::fromStdString(name)
            || end + 1 + qsizetype(sizeof sum) > bytes.size())
            return core::Error { QStringLiteral("squares"), QStringLiteral("not the sums of the stage's tensors") };
        std::memcpy(&sum, bytes.constData() + end + 1, sizeof sum);
        if (!std::isfinite(sum) || sum < 0.0)
            return core::Error { QStringLiteral("squares"), QStringLiteral("a sum of squares that is not finite") };
        squares.emplace_back(name, sum);
        at = end + 1 + qsizetype(sizeof sum);
    }
    if (at != bytes.size())
        return core::Error { QStringLiteral("squares"), QStringLiteral("more than the sums of the stage's tensors") };
    return squares;
}

} // namespace

namespace {

// A stage's side of one step's trades: each tensor through the link, its hash logged in order.
struct Trades {
    StageLink& link;
    std::int64_t step;
    QList<StageTensor>& tensors;

    // Errors of the link, and what another stage sent that the schedule does not: field "link".
    core::Status send(std::int64_t peer, StageLink::Kind kind, std::int64_t m, const QByteArray& bytes)
    {
        if (auto status = link.send(peer, kind, step, m, bytes); !status)
            return core::Error { QStringLiteral("link"), status.error().message };
        tensors.append({ true, peer, kind, step, m, core::Digest::ofBytes(bytes) });
        return {};
    }
    // expected: the tensor's size in bytes (-1: any, the sums).
    core::Result<QByteArray> receive(std::int64_t peer, StageLink::Kind kind, std::int64_t m, qsizetype expected = -1)
    {
        auto bytes = link.receive(peer, kind, step, m);
        if (!bytes)
            return core::Error { QStringLiteral("link"), bytes.error().message };
        tensors.append({ false, peer, kind, step, m, core::Digest::ofBytes(*bytes) });
        if (expected >= 0 && bytes->size() != expected)
            return core::Error { QStringLiteral("link"),
                QStringLiteral("stage %1 sent %2 bytes of %3 for micro-batch %4, not %5")
                    .arg(peer)
                    .arg(bytes->size())
                    .arg(core::nameOf(kind))
                    .arg(m)
                    .arg(expected) };
        return bytes;
    }
};

std::span<const float> floatsOf(const QByteArray& bytes)
{
    return { reinterpret_cast<const float*>(bytes.constData()), std::size_t(bytes.size()) / sizeof(float) };
}

// What crosses a stage's boundary, as bytes: float32 as computed, or int8 rows of the model's width
// (task.int8StageTensors; portable::quantiseRows).
struct Boundary {
    bool int8 = false;
    std::int64_t width = 0;
    std::vector<float> decoded;
    std::vector<char> encoded;

    // -1 never: a boundary is whole rows of the model's width (checked where the stage starts).
    qsizetype bytesOf(std::int64_t elements) const
    {
        return int8 ? qsizetype(std::max<std::int64_t>(0, portable::int8Bytes(elements, width)))
                    : qsizetype(elements) * qsizetype(sizeof(float));
    }
    // The floats a received tensor holds (its size was checked against bytesOf).
    core::Result<std::span<const float>> decode(const QByteArray& bytes)
    {
        if (!int8)
            return floatsOf(bytes);
        if (auto error = portable::dequantiseRows({ bytes.constData(), std::size_t(bytes.size()) }, width, decoded);
            !error.empty())
            return core::Error { QStringLiteral("link"), QString::fromStdString(error) };
        return std::span<const float>(decoded);
    }
    core::Result<QByteArray> encode(const std::vector<float>& values)
    {
        if (!int8)
            return QByteArray(reinterpret_cast<const char*>(values.data()), qsizetype(values.size() * sizeof(float)));
        if (auto error = portable::quantiseRows(values, width, encoded); !error.empty())
            return core::Error { QStringLiteral("stage"), QString::fromStdString(error) };
        return QByteArray(encoded.data(), qsizetype(encoded.size()));
    }
};

// The clipping factor of a step (docs/DETERMINISM.md, "Pipeline stages"): this stage's sums sent to
// every other stage, theirs received in stage order, and the factor of them all.
core::Result<float> tradeClipFactor(
    Trades& trades, const std::vector<portable::Stage>& stages, std::int64_t s, portable::StageStep& run, double clipNorm)
{
    const auto S = std::int64_t(stages.size());
    std::vector<std::vector<std::pair<std::string, double>>> all(static_cast<std::size_t>(S));
    all[std::size_t(s)] = run.squares();
    const auto own = squaresBytes(all[std::size_t(s)]);
    for (std::int64_t other = 0; other < S; ++other) {
        if (other == s)
            continue;
        if (auto status = trades.send(other, StageLink::Kind::Squares, 0, own); !status)
            return status.error();
    }
    for (std::int64_t other = 0; other < S; ++other) {
        if (other == s)
            continue;
        auto bytes = trades.receive(other, StageLink::Kind::Squares, 0);
        if (!bytes)
            return bytes.error();
        auto squares = squaresOf(*bytes, stages[std::size_t(other)]);
        if (!squares)
            return core::Error { QStringLiteral("link"),
                QStringLiteral("stage %1's sums: %2").arg(other).arg(squares.error().message) };
        all[std::size_t(other)] = std::move(*squares);
    }
    return portable::globalClipFactor(all, clipNorm);
}

} // namespace

// docs/DETERMINISM.md, "Pipeline stages": the stage's halves in oneForwardOneBackward's order, each
// forward reading its micro-batch's rows (stage 0 the tokens, the last stage the targets) or the
// activation stage - 1 sent, each backward the gradient stage + 1 sent; then, with clipping, the
// stages' sums traded, and the stage's update.
core::Result<double> PortableStep::runStage(
    std::int64_t step, const at::Tensor& x, const at::Tensor& y, StageLink& link, QList<StageTensor>& tensors)
{
    auto stages = stagesOf(step);
    if (!stages)
        return stages.error();
    const auto& task = m_task;
    const auto S = task.stages, s = task.stage, M = std::max<std::int64_t>(task.microBatches, 1);
    const auto& stage = (**stages)[std::size_t(s)];
    const auto tokens = x.to(at::kLong).contiguous(), targets = y.to(at::kLong).contiguous();
    const auto rows = tokens.numel() / M;
    auto rowsOf = [&](const at::Tensor& t, std::int64_t m) {
        return std::span<const std::int64_t>(t.data_ptr<std::int64_t>() + m * rows, std::size_t(rows));
    };
    const bool created = !(step > 0 || task.carriesOptimizer);
    m_adamStep.fill_(m_optimizer.m_steps);
    QString missing;
    portable::StageStep run(stage, M, S - s, m_executor.threads());
    run.begin([&](const portable::Value& value) -> void* {
        auto memory = stateMemory(value, false, created);
        if (!memory)
            missing = memory.error().message;
        return memory ? *memory : nullptr;
    });
    auto fail = [&](const std::string& why) {
        return core::Error { QStringLiteral("stage"), missing.isEmpty() ? QString::fromStdString(why) : missing };
    };
    Trades trades { link, step, tensors };
    Boundary boundary { task.int8StageTensors, task.model.width, {}, {} };
    const auto boundaryBytes = boundary.bytesOf(run.boundaryElements());
    std::vector<float> sent;
    for (const auto& slot : portable::oneForwardOneBackward(S, M, s)) {
        const auto m = slot.micro;
        const bool forward = slot.pass == portable::Pass::Forward;
        const auto kind = forward ? StageLink::Kind::Activation : StageLink::Kind::Gradient;
        const auto from = forward ? s - 1 : s + 1, to = forward ? s + 1 : s - 1;
        QByteArray received;
        std::span<const float> values;
        if (from >= 0 && from < S) {
            auto bytes = trades.receive(from, kind, m, boundaryBytes);
            if (!bytes)
                return bytes.error();
            received = std::move(*bytes);
            auto decoded = boundary.decode(received);
            if (!decoded)
                return decoded.error();
            values = *decoded;
        }
        const auto error = forward ? run.forward(s == 0 ? rowsOf(tokens, m) : std::span<const std::int64_t> {}, values,
                               s == S - 1 ? rowsOf(targets, m) : std::span<const std::int64_t> {}, sent)
                                   : run.backward(values, sent);
        if (!error.empty())
            return fail(error);
        if (to >= 0 && to < S) {
            auto bytes = boundary.encode(sent);
            if (!bytes)
                return bytes.error();
            if (auto status = trades.send(to, kind, m, *bytes); !status)
                return status.error();
        }
    }
    float factor = 1.0f;
    if (stage.clipFactor >= 0) {
        auto traded = tradeClipFactor(trades, **stages, s, run, task.optimizer.clipNorm);
        if (!traded)
            return traded.error();
        factor = *traded;
    }
    if (auto error = run.update(factor); !error.empty())
        return fail(error);
    m_optimizer.m_steps = m_adamStep.item<std::int64_t>();
    if (!task.optimizer.isAdam())
        ++m_optimizer.m_steps;
    return s == S - 1 ? run.loss() : 0.0;
}

core::Result<std::vector<at::Tensor>> PortableStep::operandsOf(
    std::int64_t step, const at::Tensor& x, const at::Tensor& y, std::size_t stop)
{
    if (m_task.microBatches > 1)
        return core::Error { QStringLiteral("microBatches"), QStringLiteral("a micro-batched step has no operands yet") };
    auto program = prepare(step, x, y);
    if (!program)
        return program.error();
    if (stop >= program->instructions.size())
        return core::Error { QStringLiteral("instruction"),
            QStringLiteral("step %1 has %2 instructions, not %3").arg(step + 1).arg(program->instructions.size()).arg(stop + 1) };
    for (std::size_t i = 0; i < stop; ++i)
        m_executor.run(*program, i);
    std::vector<at::Tensor> operands;
    for (int v : program->instructions[stop].inputs) {
        const auto& value = program->values[std::size_t(v)];
        const auto type = value.dtype == portable::DType::Int64 ? at::kLong : at::kFloat;
        operands.push_back(torch::from_blob(m_executor.memory(v), value.shape, type).clone());
    }
    return operands;
}

} // namespace tessera::compute::detail
