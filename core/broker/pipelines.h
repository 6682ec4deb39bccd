#pragma once

#include "../error.h"
#include "../hash.h"
#include "../shardtask.h"
#include "../stagetensors.h"

#include <QByteArray>
#include <QCryptographicHash>
#include <QHash>
#include <QJsonArray>
#include <QList>
#include <QString>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

namespace tessera::core::broker {

// The pipelines in flight (docs/PROTOCOL.md, "Stage tasks"): for each pipeline job's shard handed
// out, the S stage assignments and their nodes, and the tensors the broker relayed between them:
// each checked against the schedule, hashed as it passes, and logged for both stages, so that a
// stage's tensorsRoot can be checked against what it really sent and received. In memory (a
// pipeline in flight when the broker stops is handed out again). Pure: no sockets, no clock.
class Pipelines {
public:
    struct Stage {
        QString assignment;
        QString node;
        std::int64_t deadline = 0; // on the broker's clock
    };
    // One TENSOR's part, as it came from a stage.
    struct Part {
        std::int64_t to = 0;
        TensorKind kind = TensorKind::Activation;
        std::int64_t step = 0;
        std::int64_t micro = 0;
        std::int64_t offset = 0;
        std::int64_t size = 0;
    };
    // Where a part goes: the receiving stage's node and assignment, and the stage it comes from.
    struct Forward {
        QString node;
        QString assignment;
        std::int64_t from = 0;
    };

    // A shard's S stages handed out (task: any stage's, for the schedule's shape).
    void add(const ShardTask& task, std::vector<Stage> stages);
    // The part of a tensor that `node` sent for its stage `assignment`: where to forward it, or
    // why not (a stage it does not hold, another shard's stage, a tensor the schedule does not
    // send, twice, out of order, too large).
    Result<Forward> relay(const QString& node, const QString& assignment, const Part& part, qsizetype payload);
    // The payload's bytes (after relay() said where they go): hashed for the log.
    void hash(const QString& assignment, const Part& part, const QByteArray& payload);
    // The root of what the broker relayed to and from a stage (stageTensorsRoot); none for an
    // assignment it holds no pipeline of.
    std::optional<Digest> rootOf(const QString& assignment) const;
    // The stages of the pipeline an assignment belongs to (empty: none).
    std::vector<Stage> stagesOf(const QString& assignment) const;
    // The pipeline is over (every stage answered, or one failed): forgotten.
    void remove(const QString& assignment);
    // A stage's result was taken: whether every stage of its pipeline has answered now.
    bool answered(const QString& assignment);
    // One stage of each pipeline with a stage out past its deadline at `now`.
    QList<QString> lateAssignments(std::int64_t now) const;
    // The stages a node holds and has not answered.
    QList<QString> assignmentsOf(const QString& node) const;
    // One stage of each pipeline of a job.
    QList<QString> assignmentsOfJob(const QString& jobId) const;
    // A job's pipelines for its status: [{shard, stages: [{stage, node, answered}]}], by shard.
    QJsonArray describe(const QString& jobId) const;
    bool empty() const { return m_pipelines.empty(); }

private:
    using Key = std::tuple<std::int64_t, std::int64_t, int, std::int64_t, std::int64_t>; // from, to, kind, step, micro
    struct Arriving {
        std::int64_t size = 0;
        std::int64_t received = 0;
        std::shared_ptr<QCryptographicHash> hash;
    };
    struct Pipeline {
        ShardTask task;
        std::vector<Stage> stages;
        std::map<Key, Arriving> arriving; // tensors on their way
        std::set<Key> relayed; // and those that came whole: each comes once
        std::int64_t boundary = 0; // every activation's and gradient's bytes: the first one's
        std::vector<QList<StageTensor>> logs; // each stage's, as the broker saw it
        std::vector<bool> answered;
    };
    struct Place {
        std::shared_ptr<Pipeline> pipeline;
        std::int64_t stage = 0;
    };
    std::optional<Place> placeOf(const QString& assignment) const;
    // The most bytes a tensor of this kind may have.
    static std::int64_t boundOf(const ShardTask& task, TensorKind kind);

    std::vector<std::shared_ptr<Pipeline>> m_pipelines;
};

} // namespace tessera::core::broker
