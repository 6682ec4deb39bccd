#pragma once

#include "jobspec.h"

#include <QList>
#include <QString>

#include <cstdint>

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

} // namespace tessera::core
