#pragma once

#include "../blobstore.h"
#include "../error.h"
#include "../jobspec.h"
#include "../ledger/ledger.h"
#include "../nodeinfo.h"
#include "../pricing.h"
#include "../shardresult.h"
#include "../shardtask.h"
#include "../signing.h"
#include "../storage/database.h"
#include "../verification/verification.h"
#include "records.h"
#include "trainingmath.h"

#include <QJsonObject>
#include <QList>
#include <QRandomGenerator>
#include <QString>

#include <deque>
#include <memory>
#include <optional>
#include <vector>

namespace tessera::core::broker {

// A shard handed to a node.
struct Assignment {
    QString id;
    ShardTask task;
    Digest startWeightsBlob;
    std::int64_t deadlineMs = 0; // absolute, on the broker's clock
};

// The blobs a job names: its TorchScript model and its tensor files.
QList<Digest> blobsNamedBy(const JobSpec& spec);

// Accepted: counted and paid; Held: counted, paid once a re-execution confirms it (a sampled
// result, or a verifier's re-execution); Stale: the shard was already answered; Failed: recorded,
// the shard goes to another node.
enum class Verdict { Accepted, Held, Stale, Failed };

// Something the broker has to tell a node that did not ask: a dispute needs the training state at a
// checkpoint (CHECKPOINT), or what became of a result (VERDICT). docs/PROTOCOL.md.
struct Notice {
    enum class Kind { CheckpointRequest, Verdict };
    Kind kind = Kind::Verdict;
    QString nodeId;
    QJsonObject body;
};

// The broker's brain: jobs, rounds, shards, assignments, results and nodes, kept in SQLite so that a
// kill -9 loses nothing but the shards in flight (re-issued on restart). Single-threaded: the
// broker's network loop owns it. It knows nothing of sockets; net/ turns messages into calls.
class Broker {
public:
    struct Options {
        std::int64_t minDeadlineMs = 30'000; // a shard's deadline is at least this
        double deadlineSlack = 4.0; // times the node's expected time
        int maxShardFailures = 5; // failed results of one shard before the job fails
        Credits pricePerUnit = Credits::fromMicro(100'000); // per GFLOP of training
        Credits minStake = Credits::fromMicro(10'000'000); // a node bonds this much to take work
        bool faucet = false; // mint what owners and nodes lack (local and demo brokers only)
        verification::SamplingPolicy sampling; // how often a node's results are re-executed
        double canaryRate = 0.0; // share of handed-out work that re-checks an already verified shard
        double slashFraction = 0.5; // of its stake, a node loses per lost dispute or proven lie
        std::int64_t disputeTimeoutMs = 60'000; // to deliver a checkpoint state in a dispute
        std::int64_t selfVerifyAfterMs = 120'000; // a sample no other node can check: the broker re-executes it
        // A sample that no connected node could check (none with its runtime profile, threads and
        // stake) is re-executed by the broker at once, once the broker has run this long (its nodes
        // come back after a restart); negative: only after selfVerifyAfterMs.
        std::int64_t selfVerifyAloneAfterMs = 5'000;
        std::int64_t unbondingDelayMs = 24LL * 3600 * 1000; // unbonded stake stays slashable this long
        double crossProfileTolerance = 1e-3; // relative L2 distance, results of different runtime profiles
        std::uint64_t randomSeed = 0; // 0: sample draws from the system's random source
        std::int64_t maxRunningJobsPerOwner = 20; // more running jobs of one owner are refused
    };

    static Result<std::unique_ptr<Broker>> open(
        const QString& dataDirectory, TrainingMath& math, const Clock& clock, Options options);
    static Result<std::unique_ptr<Broker>> open(const QString& dataDirectory, TrainingMath& math, const Clock& clock)
    {
        return open(dataDirectory, math, clock, Options {});
    }

    BlobStore& blobs() { return *m_blobs; }

    // Job owners. The budget moves from the owner's balance into the job's escrow.
    Result<QString> submit(const JobSpec& spec, const QString& owner = QStringLiteral("local"));
    Result<Quote> quoteFor(const JobSpec& spec);
    Result<JobStatus> status(const QString& jobId);
    Result<QList<JobStatus>> list();
    Status cancel(const QString& jobId);

    // Nodes.
    Status registerNode(const NodeInfo& node);
    // The node is gone: its shards are handed to others.
    void nodeLost(const QString& nodeId);
    // The next shard for this node, if there is work it can do.
    Result<std::optional<Assignment>> assign(const QString& nodeId);
    // Commit, then reveal: the node's signed commitment to its result (signDocument over
    // assignment, jobId, round, shard, finalHash, chainRoot), checked against its signing key.
    Status commit(const QString& nodeId, const QJsonObject& signedCommitment);
    // A node's answer. Accepted: counted (and the round aggregated if it was the last shard);
    // Stale: the shard was already answered; Failed: recorded, the shard goes to another node.
    // An error means the result is invalid (wrong hashes, missing weights) and was not counted.
    Result<Verdict> acceptResult(const QString& nodeId, const QString& assignmentId, const ShardResult& result);
    // Whether any running job has a shard waiting for a node (to wake waiting nodes).
    bool hasWork();

    // Disputes. The node's training state at the checkpoint a dispute asked for has arrived as a
    // blob (a null digest: the node says it does not have it); the broker replays the one interval.
    Status checkpointDelivered(const QString& nodeId, const QString& verificationId, const Digest& blob);
    // Deadlines of disputes and re-executions, samples nobody can check, unbonded stake that is
    // due: called about once a second by the network loop.
    void tick();
    // What to send to nodes since the last call.
    std::vector<Notice> takeNotices();
    // Every check of a job (or of all jobs) with its state and outcome, newest first.
    Result<QList<QJsonObject>> verifications(const QString& jobId = {}, int limit = 1000);

    // Stake: a request signed with the node's registered key to bond credits from its balance or to
    // unbond them (they stay slashable for Options::unbondingDelayMs, then return to the balance).
    // {"kind": "tessera-stake", "node": id, "action": "bond"|"unbond", "amount": "12.5", "nonce": n}
    Result<QJsonObject> stake(const QJsonObject& signedRequest);

    // Who may read a blob (GET): its uploader, the owner of a job that names or made it, a node
    // handed work that needs it (docs/PROTOCOL.md, "Who may do what"). submit(), assign() and the
    // aggregation grant what they hand out; the network grants an upload to its uploader.
    Status allowRead(const Digest& blob, const QString& principal);
    Result<bool> mayRead(const QString& principal, const Digest& blob);
    // Whether the transfer with this cause moved money of this principal's: its balance, stake or
    // unbonding stake, or the escrow of one of its jobs (a receipt is for the parties it names).
    Result<bool> isPartyTo(const QString& principal, const QString& cause);

    ledger::Ledger& ledger() { return *m_ledger; }
    // The broker's signed receipt for the transfer with this cause (verifyDocument checks it).
    Result<QJsonObject> receipt(const QString& cause);
    QByteArray signingKey() const { return m_signing.publicKey; }
    // An owner's or node's money: balance and stake.
    Result<QJsonObject> account(const QString& id);

    // Every node the broker has seen, with its record: shards done and failed, verified, disputes lost,
    // timeouts, stake slashed, first and last seen.
    Result<QList<QJsonObject>> nodes();
    // How the scheduler ranks a node: its benchmark throughput times its record,
    // (done + 1) / (done + failed + 10 x disputes lost + dispute timeouts + 1), so that nodes that fail
    // or cheat lose work to nodes that deliver.
    double schedulingScore(const QString& nodeId);

    // Samples per second this broker expects of a node, from its benchmark.
    static double expectedSamplesPerSecond(const NodeInfo& node);

    struct Check; // a row of `verifications` (brokerverification.cpp)

private:
    Broker(std::unique_ptr<storage::Database> database, std::unique_ptr<BlobStore> blobs, TrainingMath& math, const Clock& clock,
        Options options);
    // What assign() needs of a running job's current round, kept in memory so that handing out a
    // shard costs one INSERT however many shards a round has.
    struct RoundState {
        QString jobId;
        JobSpec spec;
        std::int64_t round = 0;
        Digest weightsHash;
        Digest weightsBlob;
        std::vector<bool> done;
        struct Active {
            std::int64_t shard = 0;
            QString node;
            std::int64_t deadline = 0;
        };
        QHash<QString, Active> active; // by assignment id
        std::int64_t cursor = 0; // shards below it were handed out at least once
        std::deque<std::int64_t> reissue; // shards left with no active assignment
    };

    Status recover();
    Status loadRunning();
    RoundState* runningState(const QString& jobId);
    void release(RoundState& state, const QString& assignmentId);
    Result<JobSpec> specOf(const QString& jobId);
    Status finishRoundIfComplete(const QString& jobId, const JobSpec& spec, std::int64_t round);
    Status failJob(const QString& jobId, const QString& why);
    Status refund(const QString& jobId);

    // Verification (brokerverification.cpp).

    Result<bool> drawSample(const QString& nodeId, const JobSpec& spec);
    Result<std::optional<Assignment>> assignCheck(const NodeInfo& node);
    Result<Verdict> acceptCheck(
        const QString& nodeId, const QString& assignmentId, const QString& verificationId, const ShardResult& result);
    Result<ShardTask> taskOf(const Check& check);
    Status compare(Check& check);
    Status refereeInterval(Check& check, const QByteArray& state);
    enum class Loser { None, Accused, Verifier, Both };
    Status settle(Check& check, Loser loser, const QString& why, bool punish = true);
    // Commit, then reveal: the result matches the node's commitment and the shard it was given; a
    // node that committed and then revealed something impossible is slashed.
    Status checkReveal(const QString& nodeId, const QString& assignmentId, const ShardTask& task, const ShardResult& result);
    Status slash(const QString& nodeId, const QString& jobId, const QString& honest, const QString& cause, const QString& why);
    Status recordResultError(const QString& nodeId, const QString& assignmentId, const Error& error);
    Status selfVerify(Check& check);
    // Whether a node connected now could re-execute this check (another identity with its runtime
    // profile, threads enough and stake enough).
    bool anyVerifierOnline(const Check& check);
    Status settleJobChecks(const QString& jobId);
    void notify(Notice::Kind kind, const QString& nodeId, QJsonObject body);
    Status requeueChecks(const QString& column, const QString& value);
    Credits priceOf(const QString& jobId);

    std::unique_ptr<storage::Database> m_db;
    std::unique_ptr<BlobStore> m_blobs;
    std::unique_ptr<ledger::Ledger> m_ledger;
    SigningKeys m_signing;
    TrainingMath& m_math;
    const Clock& m_clock;
    Options m_options;
    QHash<QString, NodeInfo> m_nodes; // registered in this run
    std::vector<RoundState> m_running; // in submission order
    std::vector<Notice> m_notices;
    QRandomGenerator m_random;
    std::int64_t m_openedAtMs = 0; // nodes come back over the first seconds after a restart
};

} // namespace tessera::core::broker
