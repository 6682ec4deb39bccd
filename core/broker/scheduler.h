#pragma once

#include "../capabilities.h"
#include "../hash.h"
#include "../jobspec.h"
#include "../nodeinfo.h"
#include "../shardtask.h"
#include "assignment.h"
#include "options.h"

#include <QHash>
#include <QList>
#include <QSet>
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
    // A shard out this many times longer than the job's usual is late (Options::stragglerFactor).
    explicit Scheduler(double stragglerFactor = 4.0)
        : m_stragglerFactor(stragglerFactor)
    { }

    // A running job's current round.
    struct Round {
        QString jobId;
        JobSpec spec;
        std::int64_t round = 0;
        Digest weightsHash;
        Digest weightsBlob;
        std::optional<WeightsChange> change; // weightsBlob from the previous round's
        double flopsPerSample = 0.0; // training FLOPs per sample (the quote's); 0: unknown
        std::int64_t memoryMiB = 0; // a shard's memory on a node (core::estimateShardMemory); 0: unknown

        // Whether a node with these limits can take the round's shards: threads enough (a shard's
        // count is fixed by its job, except a portable job's, whose bits are the same with any
        // count: a node runs it with as many as it allows) and, where both are known, memory enough
        // (Compute/MaxMemoryMiB).
        bool runsOn(int maxThreads, std::int64_t maxMemoryMiB, const QStringList& capabilities) const
        {
            const bool threads = spec.training.threads <= maxThreads
                || spec.training.determinism == TrainingSpec::Determinism::Portable
                || (spec.isInference() && spec.inference.portable());
            return threads && (maxMemoryMiB <= 0 || memoryMiB <= maxMemoryMiB)
                && missingCapabilities(capabilities, spec).isEmpty();
        }
        // The same for a registered node: its threads, memory and what it declared it can run
        // (docs/PROTOCOL.md, "Capabilities").
        bool runsOn(const NodeInfo& node) const { return runsOn(node.maxThreads, node.maxMemoryMiB, node.capabilities); }
    };
    struct Pick {
        const Round* round = nullptr;
        std::int64_t shard = 0; // the unit: a pipeline job's stage task (JobSpec::stagesPerShard)
    };

    // A running job, in submission order, with the shards of its round already answered.
    void add(Round round, const QList<std::int64_t>& answered = {});
    void remove(const QString& jobId);
    void clear();
    const Round* find(const QString& jobId) const;
    bool hasWork() const { return !m_jobs.empty(); }

    // The next shard for a node that runs up to maxThreads threads. Jobs in submission order; in a
    // round, first the shards whose every assignment failed or was lost (never to a node that
    // failed that shard in this round), then the ones never handed out, then (once every shard is
    // out) the one that is latest and that the node does not hold already: a straggler's shard goes
    // to a second node, and the first valid result wins. A shard is late once its deadline passed,
    // or once it has been out stragglerFactor times as long as the job's shards usually take
    // (the median of its last answers, from the third on): no claim of a node's keeps a shard.
    // A node that said how much memory it gives a shard (maxMemoryMiB > 0) gets no shard estimated larger.
    // A node gets no shard of a job that needs a capability it did not declare (`capabilities`:
    // every one a job may need when not given, as in the scheduler's own tests).
    std::optional<Pick> pick(const QString& nodeId, int maxThreads, std::int64_t now, std::int64_t maxMemoryMiB = 0,
        const std::optional<QStringList>& capabilities = std::nullopt);
    // A pipeline job's next shard for a gang of waiting nodes (docs/PROTOCOL.md, "Stage tasks"): in
    // submission order, the first job with a shard none of whose S stage units is out and one of
    // which is unanswered, and S of `candidates` (in the order given) that can run its stages,
    // are not excluded from the job and failed no unit of that shard this round. pick() never
    // hands out a pipeline job's units: they go out S at a time, from here.
    struct Candidate {
        QString nodeId;
        int maxThreads = 1;
        std::int64_t maxMemoryMiB = 0;
        QStringList capabilities;
        std::int64_t roundTripMs = -1; // to the broker (docs/PROTOCOL.md, "Round trips"); -1: not measured
    };
    struct PipelinePick {
        const Round* round = nullptr;
        std::int64_t shard = 0; // units [shard S, shard S + S)
        QList<QString> nodes; // stage s's at s
    };
    // A node that gave a unit of a shard back does not get that shard again for ReturnedWaitMs.
    // The stages go to the eligible candidates of the shortest round trips (stage 0 the shortest;
    // the tensors cross the broker), then, unmeasured, in the candidates' order.
    std::optional<PipelinePick> pickPipeline(const QList<Candidate>& candidates, std::int64_t now) const;
    // The picked shard went out as this assignment at `issued`.
    void handedOut(const QString& jobId, const QString& assignmentId, std::int64_t shard, const QString& nodeId,
        std::int64_t deadline, std::int64_t issued);
    bool isOut(const QString& jobId, const QString& assignmentId) const;
    // Assignments a node holds, over all jobs.
    int heldBy(const QString& nodeId) const;
    enum class Release { GivenBack, Failed };
    // A node that failed this many shards of a job's round gets no more of that round.
    static constexpr int MaxFailuresPerRound = 3;
    // The assignment failed, was given back or its node went: the shard goes back in the queue,
    // unless it is answered or another node holds it. A node that failed a shard does not get it
    // again in this round.
    void release(const QString& jobId, const QString& assignmentId, Release why = Release::GivenBack);
    // The node gave the shard back (or revealed it in a form it was not asked for): another node
    // gets it first; it comes back to this one only when no other took it for a while
    // (docs/SECURITY.md, "Hostile peers": a give-back is no way to keep a shard).
    void returnedBy(const QString& jobId, std::int64_t shard, const QString& nodeId, std::int64_t now);
    static constexpr std::int64_t ReturnedWaitMs = 60'000;
    // The nodes that reported a shard of the current round as failed.
    QList<QString> failedBy(const QString& jobId, std::int64_t shard) const;
    // A node whose failure report the broker disproved gets no more of the job's shards.
    void exclude(const QString& jobId, const QString& nodeId);
    // Every assignment of a node that went.
    void nodeLost(const QString& nodeId);
    // The assignment answered its shard at `now` (how long it took counts towards the job's usual).
    void answered(const QString& jobId, const QString& assignmentId, std::int64_t shard, std::int64_t now = -1);
    // How long the job's shards usually take (the median of the last answers); 0 while fewer than 3.
    std::int64_t usualMs(const QString& jobId) const;
    // The assignment is no longer out (its shard was answered by another).
    void forget(const QString& jobId, const QString& assignmentId);
    // The round was aggregated: the job trains round `round` from these weights.
    void advance(const QString& jobId, std::int64_t round, const Digest& weightsHash, const Digest& weightsBlob,
        const std::optional<WeightsChange>& change = std::nullopt);
    // A sampled result of the current round lost its check: the shard is trained again.
    void reopen(const QString& jobId, std::int64_t round, std::int64_t shard);

    // Samples per second a node is expected to train, from its benchmark: a claim, so at most a
    // hint, held between Options::minClaimedSamplesPerSecond and maxClaimedSamplesPerSecond (a node
    // that has not benchmarked is assumed slow, so that its deadline is generous).
    static double expectedSamplesPerSecond(const NodeInfo& node, const BrokerOptions& options = {});
    // When the node must have answered a task handed out now: the expected time times
    // Options::deadlineSlack, between Options::minDeadlineMs and maxDeadlineMs. Here the expected
    // time is the shard's samples over the node's claimed samples/s (deadline() below knows more).
    static std::int64_t deadlineFor(const ShardTask& task, const NodeInfo& node, const BrokerOptions& options, std::int64_t now);
    // The same with the work measured in FLOPs (samples x flopsPerSample, the job's quote): the
    // longer of the time at the node's claimed throughput (its benchmark, bounded, times
    // benchmarkFlopsPerSample()) and at the throughput it delivered on the shards of that thread
    // count it answered (answer time less hand-out time on the broker's clock, so transfers
    // count). So a 100x larger model gets a 100x longer deadline, and a node that proved slower
    // than it claimed gets the time it needs. Without flopsPerSample it is deadlineFor().
    std::int64_t deadline(
        const ShardTask& task, double flopsPerSample, const NodeInfo& node, const BrokerOptions& options, std::int64_t now) const;
    // That expected time times Options::deadlineSlack, unclamped, given what was observed of the
    // node (0: nothing).
    static double expectedMs(const ShardTask& task, double flopsPerSample, const NodeInfo& node, double observedFlopsPerMs,
        const BrokerOptions& options);
    // The FLOPs per millisecond the node delivered on its answered shards of `threads` threads (a
    // moving average), 0 before its first answer of a job with known FLOPs.
    double observedFlopsPerMs(const QString& nodeId, std::int64_t threads) const
    {
        return m_observedFlopsPerMs.value(observedKey(nodeId, threads));
    }

private:
    struct Out {
        std::int64_t shard = 0;
        QString node;
        std::int64_t deadline = 0;
        std::int64_t issued = 0;
    };
    struct Job {
        Round round;
        std::vector<bool> answered;
        QHash<QString, Out> out; // by assignment id
        std::int64_t cursor = 0; // shards below it were handed out at least once
        std::deque<std::int64_t> reissue; // shards left with no assignment out
        QHash<std::int64_t, QList<QString>> failedBy; // shard -> nodes that failed it, this round
        QHash<std::int64_t, QHash<QString, std::int64_t>> returnedAt; // shard -> node -> when it gave it back
        QSet<QString> excluded; // nodes whose failure report was disproved: none of this job's shards
        std::deque<std::int64_t> durations; // of the last answers, ms
    };

    const Job* job(const QString& jobId) const;
    Job* job(const QString& jobId);
    std::optional<std::int64_t> choose(Job& job, const QString& nodeId, std::int64_t now) const;
    bool isLate(const Job& job, const Out& out, std::int64_t now) const;
    static bool heldByAnyone(const Job& job, std::int64_t shard);
    bool heldInTime(const Job& job, std::int64_t shard, std::int64_t now) const;
    static bool heldBy(const Job& job, std::int64_t shard, const QString& nodeId);
    static bool failedBy(const Job& job, std::int64_t shard, const QString& nodeId);
    static std::int64_t usualMs(const Job& job);
    static QString observedKey(const QString& nodeId, std::int64_t threads) { return nodeId + u'/' + QString::number(threads); }

    std::vector<Job> m_jobs; // in submission order
    QHash<QString, double> m_observedFlopsPerMs; // by node and thread count (observedKey)
    double m_stragglerFactor = 4.0;
};

} // namespace tessera::core::broker
