#pragma once

#include "error.h"
#include "resultstates.h"
#include "shardresult.h"
#include "storage/database.h"

#include <QJsonObject>
#include <QList>
#include <QString>

#include <memory>
#include <optional>

namespace tessera::core {

// One result this node produced or re-executed, and its lifecycle.
struct ResultEntry {
    struct Step {
        NodeResultState state = NodeResultState::Computed;
        std::int64_t at = 0; // ms since the epoch
    };
    QString assignment;
    QString broker;
    QString jobId;
    std::int64_t round = 0;
    std::int64_t shard = 0;
    NodeResultState state = NodeResultState::Computed;
    QString finalHash;
    QString paid; // credits
    QString detail;
    QList<Step> history;

    QJsonObject toJson() const; // as tessera-node results --json prints it
};

// The lifecycle of a node's results, in its node.sqlite (the states: core/resultstates.h). One connection per thread: open one
// log per NodeClient.
class ResultLog {
public:
    static Result<std::unique_ptr<ResultLog>> open(const QString& path);

    // What a node keeps of a result for disputes: the cache blobs of the training states it kept,
    // by checkpoint (1..n-2; a null digest where it kept none), and what it would re-create the
    // others from: the task and its input blobs (the round's weights first).
    struct Kept {
        QList<Digest> checkpoints;
        QJsonObject task;
        QList<Digest> inputs;
    };
    Status computed(const QString& assignment, const QString& broker, const ShardResult& result, const Kept& kept = {});
    // The result went to another broker of its network (handed on by the node's session with it):
    // its kept states are that session's now (unsettledCheckpoints).
    Status moved(const QString& assignment, const QString& broker);
    // The blob of the state at checkpoint k (1..n-2) of a result, if the node kept it.
    Result<std::optional<Digest>> checkpoint(const QString& assignment, std::int64_t k);
    // A result's state now; nullopt for an unknown result.
    Result<std::optional<NodeResultState>> state(const QString& assignment);
    // What computed() kept of a result; nullopt for an unknown result.
    Result<std::optional<Kept>> kept(const QString& assignment);
    // The blobs (kept states and inputs) of one result, and of every result from this broker that
    // may still be disputed (computed, committed, sampled or disputed): a node keeps those.
    Result<QList<Digest>> checkpoints(const QString& assignment);
    Result<QList<Digest>> unsettledCheckpoints(const QString& broker);
    // A result's next state; paid: credits earned (paid only); detail: why, where there is a why.
    Status advance(const QString& assignment, NodeResultState state, const QString& paid = {}, const QString& detail = {});
    Result<QList<ResultEntry>> list(int limit = 1000);

private:
    explicit ResultLog(std::unique_ptr<storage::Database> database);
    std::unique_ptr<storage::Database> m_db;
};

} // namespace tessera::core
