#include "weights.h"

#include "detail/sampling.h"

#include "detail/datasets.h"
#include "detail/models.h"
#include "detail/optimizer.h"
#include "detail/tensors.h"
#include "detail/update.h"

#include <compute/portable/kernels.h>
#include <compute/portable/stages.h>
#include <core/readfile.h>
#include <core/seeds.h>

#include <torch/torch.h>

#include <functional>

#include <QFileInfo>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace tessera::compute {

using namespace detail;

namespace {

// The owner's starting weights in place of the model's own: every tensor the model has, of its
// shape and dtype, and nothing else.
core::Status loadInitialWeights(Model& model, const core::ModelSpec& spec, const ComputeEnvironment& environment)
{
    const QString field = QStringLiteral("model.initialWeights");
    const auto path = environment.locate(spec.initialWeightsSha256, spec.initialWeightsFile);
    if (!path)
        return core::Error { field, QStringLiteral("the initial weights are not on this machine") };
    if (QFileInfo(*path).size() > (qint64(1) << 30))
        return core::Error { field, QStringLiteral("the initial weights are larger than 1 GiB") };
    auto bytes = core::readFile(*path);
    if (!bytes)
        return core::Error { field, bytes.error().message };
    auto given = unpickleTensors(*bytes, QStringLiteral("%1 is not a state dict saved by torch.save").arg(*path));
    if (!given)
        return core::Error { field, given.error().message };
    sortByName(*given);
    if (auto status = model.loadState(*given, QStringLiteral("the initial weights"), true); !status)
        return core::Error { field, status.error().message };
    return {};
}

// The portable kernels' own first weights (docs/DETERMINISM.md, "Portable mode"): LibTorch's
// uniform draws differ between CPU capabilities, so a job in portable mode starts from these, the
// same on every broker. Each tensor (in name order, i = 0, 1, ...) is uniform in +-1/sqrt(fan_in),
// fan_in being its layer's weight's second dimension, from the seed derive(initSeed, [i]); a gpt's
// as nanoGPT's, with uniform draws of its standard deviations (gptInitialisation).
void gptInitialisation(Model& model, std::int64_t seed, std::int64_t layers)
{
    const auto initSeed = core::deriveSeed(std::uint64_t(seed), { std::uint64_t(core::SeedPurpose::Initialisation) });
    auto parameters = model.parameters();
    torch::NoGradGuard noGrad;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
        auto& [name, tensor] = parameters[i];
        const bool norm = name.find("ln_") != std::string::npos;
        const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
        if (norm || bias) {
            tensor.fill_(norm && !bias ? 1.0 : 0.0);
            continue;
        }
        // U(-a, a) has the standard deviation a / sqrt(3).
        const double deviation = name.find("c_proj.weight") != std::string::npos ? 0.02 / std::sqrt(2.0 * double(layers)) : 0.02;
        portable::uniformFill(tensor.data_ptr<float>(), tensor.numel(), float(deviation * std::sqrt(3.0)),
            core::deriveSeed(initSeed, { std::uint64_t(i) }));
    }
}

void portableInitialisation(Model& model, std::int64_t seed)
{
    const auto initSeed = core::deriveSeed(std::uint64_t(seed), { std::uint64_t(core::SeedPurpose::Initialisation) });
    auto parameters = model.parameters();
    torch::NoGradGuard noGrad;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
        auto& [name, tensor] = parameters[i];
        // A weight's inputs per output: its elements over its first dimension (in x 3 x 3 for a
        // convolution); a bias takes its weight's.
        auto fanInOf = [](const at::Tensor& weight) { return weight.dim() >= 2 ? weight.numel() / weight.size(0) : 1; };
        std::int64_t fanIn = fanInOf(tensor);
        if (tensor.dim() == 1 && name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
            const std::string weight = name.substr(0, name.size() - 5) + ".weight";
            for (const auto& [other, w] : parameters) {
                if (other == weight && w.dim() >= 2)
                    fanIn = fanInOf(w);
            }
        }
        const float bound = 1.0f / std::sqrt(float(fanIn));
        portable::uniformFill(tensor.data_ptr<float>(), tensor.numel(), bound, core::deriveSeed(initSeed, { std::uint64_t(i) }));
    }
}

} // namespace

core::Result<Weights> initialWeights(const core::JobSpec& spec, const ComputeEnvironment& environment)
{
    // The built-in dataset's shape is known: pricing a job (the broker's QUOTE) need not load 188 MB.
    std::vector<std::int64_t> shape = FashionMnistSampleShape;
    std::int64_t classes = FashionMnistClasses;
    if (spec.dataset.isText()) {
        shape = { spec.model.context };
        classes = ByteVocabulary;
    } else if (spec.dataset.source != core::DatasetSpec::Source::Builtin) {
        auto data = loadDataset(spec.dataset, environment, spec.model.context);
        if (!data)
            return data.error();
        shape = data->train->sampleShape();
        classes = data->train->classes;
    }
    auto model = buildModel(spec.model, shape, classes,
        core::deriveSeed(std::uint64_t(spec.training.seed), { std::uint64_t(core::SeedPurpose::Initialisation) }), environment);
    if (!model)
        return model.error();
    if (!spec.model.initialWeightsSha256.isNull() || !spec.model.initialWeightsFile.isEmpty()) {
        if (auto status = loadInitialWeights(**model, spec.model, environment); !status)
            return status.error();
    } else if (spec.training.determinism == core::TrainingSpec::Determinism::Portable) {
        if (spec.model.zoo == QLatin1String("gpt"))
            gptInitialisation(**model, spec.training.seed, spec.model.layers);
        else
            portableInitialisation(**model, spec.training.seed);
    }
    auto state = (*model)->state();
    if (spec.aggregation.optimizerState == core::AggregationSpec::OptimizerState::Averaged) {
        // Round 0's shards start from the state of an optimizer that has not stepped.
        for (auto& entry : withPrefix(CarriedPrefix, Optimizer(spec.optimizer, (*model)->parameters()).initialState()))
            state.push_back(std::move(entry));
        sortByName(state);
    }
    return Weights { pickleTensors(state), canonicalHash(state) };
}

core::Result<std::int64_t> elementCount(const QByteArray& weights)
{
    auto tensors = unpickleTensors(weights, QStringLiteral("not a dict of tensors"));
    if (!tensors)
        return tensors.error();
    std::int64_t count = 0;
    for (const auto& [name, tensor] : modelPart(std::move(*tensors)))
        count += tensor.numel();
    return count;
}

core::Result<double> relativeDistance(const QByteArray& a, const QByteArray& b, const QByteArray& base)
{
    auto first = unpickleTensors(a, QStringLiteral("not a dict of tensors"));
    if (!first)
        return first.error();
    auto second = unpickleTensors(b, QStringLiteral("not a dict of tensors"));
    if (!second)
        return second.error();
    sortByName(*first);
    sortByName(*second);
    if (!base.isEmpty()) { // revealed forms: compressed updates stand for base + update
        auto round = unpickleTensors(base, QStringLiteral("the round's weights are not a dict of tensors"));
        if (!round)
            return round.error();
        sortByName(*round);
        for (auto* revealed : { &*first, &*second }) {
            auto weights = revealedWeights(*revealed, *round);
            if (!weights)
                return weights.error();
            *revealed = std::move(*weights);
        }
    }
    if (first->size() != second->size())
        return core::Error { QStringLiteral("weights"), QStringLiteral("the two results hold different tensors") };
    double difference = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < first->size(); ++i) {
        const auto& [nameA, x] = (*first)[i];
        const auto& [nameB, y] = (*second)[i];
        if (nameA != nameB || x.sizes() != y.sizes())
            return core::Error { QStringLiteral("weights"),
                QStringLiteral("the two results differ in tensor %1").arg(QString::fromStdString(nameA)) };
        const auto x64 = x.to(torch::kFloat64), y64 = y.to(torch::kFloat64);
        difference += (x64 - y64).pow(2).sum().item<double>();
        norm += y64.pow(2).sum().item<double>();
    }
    return norm > 0.0 ? std::sqrt(difference / norm) : std::sqrt(difference);
}

core::Result<core::Digest> canonicalHashOf(const QByteArray& weights)
{
    auto tensors = unpickleTensors(weights, QStringLiteral("not a dict of tensors"));
    if (!tensors)
        return tensors.error();
    return canonicalHash(*tensors);
}

namespace {

// The tensors of the round's weights a stage's reveal stands for: N of whole weights, of an int8
// update N of update/N and keep/N.
void keepStagePart(NamedTensors& base, const NamedTensors& revealed)
{
    std::set<std::string> named;
    for (const auto& [name, tensor] : revealed) {
        std::string n = name;
        for (const std::string prefix : { "update/", "scale/", "keep/" }) {
            if (n.rfind(prefix, 0) == 0) {
                n = n.substr(prefix.size());
                break;
            }
        }
        named.insert(n);
    }
    std::erase_if(base, [&](const auto& entry) { return !named.count(entry.first); });
}

} // namespace

// Whether a tensor of the round's weights (a parameter or its carried optimizer state) is stage
// s's: its blocks' (transformer.h.i.*), stage 0's also the embeddings, the last's the rest.
bool ofStage(std::string name, const RevealedStage& stage)
{
    for (const std::string prefix : { "optimizer/exp_avg_sq/", "optimizer/exp_avg/", "optimizer/momentum/" }) {
        if (name.rfind(prefix, 0) == 0) {
            name = name.substr(prefix.size());
            break;
        }
    }
    if (name == "optimizer/adam_step")
        return true; // every stage keeps the count
    const auto first = portable::stageBlocks(stage.layers, stage.stages);
    const std::string block = "transformer.h.";
    if (name.rfind(block, 0) == 0) {
        const auto index = std::strtoll(name.c_str() + block.size(), nullptr, 10);
        return index >= first[std::size_t(stage.stage)] && index < first[std::size_t(stage.stage + 1)];
    }
    if (name.rfind("transformer.wte.", 0) == 0 || name.rfind("transformer.wpe.", 0) == 0)
        return stage.stage == 0;
    return stage.stage == stage.stages - 1;
}

core::Result<RevealedForm> inspectRevealed(
    const QString& revealedPath, const QString& roundWeightsPath, const std::optional<RevealedStage>& stage)
{
    auto tensors = unpickleTensorsFromFile(revealedPath, QStringLiteral("not a dict of tensors"));
    if (!tensors)
        return tensors.error();
    auto base = unpickleTensorsFromFile(roundWeightsPath, QStringLiteral("the round's weights are not a dict of tensors"));
    if (!base)
        return base.error();
    RevealedForm form;
    if (stage) {
        auto expected = *base;
        std::erase_if(expected, [&](const auto& entry) { return !ofStage(entry.first, *stage); });
        keepStagePart(*base, *tensors);
        auto namesOf = [](const NamedTensors& list) {
            std::set<std::string> names;
            for (const auto& entry : list)
                names.insert(entry.first);
            return names;
        };
        if (stage->stage < 0 || stage->stage >= stage->stages || namesOf(expected) != namesOf(*base))
            form.unfit = QStringLiteral("the revealed tensors are not stage %1's share of the model").arg(stage->stage);
    }
    form.canonicalHash = canonicalHash(*tensors);
    form.compression = detail::isUpdateForm(*tensors) ? core::Compression::Int8 : core::Compression::None;
    sortByName(*tensors);
    sortByName(*base);
    double squares = 0.0;
    auto inspected = guarded(QStringLiteral("inspecting the result"), [&] {
        torch::NoGradGuard noGrad;
        auto status = forEachDelta(*tensors, *base, [&](std::size_t i, const at::Tensor& delta) {
            const auto& [name, w] = (*base)[i];
            if (!form.unfit.isEmpty() || !w.is_floating_point())
                return; // counters: the shard's own value, whatever it is
            const QString what = QString::fromStdString(name);
            if (delta.scalar_type() != w.scalar_type() || delta.sizes() != w.sizes()) {
                form.unfit = QStringLiteral("%1 is not of the model's type and shape").arg(what);
                return;
            }
            if (delta.numel() == 0)
                return;
            // One pass for the extremes (a NaN makes them NaN), one for the norm: a few times a
            // canonical hash's cost (docs/PERFORMANCE.md, "Inspecting a reveal").
            const auto [low, high] = at::aminmax(delta);
            const double least = low.item<double>(), most = high.item<double>();
            if (!std::isfinite(least) || !std::isfinite(most)) {
                form.unfit = QStringLiteral("%1 is not finite").arg(what);
            } else if (isCarried(name)) { // the shard's own optimizer state, not a change
                if (name.find("exp_avg_sq/") != std::string::npos && least < 0.0)
                    form.unfit = QStringLiteral("%1 (a second moment) is negative").arg(what);
            } else if (std::max(-least, most) > 1e30 && !torch::isfinite(w + delta).all().item<bool>()) {
                form.unfit = QStringLiteral("%1 leads to weights that are not finite").arg(what);
            } else {
                // Finite elements whose norm overflows float: an implausible update (re-executed).
                const double norm = delta.norm().item<double>();
                squares += std::isfinite(norm) ? norm * norm : std::numeric_limits<double>::infinity();
            }
        });
        if (!status)
            form.unfit = status.error().message;
        return 0;
    });
    if (!inspected)
        form.unfit = inspected.error().message;
    form.updateNorm = std::sqrt(squares);
    return form;
}

core::Result<Evaluation> evaluate(
    const core::JobSpec& spec, QByteArray weights, const ComputeEnvironment& environment, int threads)
{
    // The weights' bytes, their tensors and the model exist two at a time, never all three.
    auto tensors = unpickleTensors(weights, QStringLiteral("the weights are not a dict of tensors"));
    weights = QByteArray();
    if (!tensors)
        return tensors.error();
    *tensors = modelPart(std::move(*tensors)); // a round's weights may carry the optimizer's state
    auto data = loadDataset(spec.dataset, environment, spec.model.context);
    if (!data)
        return data.error();
    const auto& split = data->test ? data->test : data->train;
    auto model = buildModel(spec.model, data->train->sampleShape(), data->train->classes, 0, environment);
    if (!model)
        return model.error();
    if (auto status = (*model)->loadState(*tensors); !status)
        return status.error();
    tensors->clear();

    auto device = resolveDevice(environment.device);
    if (!device)
        return device.error();
    (*model)->to(*device);
    at::set_num_threads(threads);
    return guarded(QStringLiteral("evaluating"), [&] {
        torch::NoGradGuard noGrad;
        (*model)->setTraining(false);
        // Per sample, or per token for a language model: a window of L tokens is L predictions.
        const std::int64_t perSample = split->y.dim() == 2 ? split->y.size(1) : 1;
        const std::int64_t Batch = std::max<std::int64_t>(1, 1000 / perSample);
        double lossSum = 0.0;
        std::int64_t correct = 0;
        const std::int64_t total = split->size();
        for (std::int64_t begin = 0; begin < total; begin += Batch) {
            const std::int64_t end = std::min(total, begin + Batch);
            const auto x = split->slice(begin, end).to(*device);
            const auto y = split->y.slice(0, begin, end).to(*device);
            const auto logits = (*model)->forward(x);
            lossSum += lossOf(logits, y, at::Reduction::Sum).item<double>();
            correct += correctOf(logits, y);
        }
        const double predictions = double(total * perSample);
        return Evaluation { lossSum / predictions, double(correct) / predictions, total };
    });
}

core::Result<QByteArray> sampleText(
    const core::ModelSpec& spec, const QByteArray& weights, const SampleOptions& options, const ComputeEnvironment& environment)
{
    if (spec.context < 1)
        return core::Error { QStringLiteral("model"), QStringLiteral("only a language model (a gpt) writes text") };
    if (options.tokens < 0 || options.tokens > 100'000)
        return core::Error { QStringLiteral("tokens"), QStringLiteral("between 0 and 100000") };
    if (!(options.temperature >= 0.0) || options.temperature > 100.0)
        return core::Error { QStringLiteral("temperature"), QStringLiteral("between 0 and 100") };
    auto tensors = unpickleTensors(weights, QStringLiteral("the weights are not a dict of tensors"));
    if (!tensors)
        return tensors.error();
    *tensors = modelPart(std::move(*tensors));
    sortByName(*tensors);
    std::int64_t vocabulary = spec.vocabulary;
    for (const auto& [name, tensor] : *tensors) {
        if (name == "transformer.wte.weight" && tensor.dim() == 2 && vocabulary == 0)
            vocabulary = tensor.size(0);
    }
    if (vocabulary < 1)
        return core::Error { QStringLiteral("weights"), QStringLiteral("the weights have no token embedding") };
    auto model = buildModel(spec, { spec.context }, vocabulary, 0, environment);
    if (!model)
        return model.error();
    if (auto status = (*model)->loadState(*tensors); !status)
        return status.error();
    tensors->clear();
    std::vector<std::int64_t> sequence;
    for (const char byte : options.prompt)
        sequence.push_back(std::int64_t(static_cast<unsigned char>(byte)));
    if (sequence.empty())
        sequence.push_back('\n');
    return guarded(QStringLiteral("sampling"), [&] {
        torch::NoGradGuard noGrad;
        (*model)->setTraining(false);
        QByteArray text;
        for (std::int64_t i = 0; i < options.tokens; ++i) {
            const auto length = std::min<std::int64_t>(std::int64_t(sequence.size()), spec.context);
            const auto input
                = torch::tensor(std::vector<std::int64_t>(sequence.end() - length, sequence.end()), torch::kInt64).unsqueeze(0);
            const auto logits = (*model)->forward(input)[0][length - 1].to(torch::kFloat64).contiguous();
            const double* scores = logits.data_ptr<double>();
            const auto n = logits.numel();
            const auto next = drawToken(scores, n, options.temperature, options.seed, std::uint64_t(i));
            sequence.push_back(next);
            if (vocabulary <= 256)
                text.append(char(next));
            else
                text.append(QByteArray::number(next) + ' ');
        }
        return text;
    });
}

core::Status exportTorchScript(const core::ModelSpec& model, const QByteArray& weights, const QString& path)
{
    auto tensors = unpickleTensors(weights, QStringLiteral("the weights are not a dict of tensors"));
    if (!tensors)
        return tensors.error();
    auto module = zooToTorchScript(model, modelPart(std::move(*tensors)));
    if (!module)
        return module.error();
    auto saved = guarded(QStringLiteral("writing %1").arg(path), [&] {
        module->save(path.toStdString());
        return true;
    });
    if (!saved)
        return saved.error();
    return {};
}

namespace {

// y += alpha * x, in float32 through the portable kernels (two roundings per element on every
// CPU, so a round aggregates to the same bits anywhere); other types through LibTorch.
void addScaled(at::Tensor& y, const at::Tensor& x, double alpha)
{
    if (y.scalar_type() != at::kFloat || x.scalar_type() != at::kFloat || !y.is_contiguous() || y.sizes() != x.sizes()) {
        y.add_(x, alpha);
        return;
    }
    const auto values = x.contiguous();
    portable::addScaled(y.data_ptr<float>(), values.data_ptr<float>(), y.numel(), float(alpha));
}

} // namespace

namespace {

const QString GlobalDamaged = QStringLiteral("the global weights are not a dict of tensors");

// The round's weights W, read when the arithmetic first needs their values. Until then, where
// `shapes` can say them, their names, shapes and types are enough: int8 updates decode without W,
// so W is read after the shards' changes are summed, and W and the sum g are not whole in memory
// at once until the step (the broker's peak at the 40 M gpt point: docs/BROKER.md, "Memory").
struct GlobalWeights {
    std::function<core::Result<NamedTensors>()> read;
    std::function<core::Result<NamedTensors>()> shapes; // empty: read at once
};

// The round's weights as the aggregation holds them: their names, shapes and types first where
// GlobalWeights::shapes can say them, their values once readValues() is called.
class RoundBase {
public:
    explicit RoundBase(const GlobalWeights& global)
        : m_global(global)
    { }
    core::Status open()
    {
        auto base = m_global.shapes ? m_global.shapes() : m_global.read();
        if (!base)
            return base.error();
        sortByName(*base);
        tensors = std::move(*base);
        m_read = !m_global.shapes;
        return {};
    }
    bool hasValues() const { return m_read; }
    core::Status readValues()
    {
        if (m_read)
            return {};
        auto values = m_global.read();
        if (!values)
            return values.error();
        sortByName(*values);
        if (values->size() != tensors.size())
            return core::Error { QStringLiteral("weights"), QStringLiteral("the global weights changed while being read") };
        tensors = std::move(*values);
        m_read = true;
        return {};
    }
    NamedTensors tensors;

private:
    const GlobalWeights& m_global;
    bool m_read = false;
};

// The outer gradient g = W - mean(W_i), tensor by tensor as the round's weights are ordered, and
// the integer buffers (counters), which come from the first shard.
struct OuterGradient {
    std::vector<at::Tensor> gradients;
    std::vector<at::Tensor> taken;
};

// The updates in shard order, and their samples N; an error when one has none.
core::Result<std::int64_t> sortedSamples(QList<ShardUpdate>& updates)
{
    if (updates.isEmpty())
        return core::Error { QStringLiteral("updates"), QStringLiteral("a round needs at least one shard result") };
    std::sort(updates.begin(), updates.end(), [](const ShardUpdate& a, const ShardUpdate& b) { return a.shard < b.shard; });
    std::int64_t totalSamples = 0;
    for (const auto& update : updates) {
        if (update.samples <= 0)
            return core::Error { QStringLiteral("updates"), QStringLiteral("shard %1 has no samples").arg(update.shard) };
        totalSamples += update.samples;
    }
    return totalSamples;
}

// Adds one shard's (n_i / N) * (W - W_i) to g, one of its tensors decoded at a time: the same
// operations per tensor as over all shards at once (so the same bits), with one shard's result in
// memory, not every shard's weights.
core::Status addShard(const ShardUpdate& update, bool first, double share, RoundBase& base, OuterGradient& g)
{
    const QString damaged = QStringLiteral("shard %1's weights are not a dict of tensors").arg(update.shard);
    auto tensors = update.weights.isEmpty() && !update.weightsFile.isEmpty()
        ? unpickleTensorsFromFile(update.weightsFile, damaged)
        : unpickleTensors(update.weights, damaged);
    if (!tensors)
        return tensors.error();
    sortByName(*tensors);
    if (!base.hasValues() && detail::deltaReadsBase(*tensors, base.tensors)) {
        if (auto status = base.readValues(); !status)
            return status.error();
    }
    // Final weights or a compressed update alike: the shard's change from W, tensor by tensor.
    auto added = forEachDelta(*tensors, base.tensors, [&](std::size_t i, const at::Tensor& delta) {
        const auto& [name, w] = base.tensors[i];
        if (!w.is_floating_point()) {
            if (first)
                g.taken[i] = delta.clone();
            return;
        }
        if (!g.gradients[i].defined())
            g.gradients[i] = torch::zeros(w.sizes(), w.options().device(at::kCPU)); // w may be only its shape yet
        if (isCarried(name)) { // the shard's own optimizer state: its weighted mean
            addScaled(g.gradients[i], delta, share);
            return;
        }
        // W - W_i = -(W_i - W) exactly, so the same bits as adding (W - W_i) * share.
        addScaled(g.gradients[i], delta, -share);
    });
    if (!added)
        return core::Error { QStringLiteral("updates"),
            QStringLiteral("shard %1's result does not fit the model: %2").arg(update.shard).arg(added.error().message) };
    return {};
}

// A float tensor's outer step before the learning rate: g, or Nesterov's g + mu * buffer with the
// buffer mu * buffer + g carried to the next round.
at::Tensor outerStep(const core::AggregationSpec& spec, const std::string& name, at::Tensor gradient,
    const NamedTensors& momentum, NamedTensors& nextMomentum)
{
    if (spec.method != core::AggregationSpec::Method::Nesterov)
        return gradient;
    at::Tensor buffer;
    for (const auto& [key, tensor] : momentum) {
        if (key == name)
            buffer = tensor.clone();
    }
    if (!buffer.defined())
        buffer = gradient.clone();
    else
        buffer.mul_(spec.outerMomentum).add_(gradient);
    at::Tensor step = gradient.clone();
    addScaled(step, buffer, spec.outerMomentum);
    nextMomentum.emplace_back(name, buffer);
    return step;
}

// W' in W's own tensors (each owns its memory: unpickleTensors shares no storage), and each g let
// go of as soon as it is used: W -= step * lr is the same two operations, so the same bits, as
// W - step * lr, without a third tensor as large as the largest layer. `change`: the round's change
// in the revealed form (int8), what nodes holding W download.
core::Status applyOuterStep(const core::AggregationSpec& spec, NamedTensors& base, OuterGradient& g, const NamedTensors& momentum,
    NamedTensors& nextMomentum, NamedTensors& change)
{
    const bool compressed = spec.compression == core::Compression::Int8;
    const bool carry = spec.optimizerState == core::AggregationSpec::OptimizerState::Averaged;
    for (std::size_t i = 0; i < base.size(); ++i) {
        auto& [name, w] = base[i];
        if (isCarried(name) && !carry)
            continue; // dropped later: nothing carries it on (a job's last round)
        if (!w.is_floating_point() || isCarried(name)) {
            w = w.is_floating_point() ? std::move(g.gradients[i]) : g.taken[i];
            if (compressed)
                detail::appendKept(name, w, change);
            continue;
        }
        // g leaves OuterGradient here: it lives no longer than its tensor's step.
        at::Tensor step = outerStep(spec, name, std::exchange(g.gradients[i], at::Tensor()), momentum, nextMomentum);
        step.mul_(spec.outerLr);
        if (compressed && w.scalar_type() == at::kFloat) {
            // W_{r+1} = W_r + q * scale of the change -lr * step: what a node that holds W_r
            // rebuilds bit for bit from the int8 change (the negation is exact).
            auto decoded = detail::appendQuantisedChange(name, step.neg_(), change);
            if (!decoded)
                return decoded.error();
            step = at::Tensor();
            w.add_(*decoded);
            continue;
        }
        w.sub_(step);
        if (compressed)
            detail::appendKept(name, w, change); // float64 and the like travel whole
    }
    if (!carry)
        base = modelPart(std::move(base));
    return {};
}

// W' pickled (into weightsOut when named: a failure there is an error of field "blob"), the
// round's int8 change and the outer optimizer's state. W' first, so that its tensors and the
// change's are in memory together, not W's bytes too.
core::Result<AggregationOutput> outputOf(const core::AggregationSpec& spec, const NamedTensors& base, NamedTensors& change,
    const NamedTensors& nextMomentum, const QString& weightsOut)
{
    AggregationOutput output;
    if (weightsOut.isEmpty()) {
        output.weights = Weights { pickleTensors(base), canonicalHash(base) };
    } else if (auto written = pickleTensorsToFile(base, weightsOut); !written) {
        return core::Error { QStringLiteral("blob"), written.error().message };
    } else {
        output.weights = Weights { {}, canonicalHash(base) };
    }
    if (spec.compression == core::Compression::Int8) {
        detail::appendCompressionMeta(change);
        sortByName(change);
        output.change = pickleTensors(change);
        change.clear();
    }
    if (spec.method == core::AggregationSpec::Method::Nesterov)
        output.outerState = pickleTensors(nextMomentum);
    return output;
}

core::Result<AggregationOutput> aggregateOnto(const core::AggregationSpec& spec, const GlobalWeights& global,
    QList<ShardUpdate> updates, const QByteArray& outerState, const QString& weightsOut)
{
    const auto totalSamples = sortedSamples(updates);
    if (!totalSamples)
        return totalSamples.error();
    RoundBase base(global);
    if (auto status = base.open(); !status)
        return status.error();
    NamedTensors momentum;
    if (spec.method == core::AggregationSpec::Method::Nesterov && !outerState.isEmpty()) {
        auto state = unpickleTensors(outerState, QStringLiteral("the outer optimizer state is damaged"));
        if (!state)
            return state.error();
        momentum = std::move(*state);
    }
    // g accumulated in shard order, one shard at a time (addShard).
    OuterGradient g { std::vector<at::Tensor>(base.tensors.size()), std::vector<at::Tensor>(base.tensors.size()) };
    for (qsizetype s = 0; s < updates.size(); ++s) {
        const double share = double(updates[s].samples) / double(*totalSamples);
        if (auto status = addShard(updates[s], s == 0, share, base, g); !status)
            return status.error();
    }
    if (auto status = base.readValues(); !status)
        return status.error();
    auto aggregated = guarded(QStringLiteral("aggregating"), [&]() -> core::Result<AggregationOutput> {
        torch::NoGradGuard noGrad;
        NamedTensors nextMomentum;
        NamedTensors change;
        if (auto status = applyOuterStep(spec, base.tensors, g, momentum, nextMomentum, change); !status)
            return status.error();
        return outputOf(spec, base.tensors, change, nextMomentum, weightsOut);
    });
    if (!aggregated)
        return aggregated.error();
    return std::move(*aggregated);
}

} // namespace

core::Result<AggregationOutput> aggregate(
    const core::AggregationSpec& spec, QByteArray global, QList<ShardUpdate> updates, const QByteArray& outerState)
{
    GlobalWeights weights { [&] {
                               auto base = unpickleTensors(global, GlobalDamaged);
                               global = QByteArray(); // read: its tensors are all that is needed
                               return base;
                           },
        {} };
    return aggregateOnto(spec, weights, std::move(updates), outerState, {});
}

core::Result<AggregationOutput> aggregateFromFile(const core::AggregationSpec& spec, const QString& globalFile,
    QList<ShardUpdate> updates, const QByteArray& outerState, const QString& weightsOut)
{
    GlobalWeights weights { [&] { return unpickleTensorsFromFile(globalFile, GlobalDamaged); },
        [&] { return tensorShapesInFile(globalFile, GlobalDamaged); } };
    return aggregateOnto(spec, weights, std::move(updates), outerState, weightsOut);
}

core::Result<QByteArray> roundWeightsFromChange(const QByteArray& previous, const QByteArray& change)
{
    auto base = unpickleTensors(previous, QStringLiteral("the previous round's weights are not a dict of tensors"));
    if (!base)
        return base.error();
    sortByName(*base);
    auto form = unpickleTensors(change, QStringLiteral("the round's change is not a dict of tensors"));
    if (!form)
        return form.error();
    sortByName(*form);
    if (std::none_of(form->begin(), form->end(), [](const auto& entry) { return entry.first == "meta/compression"; }))
        return core::Error { QStringLiteral("update"), QStringLiteral("the round's change is not an int8 update") };
    torch::NoGradGuard noGrad;
    auto weights = detail::revealedWeights(*form, *base);
    if (!weights)
        return weights.error();
    return guarded(QStringLiteral("rebuilding the round's weights"), [&] { return pickleTensors(*weights); });
}

core::Result<NamedTensors> mergeStageTensors(std::vector<NamedTensors> parts)
{
    NamedTensors merged;
    std::map<std::string, at::Tensor> seen;
    for (std::size_t s = 0; s < parts.size(); ++s) {
        for (auto& [name, tensor] : parts[s]) {
            const auto found = seen.find(name);
            if (found == seen.end()) {
                seen.emplace(name, tensor);
                merged.emplace_back(name, tensor);
                continue;
            }
            if (!found->second.sizes().equals(tensor.sizes()) || found->second.scalar_type() != tensor.scalar_type()
                || !torch::equal(found->second, tensor))
                return core::Error {
                    QStringLiteral("weights"),
                    QStringLiteral("stages %1 and an earlier one both hold %2, unlike").arg(s).arg(QString::fromStdString(name))
                };
        }
    }
    sortByName(merged);
    return merged;
}

core::Result<core::Digest> mergeStageFiles(const QStringList& parts, const QString& out)
{
    auto written = guarded(QStringLiteral("merging the stages"), [&]() -> core::Result<core::Digest> {
        std::vector<NamedTensors> tensors;
        for (qsizetype s = 0; s < parts.size(); ++s) {
            auto part = unpickleTensorsFromFile(parts[s], QStringLiteral("stage %1's weights are not a dict of tensors").arg(s));
            if (!part)
                return part.error();
            tensors.push_back(std::move(*part));
        }
        auto merged = mergeStageTensors(std::move(tensors));
        if (!merged)
            return merged.error();
        if (auto status = pickleTensorsToFile(*merged, out); !status)
            return status.error();
        return canonicalHash(*merged);
    });
    if (!written)
        return written.error();
    return *written;
}

} // namespace tessera::compute
