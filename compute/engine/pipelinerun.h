#pragma once

#include <compute/common/environment.h>
#include <compute/common/stagelink.h>
#include <compute/common/types.h>

#include <core/shardtask.h>

#include <QByteArray>
#include <QString>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

namespace tessera::compute {

// The links between the stages of one shard run by threads of one process: a tensor sent waits in
// a mailbox until its stage takes it. close() fails every receive that waits or comes later (a
// stage that failed lets the others end).
class LocalStageLinks {
public:
    explicit LocalStageLinks(std::int64_t stages);
    ~LocalStageLinks();
    StageLink& of(std::int64_t stage);
    void close(const QString& why);
    // Bytes that crossed the links so far (activations and gradients, not the sums).
    std::int64_t tensorBytes() const;

private:
    class Link;
    friend class Link;
    using Key = std::tuple<std::int64_t, std::int64_t, int, std::int64_t, std::int64_t>; // from, to, kind, step, micro
    mutable std::mutex m_mutex;
    std::condition_variable m_arrived;
    std::map<Key, QByteArray> m_mail;
    QString m_closed;
    std::int64_t m_bytes = 0;
    std::vector<std::unique_ptr<Link>> m_links;
};

// A pipeline job's shard as train-local runs it (docs/JOBS.md, "Pipeline stages"): its S stage
// tasks (core::stageTaskOf) each on a thread of its own, trading tensors through LocalStageLinks,
// their revealed parts merged into the shard's weights (every stage's Adam step count must agree).
// The result: the merged weights' hash, the last stage's losses, the slowest stage's time.
ShardOutput runPipelineShard(
    const core::ShardTask& shard, std::int64_t stages, const QByteArray& startWeights, const ComputeEnvironment& environment);

// The stages' revealed weights (pickled dicts) merged into one: an error names a tensor two stages
// both hold unless it is the same (Adam's step count).
core::Result<Weights> mergeStageWeights(const QList<QByteArray>& stageWeights);

} // namespace tessera::compute
