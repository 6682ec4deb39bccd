#pragma once

#include "credits.h"
#include "error.h"
#include "jobspec.h"

#include <optional>

namespace tessera::core {

// What a job costs. Work is measured in work units of 1 GFLOP of training (forward and backward,
// taken as 3 forward passes); a shard's units are its model's FLOPs per sample times the samples
// it trains on (local steps x batch size).
struct Quote {
    double flopsPerSample = 0.0; // training FLOPs per sample
    std::int64_t unitsPerShard = 0;
    std::int64_t shards = 0; // rounds x shards per round
    Credits pricePerUnit;
    Credits pricePerShard; // what a provider is paid for an accepted shard
    Credits training; // every shard once
    Credits verification; // the expected re-executions (at least the job's verification rate)
    Credits total;
    Credits worstCase; // every shard re-executed once, as while the nodes are new
    // A served job (docs/JOBS.md, "Served models"): what one token an answer reads or writes costs
    // (flopsPerSample is then one position's FLOPs); the other prices are 0: it pays as it answers.
    Credits pricePerToken;

    QJsonObject toJson() const;
    // What toJson wrote (a broker's QUOTE); a field that is missing or unreadable stays zero.
    static Quote fromJson(const QJsonObject& json);
};

// A zoo model's parameter count from its spec alone (nothing is built): exact on Fashion-MNIST;
// for tensor files, whose input width the broker does not read here, a lower bound (the layers
// after the first). Nothing for a TorchScript model. Saturates instead of overflowing.
std::optional<std::int64_t> zooParameterCount(const JobSpec& spec);

// Training FLOPs per sample: exact for zoo models on Fashion-MNIST; otherwise 6 x parameters.
double trainingFlopsPerSample(const JobSpec& spec, std::int64_t parameterCount);
// The training FLOPs per sample of the model a node's benchmark times (`tessera-node benchmark`,
// "mlp": the zoo MLP [256, 128] on Fashion-MNIST): its samples/s times this is its FLOP/s.
double benchmarkFlopsPerSample();

// The quote for a job at a price; an error if the numbers overflow.
Result<Quote> quote(const JobSpec& spec, std::int64_t parameterCount, Credits pricePerUnit);

} // namespace tessera::core
