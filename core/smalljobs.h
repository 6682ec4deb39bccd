#pragma once

#include "jobspec.h"

#include <QJsonObject>
#include <QList>
#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::core {

// The small MLP job, built once for everyone who needs one (the app's practice job, the tests and
// the benches): a multilayer perceptron of `hidden` on Fashion-MNIST, SGD with momentum 0.9 at a
// learning rate of 0.05, one round of one shard of 20 steps of 32 samples, a checkpoint every 5
// steps, one thread, fast determinism, int8 updates, a budget of one micro-credit. Callers change
// what their case is about.
inline JobSpec smallMlpJob(const QString& name, const QList<std::int64_t>& hidden = { 32 })
{
    JobSpec spec;
    spec.name = name;
    spec.model.zoo = QStringLiteral("mlp");
    spec.model.hidden = hidden;
    spec.dataset.builtin = QStringLiteral("fashion-mnist");
    spec.optimizer.lr = 0.05;
    spec.optimizer.momentum = 0.9;
    spec.training.rounds = 1;
    spec.training.shardsPerRound = 1;
    spec.training.localSteps = 20;
    spec.training.batchSize = 32;
    spec.training.threads = 1;
    spec.training.checkpointInterval = 5;
    spec.budget = Credits::fromMicro(1);
    return spec;
}

// The small MLP job (above) with a zoo gpt of `layers` blocks of `heads` heads, `width` and
// `context` on the built-in text instead: the gpt the tests and benches start from.
inline JobSpec smallGptJob(const QString& name, std::int64_t layers, std::int64_t heads, std::int64_t width, std::int64_t context)
{
    auto spec = smallMlpJob(name);
    spec.model = ModelSpec {};
    spec.model.zoo = QStringLiteral("gpt");
    spec.model.layers = layers;
    spec.model.heads = heads;
    spec.model.width = width;
    spec.model.context = context;
    spec.dataset.builtin = QStringLiteral("fortunes");
    return spec;
}

// An inference job that runs `trained`'s model and data with the weights in `weightsFile`
// (docs/JOBS.md, "Inference jobs"), for the tests and benches; read as a job file is, so that its
// training fields are filled in from `inference`. nullopt when it is not a valid job.
inline std::optional<JobSpec> inferenceJobOf(const JobSpec& trained, const QString& weightsFile, const InferenceSpec& inference)
{
    auto json = trained.toJson();
    json.insert(QStringLiteral("kind"), QStringLiteral("inference"));
    json.remove(QStringLiteral("optimizer"));
    json.remove(QStringLiteral("training"));
    json.remove(QStringLiteral("aggregation"));
    auto model = json.value(QStringLiteral("model")).toObject();
    model.insert(QStringLiteral("initialWeights"), QJsonObject { { QStringLiteral("file"), weightsFile } });
    json.insert(QStringLiteral("model"), model);
    json.insert(QStringLiteral("inference"), inferenceSpecToJson(inference));
    auto spec = JobSpec::fromJson(json);
    return spec ? std::optional<JobSpec>(*spec) : std::nullopt;
}

} // namespace tessera::core
