#pragma once

#include <compute/common/environment.h>
#include <compute/common/stagelink.h>
#include <compute/common/types.h>

#include <core/disputequestion.h>
#include <core/error.h>
#include <core/inference/question.h>
#include <core/shardtask.h>

#include <QByteArray>

#include <cstdint>
#include <functional>
#include <memory>

namespace tessera::compute {

// One shard's training as the compute thread drives it, a few steps a call: on the thread itself
// or in a sandboxed worker (sandbox::RemoteShardRun), with the same calls.
class ShardSteps {
public:
    virtual ~ShardSteps() = default;
    virtual std::int64_t completedSteps() const = 0;
    virtual bool finished() const = 0;
    virtual double lastLoss() const = 0;
    virtual core::Status step(std::int64_t steps) = 0;
    virtual core::Result<QByteArray> suspend() = 0;
    virtual ShardOutput finish() = 0;
    // Steps of the next call: one on the thread (a boundary after each); in a worker, as many as
    // fill about targetNs (see ComputeThread).
    virtual std::int64_t stepsPerCall(std::int64_t lastCallNs, std::int64_t lastCallSteps, std::int64_t targetNs) const = 0;
};

// A served model's replica, loaded once (docs/PROTOCOL.md, "Serving"): answers one question at a
// time with the line of its generate task, calling onTokens(from, tokens) with the tokens it may
// stream as it draws them. Used from one thread at a time.
class HostedModel {
public:
    using OnTokens = std::function<void(std::int64_t from, const QList<std::int64_t>& tokens)>;
    virtual ~HostedModel() = default;
    virtual core::Result<QByteArray> answer(const core::inference::Question& question, const OnTokens& onTokens) = 0;
};

// Training on the compute thread itself, for Compute/Sandbox = false in a program that links
// LibTorch (tessera-node, the tests). The compute thread is LibTorch-free without it: a program
// that does not pass one (the desktop app) trains in a worker even then, one that is not confined.
class InThreadCompute {
public:
    virtual ~InThreadCompute() = default;
    // From the round's weights (or, startWeights empty, the file `startWeightsFile`: a stage task
    // reads its share alone), or resumed from a paused shard's state (suspended non-empty). A
    // stage task trades its tensors over `link` (which outlives the run).
    virtual core::Result<std::unique_ptr<ShardSteps>> open(const core::ShardTask& task, const QByteArray& startWeights,
        const QByteArray& suspended, const ComputeEnvironment& environment, StageLink* link = nullptr,
        const QString& startWeightsFile = {})
        = 0;
    // A dispute's question about a shard this node trained (recreateState, traceInterval, operandsOf).
    virtual core::Result<QByteArray> answer(const core::ShardTask& task, const core::DisputeQuestion& question,
        const QByteArray& startWeights, const QByteArray& keptState, const ComputeEnvironment& environment)
        = 0;
    // The round's weights from the previous round's and its int8 change (roundWeightsFromChange).
    virtual core::Result<QByteArray> roundWeights(const QByteArray& previous, const QByteArray& change) = 0;
    // A served model's replica from its serve task and the model's weights (canonical hash:
    // replica.startWeights); a zoo gpt only, which runs no code of the job owner's.
    virtual core::Result<std::unique_ptr<HostedModel>> host(
        const core::ShardTask& replica, const QByteArray& weights, const ComputeEnvironment& environment)
        = 0;
};

// LibTorch's, on the calling thread (ShardRun); defined in the compute library.
std::shared_ptr<InThreadCompute> inThreadCompute();

} // namespace tessera::compute
