#include "models.h"

#include "scriptguard.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <QRegularExpression>

#include <QFile>
#include <QFileInfo>

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

core::Status Model::loadState(const NamedTensors& values)
{
    NamedTensors own = state();
    if (own.size() != values.size()) {
        return core::Error { QStringLiteral("weights"),
            QStringLiteral("the weights have %1 tensors but the model has %2").arg(values.size()).arg(own.size()) };
    }
    torch::NoGradGuard noGrad;
    for (std::size_t i = 0; i < own.size(); ++i) {
        if (own[i].first != values[i].first)
            return core::Error { QStringLiteral("weights"),
                QStringLiteral("the weights have '%1' where the model has '%2'")
                    .arg(QString::fromStdString(values[i].first), QString::fromStdString(own[i].first)) };
        if (own[i].second.sizes() != values[i].second.sizes())
            return core::Error { QStringLiteral("weights"),
                QStringLiteral("'%1' has another shape in the weights than in the model")
                    .arg(QString::fromStdString(own[i].first)) };
        own[i].second.copy_(values[i].second);
    }
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

core::Result<std::unique_ptr<Model>> buildModel(const core::ModelSpec& spec, const std::vector<std::int64_t>& sampleShape,
    std::int64_t classes, std::uint64_t initSeed, const ComputeEnvironment& environment)
{
    if (spec.source == core::ModelSpec::Source::TorchScript) {
        std::optional<QString> path;
        if (!spec.scriptSha256.isNull() && environment.blobPath)
            path = environment.blobPath(spec.scriptSha256);
        if (!path && !spec.scriptFile.isEmpty() && QFileInfo::exists(spec.scriptFile))
            path = spec.scriptFile;
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

core::Result<torch::jit::Module> zooToTorchScript(const core::ModelSpec& spec, const NamedTensors& state)
{
    if (spec.source != core::ModelSpec::Source::Zoo)
        return core::Error { QStringLiteral("model"),
            QStringLiteral("only zoo models are converted; a TorchScript model already is one") };
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
