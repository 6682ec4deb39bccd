#include "pipelinerun.h"

#include "detail/tensors.h"
#include "shardrun.h"

#include <core/decomposition.h>

#include <torch/torch.h>

#include <QElapsedTimer>

#include <thread>

namespace tessera::compute {

class LocalStageLinks::Link : public StageLink {
public:
    Link(LocalStageLinks& hub, std::int64_t self)
        : m_hub(hub)
        , m_self(self)
    { }
    core::Status send(std::int64_t to, Kind kind, std::int64_t step, std::int64_t micro, const QByteArray& bytes) override
    {
        std::lock_guard lock(m_hub.m_mutex);
        if (!m_hub.m_closed.isEmpty())
            return core::Error { QStringLiteral("stage"), m_hub.m_closed };
        if (to < 0 || to >= std::int64_t(m_hub.m_links.size()) || to == m_self)
            return core::Error { QStringLiteral("stage"), QStringLiteral("no stage %1 to send to").arg(to) };
        m_hub.m_mail[{ m_self, to, int(kind), step, micro }] = bytes;
        if (kind != Kind::Squares)
            m_hub.m_bytes += bytes.size();
        m_hub.m_arrived.notify_all();
        return {};
    }
    core::Result<QByteArray> receive(std::int64_t from, Kind kind, std::int64_t step, std::int64_t micro) override
    {
        std::unique_lock lock(m_hub.m_mutex);
        const Key key { from, m_self, int(kind), step, micro };
        m_hub.m_arrived.wait(lock, [&] { return !m_hub.m_closed.isEmpty() || m_hub.m_mail.count(key); });
        const auto found = m_hub.m_mail.find(key);
        if (found == m_hub.m_mail.end())
            return core::Error { QStringLiteral("stage"), m_hub.m_closed };
        auto bytes = std::move(found->second);
        m_hub.m_mail.erase(found);
        return bytes;
    }

private:
    LocalStageLinks& m_hub;
    std::int64_t m_self;
};

LocalStageLinks::LocalStageLinks(std::int64_t stages)
{
    for (std::int64_t s = 0; s < stages; ++s)
        m_links.push_back(std::make_unique<Link>(*this, s));
}

LocalStageLinks::~LocalStageLinks() = default;

StageLink& LocalStageLinks::of(std::int64_t stage)
{
    return *m_links.at(std::size_t(stage));
}

void LocalStageLinks::close(const QString& why)
{
    std::lock_guard lock(m_mutex);
    if (m_closed.isEmpty())
        m_closed = why.isEmpty() ? QStringLiteral("the pipeline was stopped") : why;
    m_arrived.notify_all();
}

std::int64_t LocalStageLinks::tensorBytes() const
{
    std::lock_guard lock(m_mutex);
    return m_bytes;
}

// weights.cpp's: the stages' tensors merged.
core::Result<detail::NamedTensors> mergeStageTensors(std::vector<detail::NamedTensors> parts);

core::Result<Weights> mergeStageWeights(const QList<QByteArray>& stageWeights)
{
    std::vector<detail::NamedTensors> parts;
    for (qsizetype s = 0; s < stageWeights.size(); ++s) {
        auto tensors
            = detail::unpickleTensors(stageWeights[s], QStringLiteral("stage %1's weights are not a dict of tensors").arg(s));
        if (!tensors)
            return tensors.error();
        parts.push_back(std::move(*tensors));
    }
    auto merged = mergeStageTensors(std::move(parts));
    if (!merged)
        return merged.error();
    return Weights { detail::pickleTensors(*merged), detail::canonicalHash(*merged) };
}

ShardOutput runPipelineShard(
    const core::ShardTask& shard, std::int64_t stages, const QByteArray& startWeights, const ComputeEnvironment& environment)
{
    QElapsedTimer timer;
    timer.start();
    LocalStageLinks links(stages);
    std::vector<ShardOutput> outputs(static_cast<std::size_t>(stages));
    std::vector<std::thread> threads;
    for (std::int64_t s = 0; s < stages; ++s) {
        threads.emplace_back([&, s] {
            const auto task = core::stageTaskOf(shard, s, stages);
            auto& output = outputs[std::size_t(s)];
            auto run = ShardRun::start(task, startWeights, environment);
            if (!run) {
                output.result = failedResult(task, run.error().toString());
                links.close(QStringLiteral("stage %1 did not start").arg(s));
                return;
            }
            (*run)->setKeepsCheckpointState(false);
            (*run)->setStageLink(&links.of(s));
            while (!(*run)->finished()) {
                if (auto status = (*run)->step(); !status) {
                    output.result = failedResult(task, QStringLiteral("stage %1: %2").arg(s).arg(status.error().toString()));
                    links.close(QStringLiteral("stage %1 failed").arg(s));
                    return;
                }
            }
            output = (*run)->finish();
        });
    }
    for (auto& thread : threads)
        thread.join();
    ShardOutput whole;
    QList<QByteArray> parts;
    for (const auto& output : outputs) {
        if (output.result.outcome != core::ShardResult::Outcome::Completed) {
            whole.result = output.result;
            return whole;
        }
        parts.append(output.weights);
    }
    auto merged = mergeStageWeights(parts);
    whole.result = outputs.back().result;
    if (!merged) {
        whole.result = failedResult(shard, merged.error().toString());
        return whole;
    }
    whole.weights = merged->bytes;
    whole.result.finalHash = merged->canonicalHash;
    whole.result.weightsSha256 = core::Digest::ofBytes(whole.weights);
    whole.result.tensorsRoot = {};
    whole.result.checkpointHashes.clear(); // each stage's chain is its own part's
    whole.result.wallTimeMs = timer.elapsed();
    return whole;
}

} // namespace tessera::compute
