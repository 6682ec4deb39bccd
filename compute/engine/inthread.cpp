#include <compute/supervisor/inthread.h>

#include <compute/engine/shardrun.h>

#include "detail/inferencerun.h"

#include "weights.h"

namespace tessera::compute {

namespace {

class LocalSteps final : public ShardSteps {
public:
    explicit LocalSteps(std::unique_ptr<ShardRun> run)
        : m_run(std::move(run))
    { }
    std::int64_t completedSteps() const override { return m_run->completedSteps(); }
    bool finished() const override { return m_run->finished(); }
    double lastLoss() const override { return m_run->lastLoss(); }
    core::Status step(std::int64_t steps) override
    {
        core::Status status;
        for (std::int64_t i = 0; i < steps && status && !m_run->finished(); ++i)
            status = m_run->step();
        return status;
    }
    core::Result<QByteArray> suspend() override { return m_run->suspend(); }
    ShardOutput finish() override { return m_run->finish(); }
    std::int64_t stepsPerCall(std::int64_t, std::int64_t, std::int64_t) const override { return 1; }

private:
    std::unique_ptr<ShardRun> m_run;
};

class LocalHosted final : public HostedModel {
public:
    explicit LocalHosted(std::unique_ptr<detail::InferenceRun> run)
        : m_run(std::move(run))
    { }
    core::Result<QByteArray> answer(const core::inference::Question& question, const OnTokens& onTokens) override
    {
        return m_run->answer(question, onTokens);
    }

private:
    std::unique_ptr<detail::InferenceRun> m_run;
};

class LibTorchInThread final : public InThreadCompute {
public:
    core::Result<std::unique_ptr<ShardSteps>> open(const core::ShardTask& task, const QByteArray& startWeights,
        const QByteArray& suspended, const ComputeEnvironment& environment, StageLink* link,
        const QString& startWeightsFile) override
    {
        auto started = !suspended.isEmpty()
            ? ShardRun::resume(task, suspended, environment, ShardRun::StateOrigin::Own, startWeights)
            : startWeights.isEmpty() && !startWeightsFile.isEmpty() ? ShardRun::startFromFile(task, startWeightsFile, environment)
                                                                    : ShardRun::start(task, startWeights, environment);
        if (!started)
            return started.error();
        (*started)->setStageLink(link);
        return std::unique_ptr<ShardSteps>(std::make_unique<LocalSteps>(std::move(*started)));
    }

    core::Result<QByteArray> answer(const core::ShardTask& task, const core::DisputeQuestion& question,
        const QByteArray& startWeights, const QByteArray& keptState, const ComputeEnvironment& environment) override
    {
        using Want = core::DisputeQuestion::Want;
        return question.want == Want::Trace ? traceInterval(task, startWeights, keptState, question.checkpoint, environment)
            : question.want == Want::Operands
            ? operandsOf(task, startWeights, keptState, question.step, question.instruction, environment)
            : recreateState(task, startWeights, keptState, question.checkpoint, environment);
    }

    core::Result<QByteArray> roundWeights(const QByteArray& previous, const QByteArray& change) override
    {
        return roundWeightsFromChange(previous, change);
    }

    core::Result<std::unique_ptr<HostedModel>> host(
        const core::ShardTask& replica, const QByteArray& weights, const ComputeEnvironment& environment) override
    {
        if (!replica.inference || !replica.inference->serves() || replica.model.source != core::ModelSpec::Source::Zoo)
            return core::Error { QStringLiteral("task"), QStringLiteral("not a served zoo model's replica") };
        // Loaded (and its weights checked against startWeights) as a one-prompt generate task.
        core::inference::Question first;
        first.prompt = QByteArrayLiteral("\n");
        auto run = detail::InferenceRun::start(core::inference::answerTask(replica, first), weights, environment);
        if (!run)
            return run.error();
        return std::unique_ptr<HostedModel>(std::make_unique<LocalHosted>(std::move(*run)));
    }
};

} // namespace

std::shared_ptr<InThreadCompute> inThreadCompute()
{
    return std::make_shared<LibTorchInThread>();
}

} // namespace tessera::compute
