#include "inferencerun.h"
#include "sampling.h"

#include <core/inference/outputs.h>
#include <core/readfile.h>
#include <core/seeds.h>

#include <torch/torch.h>

#include <QFileInfo>

#include <algorithm>
#include <cmath>

namespace tessera::compute::detail {

namespace {

constexpr std::uint64_t InferencePurpose = 7; // docs/DETERMINISM.md, "Seeds"

core::Result<NamedTensors> modelWeights(const core::ShardTask& task, const QByteArray& weights)
{
    auto tensors = unpickleTensors(weights, QStringLiteral("the model's weights are not a dict of tensors"));
    if (!tensors)
        return core::Error { QStringLiteral("startWeights"), tensors.error().message };
    if (!task.startWeights.isNull() && canonicalHash(*tensors) != task.startWeights)
        return core::Error { QStringLiteral("startWeights"),
            QStringLiteral("the weights do not hash to the task's startWeights") };
    auto model = modelPart(std::move(*tensors));
    sortByName(model);
    return model;
}

std::int64_t vocabularyOf(const core::ModelSpec& spec, const NamedTensors& weights)
{
    if (spec.vocabulary > 0)
        return spec.vocabulary;
    for (const auto& [name, tensor] : weights) {
        if (name == "transformer.wte.weight" && tensor.dim() == 2)
            return tensor.size(0);
    }
    return ByteVocabulary;
}

// LibTorch's threads for a task: the job's, or for a portable one those the node allows (its
// kernels compute with them; LibTorch only loads and slices).
void useThreads(const core::ShardTask& task, const ComputeEnvironment& environment)
{
    const int threads = task.portable && environment.portableThreads > 0 ? environment.portableThreads : int(task.threads);
    if (at::get_num_threads() != threads)
        at::set_num_threads(threads);
}

// The first index of the largest value (ties: the first), as the lines' rule says.
std::int64_t firstMax(const float* values, std::int64_t n)
{
    return std::max_element(values, values + n) - values;
}

} // namespace

core::Result<std::unique_ptr<InferenceRun>> InferenceRun::start(
    const core::ShardTask& task, const QByteArray& weights, const ComputeEnvironment& environment)
{
    if (!task.inference)
        return core::Error { QStringLiteral("inference"), QStringLiteral("not an inference task") };
    if (auto status = task.validate(); !status)
        return status.error();
    useThreads(task, environment);
    auto tensors = modelWeights(task, weights);
    if (!tensors)
        return tensors.error();
    if (task.inference->serves())
        return core::Error { QStringLiteral("inference.task"), QStringLiteral("a serve task is hosted, not run as a shard") };
    std::unique_ptr<InferenceRun> run(new InferenceRun);
    run->m_task = task;
    run->m_environment = environment;
    const auto& spec = *task.inference;
    std::vector<std::int64_t> shape;
    std::int64_t classes = 0;
    if (spec.task == core::InferenceSpec::Task::Generate) {
        run->m_vocabulary = vocabularyOf(task.model, *tensors);
        if (run->m_vocabulary > ByteVocabulary)
            return core::Error { QStringLiteral("model.vocabulary"), QStringLiteral("prompts are bytes: at most 256 tokens") };
        shape = { task.model.context };
        classes = run->m_vocabulary;
        if (auto status = run->loadPrompts(); !status)
            return status.error();
    } else {
        auto data = loadDataset(task.dataset, environment, task.model.context);
        if (!data)
            return data.error();
        run->m_inputs = spec.split == core::InferenceSpec::Split::Train ? data->train : data->test;
        if (!run->m_inputs)
            return core::Error { QStringLiteral("inference.split"), QStringLiteral("the dataset has no test split") };
        if (task.sampleEnd > run->m_inputs->size())
            return core::Error { QStringLiteral("sampleEnd"),
                QStringLiteral("the shard reads inputs up to %1 but the split has %2")
                    .arg(task.sampleEnd)
                    .arg(run->m_inputs->size()) };
        shape = run->m_inputs->sampleShape();
        classes = run->m_inputs->classes;
    }
    auto model = buildModel(task.model, shape, classes, 0, environment);
    if (!model)
        return model.error();
    if (auto status = (*model)->loadState(*tensors); !status)
        return status.error();
    (*model)->setTraining(false);
    run->m_model = std::move(*model);
    if (task.portable) { // a model the portable kernels do not cover is refused here, by field
        if (auto forward = portableForward(task.model, 1, shape, classes); !forward)
            return forward.error();
        const int threads = environment.portableThreads > 0 ? environment.portableThreads : int(task.threads);
        run->m_portable = std::make_unique<PortableForward>(task.model, *run->m_model, classes, threads);
        if (spec.task == core::InferenceSpec::Task::Generate || spec.serves()) {
            auto decoder = run->m_portable->decoder();
            if (!decoder)
                return decoder.error();
            run->m_decoder = std::move(*decoder);
        }
    }
    return run;
}

core::Status InferenceRun::loadPrompts()
{
    const auto& spec = *m_task.inference;
    if (!spec.promptsInFile())
        return {};
    const auto path = m_environment.locate(spec.promptsSha256, spec.promptsFile);
    if (!path)
        return core::Error { QStringLiteral("inference.prompts"), QStringLiteral("the prompts file is not on this machine") };
    if (QFileInfo(*path).size() > core::InferenceSpec::MaxPromptsFileBytes)
        return core::Error { QStringLiteral("inference.prompts"), QStringLiteral("the prompts file is larger than 64 MiB") };
    auto bytes = core::readFile(*path);
    if (!bytes)
        return core::Error { QStringLiteral("inference.prompts"), bytes.error().message };
    m_prompts = bytes->split('\n');
    if (bytes->endsWith('\n') || bytes->isEmpty())
        m_prompts.removeLast(); // a final empty line is not a prompt
    if (m_prompts.size() != spec.promptCount)
        return core::Error { QStringLiteral("inference.prompts.count"),
            QStringLiteral("the prompts file has %1 prompts, the job says %2").arg(m_prompts.size()).arg(spec.promptCount) };
    return {};
}

core::Result<QList<QByteArray>> InferenceRun::stepLines(std::int64_t step)
{
    if (m_task.inference->task == core::InferenceSpec::Task::Generate) {
        auto line = generate(m_task.sampleBegin + step);
        if (!line)
            return line.error();
        return QList<QByteArray> { *line };
    }
    return batchLines(m_task.sampleBegin / m_task.batchSize + step);
}

core::Result<QList<QByteArray>> InferenceRun::linesOf(std::int64_t first, std::int64_t last)
{
    if (first < m_task.sampleBegin || last > m_task.sampleEnd || first >= last)
        return core::Error { QStringLiteral("inputs"),
            QStringLiteral("inputs [%1, %2) are not in the shard's [%3, %4)")
                .arg(first)
                .arg(last)
                .arg(m_task.sampleBegin)
                .arg(m_task.sampleEnd) };
    const auto batch = m_task.batchSize;
    QList<QByteArray> lines;
    for (std::int64_t step = (first - m_task.sampleBegin) / batch; step * batch + m_task.sampleBegin < last; ++step) {
        auto computed = stepLines(step);
        if (!computed)
            return computed.error();
        const auto stepFirst = m_task.sampleBegin + step * batch;
        for (qsizetype k = 0; k < computed->size(); ++k) {
            if (stepFirst + k >= first && stepFirst + k < last)
                lines.append((*computed)[k]);
        }
    }
    return lines;
}

core::Result<QList<QByteArray>> InferenceRun::batchLines(std::int64_t batch)
{
    const auto& spec = *m_task.inference;
    const auto begin = batch * m_task.batchSize;
    const auto end = std::min(begin + m_task.batchSize, m_task.sampleEnd);
    useThreads(m_task, m_environment);
    return guarded(QStringLiteral("inputs %1 to %2").arg(begin).arg(end - 1), [&] {
        torch::NoGradGuard noGrad;
        const auto x = m_inputs->slice(begin, end, m_task.portable);
        const auto y = m_inputs->y.slice(0, begin, end);
        const auto logits = logitsOf(x);
        QList<QByteArray> lines;
        // What the broker checks of each line (core/inference/outputs.cpp) is checked here, on the
        // values, so that a job's model whose outputs make no valid line fails the shard before
        // anything is committed (docs/VERIFICATION.md, "Inference").
        if (spec.task == core::InferenceSpec::Task::Score) {
            if (logits.dim() != 3 || logits.size(0) != end - begin)
                throw std::runtime_error("the model does not give token logits [batch, length, vocabulary]");
            if (y.size(1) > std::max<std::int64_t>(m_task.model.context, 1))
                throw std::runtime_error("the windows are longer than the model's context");
            for (std::int64_t i = 0; i < end - begin; ++i) {
                const float loss = lossOf(logits[i], y[i]);
                if (!std::isfinite(loss))
                    throw std::runtime_error(QStringLiteral("input %1's loss is not finite").arg(begin + i).toStdString());
                lines.append(core::inference::scoreLine(begin + i, loss, y[i].numel()));
            }
            return lines;
        }
        if (logits.dim() != 2 || logits.size(0) != end - begin || logits.size(1) < 1)
            throw std::runtime_error("the model does not give one row of class scores per input");
        const auto p = probabilitiesOf(logits);
        const auto classes = p.size(1);
        if (m_classes == 0)
            m_classes = classes;
        if (classes != m_classes && begin > m_task.sampleBegin)
            throw std::runtime_error("the model gives another number of classes for another batch");
        const float* values = p.data_ptr<float>();
        const bool labelled = y.defined() && y.numel() == end - begin;
        const auto labels = labelled ? y.to(torch::kInt64).contiguous() : at::Tensor();
        for (std::int64_t i = 0; i < end - begin; ++i) {
            const float* row = values + i * classes;
            for (std::int64_t c = 0; c < classes; ++c) {
                if (!std::isfinite(row[c]))
                    throw std::runtime_error(
                        QStringLiteral("input %1's probabilities are not finite").arg(begin + i).toStdString());
            }
            const std::optional<std::int64_t> label = labelled ? std::optional(labels.data_ptr<std::int64_t>()[i]) : std::nullopt;
            if (label && (*label < 0 || *label > std::int64_t(1e15)))
                throw std::runtime_error(QStringLiteral("input %1's label is not a class").arg(begin + i).toStdString());
            lines.append(core::inference::classifyLine(begin + i, firstMax(row, classes), row, classes, label));
        }
        return lines;
    });
}

at::Tensor InferenceRun::logitsOf(const at::Tensor& x)
{
    if (!m_portable)
        return m_model->forward(x).to(torch::kFloat32);
    auto logits = m_portable->logits(x);
    if (!logits)
        throw std::runtime_error(logits.error().message.toStdString());
    return *logits;
}

float InferenceRun::lossOf(const at::Tensor& logits, const at::Tensor& targets) const
{
    if (!m_portable)
        return torch::nn::functional::cross_entropy(logits, targets).item<float>();
    const auto z = logits.contiguous();
    const auto t = targets.to(torch::kInt64).contiguous();
    if (z.dim() != 2 || t.dim() != 1 || t.size(0) != z.size(0) || z.size(0) < 1)
        throw std::runtime_error("the window's logits and targets do not match");
    if (t.min().item<std::int64_t>() < 0 || t.max().item<std::int64_t>() >= z.size(1))
        throw std::runtime_error("a target is not a token of the model's vocabulary");
    return portable::crossEntropy(z.data_ptr<float>(), t.data_ptr<std::int64_t>(), nullptr, z.size(0), z.size(1));
}

at::Tensor InferenceRun::probabilitiesOf(const at::Tensor& logits) const
{
    if (!m_portable)
        return torch::softmax(logits, 1).contiguous();
    const auto z = logits.contiguous();
    auto p = torch::empty_like(z);
    portable::softmax(z.data_ptr<float>(), p.data_ptr<float>(), z.size(0), z.size(1));
    return p;
}

std::int64_t InferenceRun::nextToken(const std::vector<std::int64_t>& sequence, Model::KvCache& cache, std::int64_t& cached,
    bool& caches, std::uint64_t seed, std::int64_t t)
{
    const auto& spec = *m_task.inference;
    const auto size = std::int64_t(sequence.size());
    const auto context = m_task.model.context;
    const auto length = std::min<std::int64_t>(size, context);
    auto window = [&] {
        return torch::tensor(std::vector<std::int64_t>(sequence.end() - length, sequence.end()), torch::kInt64).unsqueeze(0);
    };
    if (m_portable) {
        // Within the context, the decoder computes each position once (the same bits as the last row
        // of a full forward); past it, a full forward over the window each token.
        at::Tensor full;
        const float* scores = nullptr;
        std::int64_t n = 0;
        if (m_decoder && size <= context) {
            if (cached == 0)
                m_decoder->reset();
            const std::vector<float>* logits = nullptr;
            for (; cached < size; ++cached) {
                if (!(logits = m_decoder->push(sequence[std::size_t(cached)])))
                    throw std::runtime_error("a token is not in the model's vocabulary");
            }
            if (!logits)
                throw std::runtime_error("the decoder has no position to compute");
            scores = logits->data();
            n = std::min<std::int64_t>(std::int64_t(logits->size()), m_vocabulary);
        } else {
            full = logitsOf(window())[0][length - 1].contiguous();
            scores = full.data_ptr<float>();
            n = std::min<std::int64_t>(full.numel(), m_vocabulary);
        }
        if (n < 1)
            throw std::runtime_error("the model gives no logits");
        if (!std::all_of(scores, scores + n, [](float l) { return std::isfinite(l); }))
            throw std::runtime_error("the model's logits are not finite");
        return drawTokenPortable(scores, n, spec.temperature, seed, std::uint64_t(t));
    }
    // Positions within the context are decoded with a KV cache (the prompt in one pass, then one
    // position a token); past it, each token is a full forward over the last `context` tokens.
    at::Tensor last;
    if (caches && size <= context) {
        const auto fresh = torch::tensor(std::vector<std::int64_t>(sequence.begin() + cached, sequence.end()), torch::kInt64);
        last = m_model->decode(fresh.unsqueeze(0), cached, cache);
        caches = last.defined(); // a TorchScript model has no cache
        cached = size;
    }
    if (!last.defined())
        last = m_model->forward(window())[0][length - 1];
    const auto logits = last.to(torch::kFloat64).contiguous();
    const double* scores = logits.data_ptr<double>();
    const auto n = std::min<std::int64_t>(logits.numel(), m_vocabulary);
    if (n < 1)
        throw std::runtime_error("the model gives no logits");
    if (!std::isfinite(*std::max_element(scores, scores + n)))
        throw std::runtime_error("the model's logits are not finite");
    return drawToken(scores, n, spec.temperature, seed, std::uint64_t(t));
}

core::Result<QByteArray> InferenceRun::answer(const core::inference::Question& question, const OnTokens& onTokens)
{
    m_task = core::inference::answerTask(m_task, question);
    m_prompts.clear();
    return generate(0, onTokens, question.holdBack());
}

core::Result<QByteArray> InferenceRun::generate(std::int64_t index, const OnTokens& onTokens, qsizetype holdBack)
{
    const auto& spec = *m_task.inference;
    const QByteArray prompt = m_prompts.isEmpty() ? spec.promptText : m_prompts.value(index);
    std::vector<std::int64_t> sequence;
    for (const char byte : prompt)
        sequence.push_back(std::int64_t(static_cast<unsigned char>(byte)));
    if (sequence.empty())
        sequence.push_back('\n');
    const auto seed = core::deriveSeed(std::uint64_t(spec.seed), { InferencePurpose, std::uint64_t(index) });
    useThreads(m_task, m_environment);
    return guarded(QStringLiteral("prompt %1").arg(index), [&] {
        torch::NoGradGuard noGrad;
        QList<std::int64_t> written;
        QByteArray bytes;
        bool stopped = false;
        qsizetype streamed = 0;
        auto stream = [&](qsizetype until) {
            if (onTokens && until > streamed) {
                onTokens(streamed, written.mid(streamed, until - streamed));
                streamed = until;
            }
        };
        Model::KvCache cache;
        std::int64_t cached = 0;
        bool caches = true;
        for (std::int64_t t = 0; t < spec.maxTokens && !stopped; ++t) {
            const auto next = nextToken(sequence, cache, cached, caches, seed, t);
            sequence.push_back(next);
            written.append(next);
            bytes.append(char(next));
            for (const auto& stop : spec.stop) {
                if (bytes.endsWith(stop)) {
                    written.resize(written.size() - stop.size());
                    stopped = true;
                    break;
                }
            }
            stream(written.size() - (stopped ? 0 : holdBack));
        }
        stream(written.size());
        return core::inference::generateLine(index, written, stopped);
    });
}

} // namespace tessera::compute::detail
