#include "pricing.h"

#include <algorithm>
#include <cmath>

namespace tessera::core {

QJsonObject Quote::toJson() const
{
    return QJsonObject {
        { QStringLiteral("flopsPerSample"), flopsPerSample },
        { QStringLiteral("unitsPerShard"), static_cast<qint64>(unitsPerShard) },
        { QStringLiteral("shards"), static_cast<qint64>(shards) },
        { QStringLiteral("pricePerUnit"), pricePerUnit.toString() },
        { QStringLiteral("pricePerShard"), pricePerShard.toString() },
        { QStringLiteral("training"), training.toString() },
        { QStringLiteral("verification"), verification.toString() },
        { QStringLiteral("total"), total.toString() },
        { QStringLiteral("worstCase"), worstCase.toString() },
        { QStringLiteral("pricePerToken"), pricePerToken.toString() },
    };
}

Quote Quote::fromJson(const QJsonObject& json)
{
    Quote q;
    q.flopsPerSample = json.value(QStringLiteral("flopsPerSample")).toDouble();
    q.unitsPerShard = json.value(QStringLiteral("unitsPerShard")).toInteger();
    q.shards = json.value(QStringLiteral("shards")).toInteger();
    for (auto [field, target] :
        { std::pair { "pricePerUnit", &q.pricePerUnit }, std::pair { "pricePerShard", &q.pricePerShard },
            std::pair { "training", &q.training }, std::pair { "verification", &q.verification }, std::pair { "total", &q.total },
            std::pair { "worstCase", &q.worstCase }, std::pair { "pricePerToken", &q.pricePerToken } }) {
        if (auto value = Credits::parse(json.value(QString::fromLatin1(field)).toString()))
            *target = *value;
    }
    return q;
}

std::optional<std::int64_t> zooParameterCount(const JobSpec& spec)
{
    if (spec.model.source != ModelSpec::Source::Zoo)
        return std::nullopt;
    // In doubles (exact below 2^53) and saturated at the int64 range.
    const bool fashion = spec.dataset.source == DatasetSpec::Source::Builtin;
    constexpr double Classes = 10, Pixels = 28 * 28;
    double parameters = 0.0;
    auto dense = [&](double in, double out) { parameters += in * out + out; };
    if (spec.model.zoo == u"gpt") {
        const double c = double(spec.model.width), layers = double(spec.model.layers);
        const double vocabulary = spec.model.vocabulary > 0 ? double(spec.model.vocabulary) : 256.0;
        // Embeddings; per block two LayerNorms, c_attn, c_proj, c_fc and c_proj; ln_f; the head.
        parameters = vocabulary * c + double(spec.model.context) * c;
        parameters
            += layers * (2.0 * 2.0 * c + (3.0 * c * c + 3.0 * c) + (c * c + c) + (4.0 * c * c + 4.0 * c) + (4.0 * c * c + c));
        parameters += 2.0 * c + (spec.model.tied ? 0.0 : vocabulary * c);
        return std::int64_t(std::min(parameters, 9.0e18));
    }
    if (spec.model.zoo == u"cnn") {
        const double c1 = spec.model.channels.value(0, 16), c2 = spec.model.channels.value(1, 32);
        const double hidden = spec.model.hidden.value(0, 128);
        parameters += 9.0 * c1 + c1 + c1 * 9.0 * c2 + c2;
        dense(c2 * (fashion ? 7.0 * 7.0 : 1.0), hidden);
        dense(hidden, Classes);
    } else {
        double width = fashion ? Pixels : 0.0;
        for (const auto hidden : spec.model.hidden) {
            dense(width, double(hidden));
            width = double(hidden);
        }
        dense(width, Classes);
    }
    constexpr double Largest = 9.0e18;
    return std::int64_t(std::min(parameters, Largest));
}

double benchmarkFlopsPerSample()
{
    JobSpec spec;
    spec.model.zoo = QStringLiteral("mlp");
    spec.model.hidden = { 256, 128 };
    spec.dataset.builtin = QStringLiteral("fashion-mnist");
    return trainingFlopsPerSample(spec, 0);
}

namespace {

// An inference job's FLOPs per input: a forward pass, 2 x parameters per position read (a third
// of a training step's). generate reads a prompt of up to `context` positions, then one position a
// token with its KV cache while the sequence fits the context, and `context` positions a token
// past it (docs/DETERMINISM.md, "Inference").
double inferenceFlopsPerInput(const JobSpec& spec, std::int64_t parameterCount)
{
    const double parameters = double(parameterCount > 0 ? parameterCount : zooParameterCount(spec).value_or(0));
    const double context = double(std::max<std::int64_t>(spec.model.context, 1));
    const double attention = 4.0 * context * double(spec.model.width) * double(spec.model.layers);
    switch (spec.inference.task) {
    case InferenceSpec::Task::Classify:
        break;
    case InferenceSpec::Task::Score:
        return context * (2.0 * parameters + attention);
    case InferenceSpec::Task::Serve: // one position with the KV cache
        return 2.0 * parameters + attention;
    case InferenceSpec::Task::Generate: {
        const double tokens = double(spec.inference.maxTokens);
        const double positions = context + std::min(tokens, context) + std::max(0.0, tokens - context) * context;
        return positions * (2.0 * parameters + attention);
    }
    }
    JobSpec training = spec;
    training.kind = JobSpec::Kind::Training;
    return trainingFlopsPerSample(training, parameterCount) / 3.0;
}

} // namespace

double trainingFlopsPerSample(const JobSpec& spec, std::int64_t parameterCount)
{
    if (spec.isInference())
        return inferenceFlopsPerInput(spec, parameterCount);
    if (spec.model.source == ModelSpec::Source::Zoo && spec.model.zoo == u"gpt") {
        // Per window of `context` tokens: 6 x parameters per token, and the attention scores and
        // their use (2 x 2 x L x width per token and layer, forward; x 3 with backward).
        const double length = double(spec.model.context);
        const double attention = 3.0 * 4.0 * length * double(spec.model.width) * double(spec.model.layers);
        return length * (6.0 * double(parameterCount > 0 ? parameterCount : zooParameterCount(spec).value_or(0)) + attention);
    }
    const bool fashion = spec.dataset.source == DatasetSpec::Source::Builtin;
    if (spec.model.source == ModelSpec::Source::Zoo && fashion) {
        constexpr double Height = 28, Width = 28, Channels = 1, Classes = 10;
        double forward = 0.0;
        if (spec.model.zoo == u"mlp") {
            double width = Height * Width * Channels;
            for (auto hidden : spec.model.hidden) {
                forward += 2.0 * width * double(hidden);
                width = double(hidden);
            }
            forward += 2.0 * width * Classes;
        } else if (spec.model.zoo == u"cnn" && spec.model.channels.size() == 2 && spec.model.hidden.size() == 1) {
            const double c1 = double(spec.model.channels[0]), c2 = double(spec.model.channels[1]),
                         hidden = double(spec.model.hidden[0]);
            forward += 2.0 * Channels * 9.0 * c1 * Height * Width;
            forward += 2.0 * c1 * 9.0 * c2 * (Height / 2) * (Width / 2);
            forward += 2.0 * c2 * std::floor(Height / 4) * std::floor(Width / 4) * hidden;
            forward += 2.0 * hidden * Classes;
        }
        if (forward > 0.0)
            return 3.0 * forward;
    }
    return 6.0 * double(parameterCount);
}

Result<Quote> quote(const JobSpec& spec, std::int64_t parameterCount, Credits pricePerUnit)
{
    Quote q;
    q.flopsPerSample = trainingFlopsPerSample(spec, parameterCount);
    if (spec.isInference() && spec.inference.serves()) {
        // At least a millionth of a credit a token; rounded up, so that no answer is free.
        const double micro = std::ceil(double(pricePerUnit.micro()) * q.flopsPerSample / 1e9);
        if (!(micro < 1e15))
            return Error { QStringLiteral("budget"), QStringLiteral("the job is too large to price") };
        q.pricePerToken = Credits::fromMicro(std::max<std::int64_t>(1, std::int64_t(micro)));
        q.shards = spec.inference.replicas;
        q.pricePerUnit = pricePerUnit;
        return q;
    }
    // An inference shard holds at most samplesPerShard inputs, however large its batch.
    const double samples = spec.isInference() ? double(std::min(spec.inference.samplesPerShard, spec.inferenceInputs()))
                                              : double(spec.training.localSteps) * double(spec.training.batchSize);
    // A pipeline job's "shards" are its stage tasks, each an even share of its shard's work.
    const auto stages = spec.stagesPerShard();
    q.unitsPerShard = std::max<std::int64_t>(1, std::llround(q.flopsPerSample * samples / 1e9 / double(stages)));
    q.shards = spec.training.rounds * spec.unitsPerRound();
    q.pricePerUnit = pricePerUnit;
    const auto perShard = pricePerUnit.checkedMultiply(q.unitsPerShard);
    const auto training = perShard ? perShard->checkedMultiply(q.shards) : std::nullopt;
    if (!training)
        return Error { QStringLiteral("budget"), QStringLiteral("the job is too large to price") };
    q.pricePerShard = *perShard;
    q.training = *training;
    // Verifiers are paid the shard price for each re-execution; expect at least the job's rate.
    const auto rate = std::llround(std::max(spec.verificationRate, 0.05) * 1'000'000.0);
    const auto verification = training->checkedScale(rate, 1'000'000);
    const auto total = verification ? training->checkedAdd(*verification) : std::nullopt;
    if (!total)
        return Error { QStringLiteral("budget"), QStringLiteral("the job is too large to price") };
    q.verification = *verification;
    q.total = *total;
    q.worstCase = training->checkedMultiply(2).value_or(*total);
    return q;
}

} // namespace tessera::core
