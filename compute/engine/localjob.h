#pragma once

#include <compute/common/environment.h>
#include <compute/engine/weights.h>

#include <core/error.h>
#include <core/jobspec.h>
#include <core/shardresult.h>
#include <core/shardtask.h>

#include <functional>

namespace tessera::compute {

struct RoundReport {
    std::int64_t round = 0;
    Evaluation evaluation; // of W_{round+1} on the test split
    double meanTrainLoss = 0.0; // over every step of every shard of the round
    std::int64_t wallTimeMs = 0;
    core::Digest weightsHash; // canonical hash of W_{round+1}
};

struct LocalJobOutput {
    Weights finalWeights;
    QList<RoundReport> rounds;
};

struct LocalJobObserver {
    std::function<void(const core::ShardResult&)> shardFinished;
    std::function<void(const core::ShardTask&, std::int64_t step)> stepFinished;
    std::function<void(const RoundReport&)> roundFinished;
};

// A whole job on this machine: every round, every shard in order, aggregated exactly as the broker
// aggregates (same decomposition, same shard order, same arithmetic). It is the single-machine
// baseline that networked runs must equal bit for bit.
core::Result<LocalJobOutput> runJobLocally(
    const core::JobSpec& spec, const ComputeEnvironment& environment, const LocalJobObserver& observer = {});

} // namespace tessera::compute
