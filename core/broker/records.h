#pragma once

#include "../credits.h"
#include "../error.h"
#include "../hash.h"
#include "states.h"

#include <QJsonArray>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::core::broker {

// What the broker tells about jobs, nodes, checks and accounts: typed records with one JSON form
// each (docs/PROTOCOL.md, "JSON bodies"), read back with fromJson by tessera-job and the app.
// fromJson is lenient: a field that is missing or unreadable keeps its default, so a client shows
// what a broker sent even if the broker is newer.

struct RoundRecord {
    std::int64_t round = 0;
    double testLoss = 0.0;
    double testAccuracy = 0.0;
    double trainLoss = 0.0;
    Digest weightsHash;
    Digest weightsBlob;
    std::int64_t finishedAt = 0; // when it was aggregated, ms since the epoch
    bool evaluated = true; // false: training.evaluateEvery skips it (testLoss and testAccuracy are 0)
};

struct JobStatus {
    QString id;
    QString name;
    JobState state = JobState::Running;
    std::int64_t round = 0; // rounds aggregated so far
    std::int64_t rounds = 0;
    QList<RoundRecord> history;
    Digest weightsHash;
    Digest weightsBlob;
    QString failure;
    QString owner;
    Credits escrow; // budget not yet spent
    Credits pricePerShard;
    QJsonObject spec; // the job as submitted (files by sha256); in STATUS only, not in LIST
    bool languageModel = false; // its figures are per token (loss, perplexity)
    // The current round's shards and how many of them are answered (accepted, checked or
    // verified): an inference job's progress.
    std::int64_t shards = 0;
    std::int64_t shardsDone = 0;
    QString inference; // an inference job's task ("classify", "generate", "score", "serve"); empty for training
    QJsonObject serving; // a running served job: replicas, answered, checked, tokens, answering, queued, endsAt
    // A pipeline job's shards in training (docs/PROTOCOL.md, "Stage tasks"): [{shard, stages:
    // [{stage, node, answered}]}], each stage's node and whether it answered.
    QJsonArray pipelines;
    bool full = true; // false: what another identity sees (id, state and progress only)

    QJsonObject toJson() const;
    // What anyone may see of a job that is not theirs: its id, state and progress.
    QJsonObject toPublicJson() const;
    static JobStatus fromJson(const QJsonObject& json);
};

// What an inference job names for `"model": { "fromJob": ID }` (docs/JOBS.md, "Inference jobs"):
// a finished training job's model with its final weights (initialWeights.sha256), and its
// dataset; an error (field model.fromJob) for a job that is not finished, not the caller's (no
// spec) or ran inference.
struct TrainedModel {
    QJsonObject model;
    QJsonObject dataset;
};
Result<TrainedModel> trainedModelOf(const JobStatus& status);

// A node as the broker knows it: its record, stake and (for itself or the operator) balance.
struct NodeRecord {
    QString nodeId;
    QString name;
    QString runtimeProfile;
    double benchmarkSamplesPerSecond = 0.0;
    bool online = false;
    QString firstSeen; // ISO 8601, UTC
    QString lastSeen;
    std::int64_t shardsDone = 0;
    std::int64_t shardsFailed = 0;
    std::int64_t verified = 0;
    std::int64_t disputesLost = 0;
    std::int64_t timeouts = 0;
    std::int64_t streak = 0;
    Credits slashed;
    Credits stake;
    std::optional<Credits> balance; // only the node's own, or the operator's view

    QJsonObject toJson() const;
    static NodeRecord fromJson(const QJsonObject& json);
};

// A check of a result (a sample or a canary) and how it ended.
struct CheckRecord {
    QString id;
    QString kind; // sample, canary
    QString jobId;
    std::int64_t round = 0;
    std::int64_t shard = 0;
    QString checked; // the node whose result is checked (empty for a canary)
    QString verifier;
    QString state; // waiting, running, disputed, verified, rejected, closed, cancelled
    std::int64_t checkpoint = -1; // in a dispute: the checkpoint the referee replays to
    QString outcome; // who lost: none, accused, verifier, both
    QString detail;

    QJsonObject toJson() const;
    static CheckRecord fromJson(const QJsonObject& json);
};

// An account's money: balance and stake, and (from the operator's books) unbonding stake.
struct AccountRecord {
    QString account;
    Credits balance;
    Credits stake;
    std::optional<Credits> unbonding;

    QJsonObject toJson() const;
    static AccountRecord fromJson(const QJsonObject& json);
};

} // namespace tessera::core::broker
