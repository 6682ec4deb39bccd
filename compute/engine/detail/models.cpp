#include "models.h"

#include "scriptguard.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <type_traits>

#include <QRegularExpression>

#include <QFile>
#include <QFileInfo>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace tessera::compute::detail {

NamedTensors Model::state()
{
    NamedTensors all = parameters();
    for (auto& buffer : buffers())
        all.push_back(std::move(buffer));
    sortByName(all);
    return all;
}

QString shapeOf(const at::Tensor& tensor)
{
    QStringList sizes;
    for (const auto size : tensor.sizes())
        sizes.append(QString::number(size));
    return QStringLiteral("[%1]").arg(sizes.join(QStringLiteral(", ")));
}

core::Status Model::loadState(const NamedTensors& values, const QString& what, bool sameDtype)
{
    NamedTensors own = state();
    const std::map<std::string, at::Tensor> given(values.begin(), values.end());
    auto unfit = [](const QString& why) { return core::Error { QStringLiteral("weights"), why }; };
    // Every tensor the model has, of its shape (and dtype), and nothing else: the first misfit named.
    std::set<std::string> matched;
    for (const auto& [name, tensor] : own) {
        const QString tensorName = QString::fromStdString(name);
        const auto found = given.find(name);
        if (found == given.end())
            return unfit(QStringLiteral("%1 have no '%2', which the model has").arg(what, tensorName));
        if (found->second.sizes() != tensor.sizes())
            return unfit(QStringLiteral("'%1' is %2 in %3 but %4 in the model")
                             .arg(tensorName, shapeOf(found->second), what, shapeOf(tensor)));
        if (sameDtype && found->second.scalar_type() != tensor.scalar_type())
            return unfit(QStringLiteral("'%1' has another dtype in %2 than in the model").arg(tensorName, what));
        matched.insert(name);
    }
    for (const auto& [name, tensor] : given) {
        if (!matched.count(name))
            return unfit(QStringLiteral("%1 have '%2', which the model does not").arg(what, QString::fromStdString(name)));
    }
    torch::NoGradGuard noGrad;
    for (auto& [name, tensor] : own)
        tensor.copy_(given.at(name));
    return {};
}

// --- zoo ---------------------------------------------------------------------------------------

MlpImpl::MlpImpl(std::int64_t inputs, const QList<std::int64_t>& hidden, std::int64_t classes, double dropoutRate)
{
    std::int64_t width = inputs;
    for (qsizetype i = 0; i <= hidden.size(); ++i) {
        const std::int64_t out = i < hidden.size() ? hidden[i] : classes;
        layers.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(width, out)));
        width = out;
    }
    dropout = register_module("dropout", torch::nn::Dropout(dropoutRate));
}

at::Tensor MlpImpl::forward(at::Tensor x)
{
    x = x.flatten(1);
    const bool drop = dropout->options.p() > 0.0;
    for (std::size_t i = 0; i + 1 < layers.size(); ++i) {
        x = torch::relu(layers[i](x));
        if (drop)
            x = dropout(x);
    }
    return layers.back()(x);
}

CnnImpl::CnnImpl(std::int64_t channels, std::int64_t height, std::int64_t width, const QList<std::int64_t>& convChannels,
    std::int64_t hidden, std::int64_t classes, double dropoutRate)
{
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, convChannels[0], 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(convChannels[0], convChannels[1], 3).padding(1)));
    fc0 = register_module("fc0", torch::nn::Linear(convChannels[1] * (height / 4) * (width / 4), hidden));
    fc1 = register_module("fc1", torch::nn::Linear(hidden, classes));
    dropout = register_module("dropout", torch::nn::Dropout(dropoutRate));
}

at::Tensor CnnImpl::forward(at::Tensor x)
{
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    x = torch::relu(fc0(x.flatten(1)));
    if (dropout->options.p() > 0.0)
        x = dropout(x);
    return fc1(x);
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(std::int64_t width, std::int64_t headCount, double dropout)
    : heads(headCount)
{
    c_attn = register_module("c_attn", torch::nn::Linear(width, 3 * width));
    c_proj = register_module("c_proj", torch::nn::Linear(width, width));
    attn_dropout = register_module("attn_dropout", torch::nn::Dropout(dropout));
    resid_dropout = register_module("resid_dropout", torch::nn::Dropout(dropout));
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x)
{
    const auto batch = x.size(0), length = x.size(1), width = x.size(2);
    const auto headWidth = width / heads;
    const auto qkv = c_attn(x).split(width, 2);
    auto shape = [&](const at::Tensor& t) { return t.view({ batch, length, heads, headWidth }).transpose(1, 2); };
    const auto q = shape(qkv[0]), k = shape(qkv[1]), v = shape(qkv[2]);
    // softmax(q k^T / sqrt(d) + causal mask) v, each position attending to itself and those before.
    auto scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(headWidth)));
    const auto future = torch::ones({ length, length }, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    auto weights = torch::softmax(scores, -1);
    if (attn_dropout->options.p() > 0.0)
        weights = attn_dropout(weights);
    auto y = torch::matmul(weights, v).transpose(1, 2).contiguous().view({ batch, length, width });
    y = c_proj(y);
    return resid_dropout->options.p() > 0.0 ? resid_dropout(y) : y;
}

at::Tensor CausalSelfAttentionImpl::decode(const at::Tensor& x, std::int64_t start, std::pair<at::Tensor, at::Tensor>& cache)
{
    const auto length = x.size(1), width = x.size(2);
    const auto headWidth = width / heads;
    const auto qkv = c_attn(x).split(width, 2);
    auto shape = [&](const at::Tensor& t) { return t.view({ 1, length, heads, headWidth }).transpose(1, 2); };
    const auto q = shape(qkv[0]);
    auto k = shape(qkv[1]), v = shape(qkv[2]);
    if (cache.first.defined()) {
        k = torch::cat({ cache.first, k }, 2);
        v = torch::cat({ cache.second, v }, 2);
    }
    cache = { k, v };
    // Query r (position start + r) attends to keys 0 .. start + r.
    auto scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(headWidth)));
    if (length > 1) {
        const auto future = torch::ones({ length, start + length }, torch::TensorOptions().dtype(torch::kBool).device(x.device()))
                                .triu(start + 1);
        scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    }
    const auto weights = torch::softmax(scores, -1);
    return c_proj(torch::matmul(weights, v).transpose(1, 2).contiguous().view({ 1, length, width }));
}

FeedForwardImpl::FeedForwardImpl(std::int64_t width, double rate)
{
    c_fc = register_module("c_fc", torch::nn::Linear(width, 4 * width));
    c_proj = register_module("c_proj", torch::nn::Linear(4 * width, width));
    dropout = register_module("dropout", torch::nn::Dropout(rate));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x)
{
    auto y = c_proj(torch::gelu(c_fc(x))); // exact GELU (erf), nn.GELU()'s default
    return dropout->options.p() > 0.0 ? dropout(y) : y;
}

BlockImpl::BlockImpl(std::int64_t width, std::int64_t heads, double dropout)
{
    ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({ width })));
    attn = register_module("attn", CausalSelfAttention(width, heads, dropout));
    ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({ width })));
    mlp = register_module("mlp", FeedForward(width, dropout));
}

at::Tensor BlockImpl::forward(at::Tensor x)
{
    x = x + attn(ln_1(x));
    return x + mlp(ln_2(x));
}

GptBodyImpl::GptBodyImpl(const core::ModelSpec& spec, std::int64_t vocabulary)
{
    wte = register_module("wte", torch::nn::Embedding(vocabulary, spec.width));
    wpe = register_module("wpe", torch::nn::Embedding(spec.context, spec.width));
    drop = register_module("drop", torch::nn::Dropout(spec.dropout));
    auto blocks = register_module("h", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < spec.layers; ++i) {
        h.push_back(Block(spec.width, spec.heads, spec.dropout));
        blocks->push_back(h.back());
    }
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({ spec.width })));
}

GptImpl::GptImpl(const core::ModelSpec& spec, std::int64_t vocabulary)
    : context(spec.context)
{
    transformer = register_module("transformer", GptBody(spec, vocabulary));
    if (!spec.tied)
        lm_head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(spec.width, vocabulary).bias(false)));
    // nanoGPT's initialisation, in name order from the seeded generator: N(0, 0.02) for weights
    // and embeddings, N(0, 0.02 / sqrt(2 x layers)) for the projections into the residual stream,
    // zero biases, LayerNorm at (1, 0).
    torch::NoGradGuard noGrad;
    auto named = named_parameters();
    std::vector<std::string> names;
    for (const auto& item : named)
        names.push_back(item.key());
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
        auto& p = named[name];
        const bool norm = name.find("ln_") != std::string::npos;
        const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
        if (norm)
            bias ? p.zero_() : p.fill_(1.0);
        else if (bias)
            p.zero_();
        else if (name.find("c_proj.weight") != std::string::npos)
            p.normal_(0.0, 0.02 / std::sqrt(2.0 * double(spec.layers)));
        else
            p.normal_(0.0, 0.02);
    }
}

at::Tensor GptImpl::forward(const at::Tensor& tokens)
{
    if (tokens.dim() != 2 || tokens.scalar_type() != torch::kLong)
        throw std::runtime_error("the gpt reads tokens: int64 [batch, length]");
    const auto length = tokens.size(1);
    if (length > context)
        throw std::runtime_error("the sequence is longer than the model's context");
    const auto positions = torch::arange(length, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
    auto x = transformer->wte(tokens) + transformer->wpe(positions);
    if (transformer->drop->options.p() > 0.0)
        x = transformer->drop(x);
    for (auto& block : transformer->h)
        x = block(x);
    x = transformer->ln_f(x);
    return lm_head ? lm_head(x) : torch::linear(x, transformer->wte->weight);
}

at::Tensor GptImpl::decode(const at::Tensor& tokens, std::int64_t start, Model::KvCache& cache)
{
    const auto length = tokens.size(1);
    if (tokens.dim() != 2 || tokens.size(0) != 1 || start + length > context)
        throw std::runtime_error("a cached decode reads one sequence within the model's context");
    cache.layers.resize(transformer->h.size());
    const auto positions
        = torch::arange(start, start + length, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
    auto x = transformer->wte(tokens) + transformer->wpe(positions);
    for (std::size_t i = 0; i < transformer->h.size(); ++i) {
        auto& block = transformer->h[i];
        x = x + block->attn->decode(block->ln_1(x), start, cache.layers[i]);
        x = x + block->mlp(block->ln_2(x));
    }
    x = transformer->ln_f(x.select(1, length - 1));
    return (lm_head ? lm_head(x) : torch::linear(x, transformer->wte->weight))[0];
}

namespace {

NamedTensors namedOf(const torch::OrderedDict<std::string, at::Tensor>& dict)
{
    NamedTensors tensors;
    for (const auto& item : dict)
        tensors.emplace_back(item.key(), item.value());
    sortByName(tensors);
    return tensors;
}

template<typename Net> class ZooModel final : public Model {
public:
    explicit ZooModel(Net net)
        : m_net(std::move(net))
    { }
    at::Tensor forward(const at::Tensor& input) override { return m_net->forward(input); }
    NamedTensors parameters() override { return namedOf(m_net->named_parameters()); }
    NamedTensors buffers() override { return namedOf(m_net->named_buffers()); }
    void setTraining(bool training) override { m_net->train(training); }
    void to(const c10::Device& device) override { m_net->to(device); }
    at::Tensor decode(const at::Tensor& tokens, std::int64_t start, KvCache& cache) override
    {
        if constexpr (std::is_same_v<Net, Gpt>)
            return m_net->decode(tokens, start, cache);
        return Model::decode(tokens, start, cache);
    }

private:
    Net m_net;
};

class ScriptModel final : public Model {
public:
    explicit ScriptModel(torch::jit::Module module)
        : m_module(std::move(module))
    { }
    at::Tensor forward(const at::Tensor& input) override
    {
        const auto output = m_module.forward({ input });
        if (!output.isTensor())
            throw std::runtime_error("the TorchScript model's forward() must return one tensor of class scores");
        return output.toTensor();
    }
    NamedTensors parameters() override
    {
        NamedTensors tensors;
        for (const auto& item : m_module.named_parameters(true))
            tensors.emplace_back(item.name, item.value);
        sortByName(tensors);
        return tensors;
    }
    NamedTensors buffers() override
    {
        NamedTensors tensors;
        for (const auto& item : m_module.named_buffers(true))
            tensors.emplace_back(item.name, item.value);
        sortByName(tensors);
        return tensors;
    }
    void setTraining(bool training) override { m_module.train(training); }
    void to(const c10::Device& device) override { m_module.to(device); }

private:
    torch::jit::Module m_module;
};

std::int64_t product(const std::vector<std::int64_t>& sizes)
{
    std::int64_t total = 1;
    for (auto size : sizes)
        total *= size;
    return total;
}

constexpr qint64 MaxTorchScriptBytes = qint64(1) << 30;

} // namespace

at::Tensor lossOf(const at::Tensor& logits, const at::Tensor& targets, at::Reduction::Reduction reduction)
{
    if (targets.dim() == 2) {
        if (logits.dim() != 3 || logits.size(0) != targets.size(0) || logits.size(1) != targets.size(1))
            throw std::runtime_error("the model must return token scores shaped [batch, length, vocabulary]");
        return torch::cross_entropy_loss(logits.reshape({ -1, logits.size(2) }), targets.reshape({ -1 }), {}, reduction);
    }
    if (logits.dim() != 2 || logits.size(0) != targets.size(0))
        throw std::runtime_error("the model must return class scores shaped [batch, classes]");
    return torch::cross_entropy_loss(logits, targets, {}, reduction);
}

std::int64_t correctOf(const at::Tensor& logits, const at::Tensor& targets)
{
    return logits.argmax(-1).eq(targets).sum().item<std::int64_t>();
}

core::Result<std::unique_ptr<Model>> buildModel(const core::ModelSpec& spec, const std::vector<std::int64_t>& sampleShape,
    std::int64_t classes, std::uint64_t initSeed, const ComputeEnvironment& environment)
{
    if (spec.source == core::ModelSpec::Source::TorchScript) {
        const auto path = environment.locate(spec.scriptSha256, spec.scriptFile);
        if (!path)
            return core::Error { QStringLiteral("model.torchscript"),
                QStringLiteral("the TorchScript model is not on this machine") };
        if (QFileInfo(*path).size() > MaxTorchScriptBytes)
            return core::Error { QStringLiteral("model.torchscript"),
                QStringLiteral("the TorchScript file is larger than 1 GiB") };
        QFile file(*path);
        if (!file.open(QIODevice::ReadOnly))
            return core::Error { QStringLiteral("model.torchscript"), QStringLiteral("cannot read %1").arg(*path) };
        const QByteArray bytes = file.readAll();
        if (auto allowed = checkScriptArchive(bytes); !allowed)
            return allowed.error();
        auto module = guarded(QStringLiteral("%1 is not a TorchScript model saved by PyTorch").arg(*path), [&] {
            std::istringstream stream(std::string(bytes.constData(), static_cast<std::size_t>(bytes.size())));
            return torch::jit::load(stream, torch::kCPU);
        });
        if (!module)
            return core::Error { QStringLiteral("model.torchscript"), module.error().message };
        auto model = std::make_unique<ScriptModel>(std::move(*module));
        if (model->parameters().empty())
            return core::Error { QStringLiteral("model.torchscript"),
                QStringLiteral("the TorchScript model has no parameters to train") };
        return std::unique_ptr<Model>(std::move(model));
    }

    torch::manual_seed(initSeed);
    if (spec.zoo == u"mlp")
        return std::unique_ptr<Model>(
            std::make_unique<ZooModel<Mlp>>(Mlp(product(sampleShape), spec.hidden, classes, spec.dropout)));
    if (spec.zoo == u"gpt") {
        if (sampleShape.size() != 1 || sampleShape[0] > spec.context)
            return core::Error { QStringLiteral("model.context"),
                QStringLiteral("the gpt reads windows of at most %1 tokens; the data has samples shaped [%2]")
                    .arg(spec.context)
                    .arg(QString::number(sampleShape.empty() ? 0 : sampleShape[0])) };
        const std::int64_t vocabulary = spec.vocabulary > 0 ? spec.vocabulary : classes;
        if (vocabulary < classes)
            return core::Error { QStringLiteral("model.vocabulary"),
                QStringLiteral("the data uses %1 tokens; a vocabulary of %2 is too small").arg(classes).arg(vocabulary) };
        return std::unique_ptr<Model>(std::make_unique<ZooModel<Gpt>>(Gpt(spec, vocabulary)));
    }
    if (spec.zoo == u"cnn") {
        if (sampleShape.size() != 3 || sampleShape[1] < 4 || sampleShape[2] < 4)
            return core::Error { QStringLiteral("model.zoo"),
                QStringLiteral("the cnn needs image samples shaped [channels, height, width] of at least 4x4") };
        if (spec.channels.size() != 2 || spec.hidden.size() != 1)
            return core::Error { QStringLiteral("model"),
                QStringLiteral("the cnn needs 2 conv channel counts and 1 hidden width") };
        return std::unique_ptr<Model>(std::make_unique<ZooModel<Cnn>>(
            Cnn(sampleShape[0], sampleShape[1], sampleShape[2], spec.channels, spec.hidden[0], classes, spec.dropout)));
    }
    return core::Error { QStringLiteral("model.zoo"), QStringLiteral("unknown zoo model '%1'").arg(spec.zoo) };
}

core::Result<c10::Device> resolveDevice(const QString& name)
{
    const bool cuda = torch::cuda::is_available();
    if (name.isEmpty())
        return cuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
    if (name == u"cpu")
        return c10::Device(c10::kCPU);
    static const QRegularExpression cudaName(QStringLiteral("^cuda(?::(\\d+))?$"));
    const auto match = cudaName.match(name);
    if (!match.hasMatch())
        return core::Error { QStringLiteral("device"), QStringLiteral("'%1' is not a device (cpu, cuda or cuda:N)").arg(name) };
    if (!cuda)
        return core::Error { QStringLiteral("device"),
            QStringLiteral("this LibTorch build has no CUDA; train on the CPU or build Tessera with a CUDA LibTorch") };
    const int index = match.captured(1).isEmpty() ? 0 : match.captured(1).toInt();
    if (index >= int(torch::cuda::device_count()))
        return core::Error { QStringLiteral("device"), QStringLiteral("there is no CUDA device %1").arg(index) };
    return c10::Device(c10::kCUDA, c10::DeviceIndex(index));
}

QString deviceProfileName(const c10::Device& device)
{
    if (!device.is_cuda())
        return QStringLiteral("cpu");
    // The device's name stands in for its kernels, as the CPU capability does on the CPU.
    return QStringLiteral("cuda:%1").arg(device.index());
}

namespace {

// The gpt as TorchScript source, its parameters on the module itself under their names with '_'
// for '.' (transformer_h_0_attn_c_attn_weight): TorchScript has no attribute paths like h.0.
core::Result<torch::jit::Module> gptToTorchScript(const core::ModelSpec& spec, const NamedTensors& state)
{
    return guarded(QStringLiteral("building the TorchScript module"), [&] {
        torch::jit::Module module("TesseraGpt");
        for (const auto& [name, tensor] : state) {
            std::string flat = name;
            std::replace(flat.begin(), flat.end(), '.', '_');
            module.register_parameter(flat, tensor.detach().clone(), false);
        }
        const auto c = std::to_string(spec.width);
        const auto heads = std::to_string(spec.heads);
        const auto headWidth = std::to_string(spec.width / spec.heads);
        std::ostringstream source;
        source.precision(17);
        source << "def forward(self, tokens):\n"
               << "    b = tokens.size(0)\n"
               << "    t = tokens.size(1)\n"
               << "    x = torch.embedding(self.transformer_wte_weight, tokens) + torch.embedding(self.transformer_wpe_weight, "
                  "torch.arange(t, device=tokens.device))\n"
               << "    mask = torch.ones([t, t], device=tokens.device).triu(1).gt(0.5)\n";
        for (std::int64_t i = 0; i < spec.layers; ++i) {
            const std::string h = "self.transformer_h_" + std::to_string(i) + "_";
            source << "    a = torch.layer_norm(x, [" << c << "], " << h << "ln_1_weight, " << h << "ln_1_bias, 1e-05, True)\n"
                   << "    parts = torch.linear(a, " << h << "attn_c_attn_weight, " << h << "attn_c_attn_bias).split(" << c
                   << ", 2)\n"
                   << "    q = parts[0].view(b, t, " << heads << ", " << headWidth << ").transpose(1, 2)\n"
                   << "    k = parts[1].view(b, t, " << heads << ", " << headWidth << ").transpose(1, 2)\n"
                   << "    v = parts[2].view(b, t, " << heads << ", " << headWidth << ").transpose(1, 2)\n"
                   << "    w = torch.softmax((torch.matmul(q, k.transpose(-2, -1)) * "
                   << 1.0 / std::sqrt(double(spec.width / spec.heads)) << ").masked_fill(mask, float('-inf')), -1)\n"
                   << "    y = torch.matmul(w, v).transpose(1, 2).contiguous().view(b, t, " << c << ")\n"
                   << "    x = x + torch.linear(y, " << h << "attn_c_proj_weight, " << h << "attn_c_proj_bias)\n"
                   << "    m = torch.layer_norm(x, [" << c << "], " << h << "ln_2_weight, " << h << "ln_2_bias, 1e-05, True)\n"
                   << "    x = x + torch.linear(torch.gelu(torch.linear(m, " << h << "mlp_c_fc_weight, " << h
                   << "mlp_c_fc_bias)), " << h << "mlp_c_proj_weight, " << h << "mlp_c_proj_bias)\n";
        }
        source << "    x = torch.layer_norm(x, [" << c
               << "], self.transformer_ln_f_weight, self.transformer_ln_f_bias, 1e-05, True)\n"
               << "    return torch.linear(x, self." << (spec.tied ? "transformer_wte_weight" : "lm_head_weight") << ")\n";
        module.define(source.str());
        module.eval();
        return module;
    });
}

} // namespace

core::Result<torch::jit::Module> zooToTorchScript(const core::ModelSpec& spec, const NamedTensors& state)
{
    if (spec.source != core::ModelSpec::Source::Zoo)
        return core::Error { QStringLiteral("model"),
            QStringLiteral("only zoo models are converted; a TorchScript model already is one") };
    if (spec.zoo == u"gpt")
        return gptToTorchScript(spec, state);
    return guarded(QStringLiteral("building the TorchScript module"), [&] {
        torch::jit::Module module("TesseraModel");
        std::map<std::string, torch::jit::Module> layers;
        for (const auto& [name, tensor] : state) {
            const auto dot = name.find('.');
            const std::string layer = name.substr(0, dot);
            auto [it, inserted] = layers.try_emplace(layer, layer);
            it->second.register_parameter(name.substr(dot + 1), tensor.detach().clone(), false);
        }
        for (auto& [name, layer] : layers)
            module.register_module(name, layer);

        std::ostringstream source;
        source << "def forward(self, x):\n";
        if (spec.zoo == u"mlp") {
            source << "    x = x.flatten(1)\n";
            const auto count = spec.hidden.size() + 1;
            for (qsizetype i = 0; i < count; ++i) {
                source << "    x = torch.addmm(self.fc" << i << ".bias, x, self.fc" << i << ".weight.t())\n";
                if (i + 1 < count)
                    source << "    x = torch.relu(x)\n";
            }
        } else {
            source << "    x = torch.max_pool2d(torch.relu(torch.conv2d(x, self.conv1.weight, self.conv1.bias, [1, 1], [1, 1])), "
                      "[2, 2])\n"
                   << "    x = torch.max_pool2d(torch.relu(torch.conv2d(x, self.conv2.weight, self.conv2.bias, [1, 1], [1, 1])), "
                      "[2, 2])\n"
                   << "    x = torch.relu(torch.addmm(self.fc0.bias, x.flatten(1), self.fc0.weight.t()))\n"
                   << "    x = torch.addmm(self.fc1.bias, x, self.fc1.weight.t())\n";
        }
        source << "    return x\n";
        module.define(source.str());
        module.eval();
        return module;
    });
}

} // namespace tessera::compute::detail
