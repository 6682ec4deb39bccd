#pragma once

#include "../hash.h"
#include "../jobspec.h"
#include "../nodeinfo.h"
#include "../shardtask.h"
#include "options.h"

#include <QHash>
#include <QList>
#include <QString>

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace tessera::core::broker {

// Which shard goes to which node next, for the current round of every running job. In memory and
// pure (no database, no clock of its own): the broker keeps the database in step and, after a
// restart, builds it again from there. Handing out a shard costs nothing however many shards a
// round has.
class Scheduler {
public:
    // A running job's current round.
    struct Round {
        QString jobId;
        JobSpec spec;
        std::int64_t round = 0;
        Digest weightsHash;
        Digest weightsBlob;
    };
    struct Pick {
        const Round* round = nullptr;
        std::int64_t shard = 0;
    };

    // A running job, in submission order, with the shards of its round already answered.
    void add(Round round, const QList<std::int64_t>& answered = {});
    void remove(const QString& jobId);
    void clear();
    const Round* find(const QString& jobId) const;
    bool hasWork() const { return !m_jobs.empty(); }

    // The next shard for a node that runs up to maxThreads threads. Jobs in submission order; in a
    // round, first the shards whose every assignment failed or was lost, then the ones never handed
    // out, then (once every shard is out) the one whose deadline passed longest ago and that the
    // node does not hold already: a straggler's shard goes to a second node, and the first valid
    // result wins.
    std::optional<Pick> pick(const QString& nodeId, int maxThreads, std::int64_t now);
    // The picked shard went out as this assignment.
    void handedOut(
        const QString& jobId, const QString& assignmentId, std::int64_t shard, const QString& nodeId, std::int64_t deadline);
    bool isOut(const QString& jobId, const QString& assignmentId) const;
    // The assignment failed, was given back or its node went: the shard goes back in the queue,
    // unless it is answered or another node holds it.
    void release(const QString& jobId, const QString& assignmentId);
    // Every assignment of a node that went.
    void nodeLost(const QString& nodeId);
    // The assignment answered its shard.
    void answered(const QString& jobId, const QString& assignmentId, std::int64_t shard);
    // The assignment is no longer out (its shard was answered by another).
    void forget(const QString& jobId, const QString& assignmentId);
    // The round was aggregated: the job trains round `round` from these weights.
    void advance(const QString& jobId, std::int64_t round, const Digest& weightsHash, const Digest& weightsBlob);
    // A sampled result of the current round lost its check: the shard is trained again.
    void reopen(const QString& jobId, std::int64_t round, std::int64_t shard);

    // Samples per second a node is expected to train, from its benchmark (a node that has not
    // benchmarked is assumed slow, so that its deadline is generous).
    static double expectedSamplesPerSecond(const NodeInfo& node);
    // When the node must have answered a task handed out now: the expected time times
    // Options::deadlineSlack, and never less than Options::minDeadlineMs.
    static std::int64_t deadlineFor(const ShardTask& task, const NodeInfo& node, const BrokerOptions& options, std::int64_t now);

private:
    struct Out {
        std::int64_t shard = 0;
        QString node;
        std::int64_t deadline = 0;
    };
    struct Job {
        Round round;
        std::vector<bool> answered;
        QHash<QString, Out> out; // by assignment id
        std::int64_t cursor = 0; // shards below it were handed out at least once
        std::deque<std::int64_t> reissue; // shards left with no assignment out
    };

    Job* job(const QString& jobId);
    static std::optional<std::int64_t> choose(Job& job, const QString& nodeId, std::int64_t now);
    static bool heldByAnyone(const Job& job, std::int64_t shard);
    static bool heldInTime(const Job& job, std::int64_t shard, std::int64_t now);
    static bool heldBy(const Job& job, std::int64_t shard, const QString& nodeId);

    std::vector<Job> m_jobs; // in submission order
};

} // namespace tessera::core::broker
