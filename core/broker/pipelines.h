#pragma once

#include "../error.h"
#include "../hash.h"
#include "../shardtask.h"
#include "../stagetensors.h"
#include "brokerstore.h"

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
// stage's tensorsRoot can be checked against what it really sent and received. What each stage
// received is also recorded (core::StageInputs), in a file of the recording folder, for the
// stage's re-execution. The rest in memory (a pipeline in flight when the broker stops is handed
// out again). No sockets, no clock.
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

    // Where the stages' inputs are recorded (the blob store's staging folder); the system's
    // temporary folder until set.
    void setRecordingDirectory(const QString& directory) { m_recordingDirectory = directory; }
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
    // What the broker relayed to a stage, as a file (core::StageInputs) now the caller's to take
    // (into the blob store) and its SHA-256; none when it could not be recorded (a full disk).
    struct Recorded {
        QString file;
        Digest digest;
    };
    std::optional<Recorded> takeInputs(const QString& assignment);
    // Whether a stage has received every tensor its schedule owes it: an answer before that is
    // no stage's honest result.
    bool receivedAll(const QString& assignment) const;
    // A stage's result drawn for re-execution: its check waits here until every stage has
    // answered (a pipeline that stops first drops it with the held results).
    void holdSample(const QString& assignment, Check check);
    std::optional<Check> sampleOf(const QString& assignment) const;
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
    static constexpr std::int64_t MaxArrivingPerStage = 2;

private:
    using Key = std::tuple<std::int64_t, std::int64_t, int, std::int64_t, std::int64_t>; // from, to, kind, step, micro
    struct Arriving {
        std::int64_t size = 0;
        std::int64_t received = 0;
        std::shared_ptr<QCryptographicHash> hash;
        QByteArray bytes; // for the receiver's record
    };
    // A stage's inputs as they are recorded: appended to a file of their own (opened for each
    // tensor: no descriptor is held between them), named *.part so that a blob store opened after
    // a crash removes it.
    struct Recording {
        QString file; // empty: taken, or it could not be written
        std::unique_ptr<QCryptographicHash> hash;
        void write(const QByteArray& bytes);
    };
    struct Pipeline {
        ~Pipeline(); // removes the records nobody took
        ShardTask task;
        std::vector<Stage> stages;
        std::map<Key, Arriving> arriving; // tensors on their way
        std::set<Key> relayed; // and those that came whole: each comes once
        std::int64_t boundary = 0; // every activation's and gradient's bytes: the first one's
        std::vector<QList<StageTensor>> logs; // each stage's, as the broker saw it
        std::vector<Recording> inputs; // each stage's
        std::vector<std::optional<Check>> samples; // each stage's, when drawn
        std::vector<bool> answered;
    };
    struct Place {
        std::shared_ptr<Pipeline> pipeline;
        std::int64_t stage = 0;
    };
    std::optional<Place> placeOf(const QString& assignment) const;

    std::vector<std::shared_ptr<Pipeline>> m_pipelines;
    QString m_recordingDirectory;
};

} // namespace tessera::core::broker
