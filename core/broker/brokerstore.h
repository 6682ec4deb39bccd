#pragma once

#include "../credits.h"
#include "../error.h"
#include "../hash.h"
#include "../jobspec.h"
#include "../shardresult.h"
#include "../storage/database.h"
#include "assignment.h"
#include "records.h"
#include "states.h"

#include <QHash>
#include <QJsonObject>
#include <QList>
#include <QSet>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <memory>
#include <optional>

namespace tessera::core::broker {

// A job as its row keeps it.
struct JobRow {
    QString id;
    QJsonObject specJson; // the JobSpec (files replaced by their sha256)
    JobState state = JobState::Running;
    std::int64_t round = 0; // the round being trained (= rounds aggregated so far)
    Digest weightsHash; // of the round's starting weights
    Digest weightsBlob;
    std::optional<Digest> outerStateBlob; // Nesterov momentum (none for FedAvg)
    std::optional<WeightsChange> change; // weightsBlob from the previous round's (int8 compression)
    QString failure;
    QString owner;
    Credits pricePerShard;
    std::int64_t createdAt = 0;
    QString requestId; // written by insertJob (the client's name for its SUBMIT), not read back

    Result<JobSpec> spec() const { return JobSpec::fromJson(specJson); }
};

// A shard handed to a node, or a check's re-execution.
struct AssignmentRow {
    QString id;
    QString jobId;
    std::int64_t round = 0;
    std::int64_t shard = 0;
    QString node;
    std::int64_t issuedAt = 0;
    std::int64_t deadline = 0;
    AssignmentState state = AssignmentState::Active;
    AssignmentKind kind = AssignmentKind::Train;
    QString check; // the check it re-executes (not for Train)
};

// The result that answered a shard of a round.
struct ShardResultRow {
    std::int64_t round = 0;
    std::int64_t shard = 0;
    QString node;
    QJsonObject resultJson; // the ShardResult
    ResultState state = ResultState::Accepted;
    QString assignment;
    double updateNorm = -1.0; // the L2 norm of its change to the model (negative: not measured)
};

// What a node committed to before it revealed its result.
struct CommitmentRow {
    Digest finalHash;
    Digest chainRoot;
};

// A node's record.
struct NodeRow {
    QString id;
    QJsonObject info; // the NodeInfo it registered with
    std::int64_t firstSeen = 0;
    std::int64_t lastSeen = 0;
    std::int64_t shardsDone = 0;
    std::int64_t shardsFailed = 0;
    std::int64_t verified = 0;
    std::int64_t disputesLost = 0;
    std::int64_t timeouts = 0;
    Credits slashed;
    std::int64_t streak = 0; // results accepted since its last loss
};

// A dispute over a portable job narrowed to one instruction (docs/VERIFICATION.md, "Disputes over
// portable jobs"): both sides' traces of the differing interval, then one side's operands of the
// first instruction whose output differs. Kept with its check (checks.narrowing, JSON).
struct Narrowing {
    enum class Stage { None, Traces, Operands };
    Stage stage = Stage::None;
    Digest accusedTrace; // null: none (yet)
    Digest verifierTrace;
    std::int64_t step = 0; // the first differing step (1-based) and its instruction
    std::int64_t instruction = -1;
    QString instructionName;

    QJsonObject toJson() const;
    static Narrowing fromJson(const QJsonObject& json);
};

// A check: the re-execution of a sampled result, or of a known answer (a canary), and when the two
// disagree, the dispute the referee settles.
struct Check {
    QString id;
    CheckKind kind = CheckKind::Sample;
    QString jobId;
    std::int64_t round = 0;
    std::int64_t shard = 0;
    Digest startHash;
    Digest startBlob;
    QString accused; // whose result is checked; empty for a canary
    QString accusedAssignment;
    ShardResult accusedResult; // the known answer, for a canary
    QString verifier;
    QString verifierAssignment;
    std::optional<ShardResult> verifierResult;
    CheckState state = CheckState::Waiting;
    std::int64_t checkpoint = -1; // in a dispute: the first checkpoint where the chains differ
    std::int64_t deadline = 0; // in a dispute: for the checkpoint state
    QStringList asked; // in a dispute: the nodes asked for the state
    Narrowing narrowing; // in a dispute over a portable job
    Digest inputs; // a stage's check: what the stage received (ShardTask::stageInputs); null for any other
};

struct UnbondingRow {
    std::int64_t id = 0;
    QString node;
    Credits amount;
};

// Every statement the broker runs on its database (broker.sqlite), with typed rows, each table's
// columns named once (brokerstore.cpp). States go in and come out as enums; the schema's CHECK
// constraints refuse any other name. One connection, owned by the broker's thread.
// A lease of broker_leases: who holds it, where its clients reach it, and until when.
struct LeaseRow {
    QString holder;
    QString endpoint;
    std::int64_t expiresAt = 0;
    std::int64_t generation = 0; // one more each time another holder takes it
};

class BrokerStore {
public:
    explicit BrokerStore(std::unique_ptr<storage::Database> database);

    storage::Database& database() { return *m_db; }
    // A transaction. Where brokers share the database (holdLeasesAs), refused (field `standby`)
    // unless every lease this store took is still its own, of the generation it took: a broker
    // that another one took a job (or the network) from writes nothing until it knows.
    Result<storage::Transaction> begin();

    // Leases between brokers sharing the database (docs/STORE.md, "Several brokers"): this store
    // takes, renews and gives back leases for `holder` (32 hex digits: DIR/broker.id) and keeps
    // what it holds, which fences every transaction (begin) and scopes the verifier's queries of
    // checks to the jobs it holds (waitingChecks, lateDisputes, overdueCheckAssignments,
    // waitingSamples, anyWaitingChecks). Without it (SQLite: one broker to a file), neither.
    Status holdLeasesAs(const QString& holder);
    bool sharesLeases() const { return !m_holder.isEmpty(); }
    // take: for wanted.holder until wanted.expiresAt where the lease is free, lapsed before `now`,
    // or the holder's already, in one statement, under the writer lock (so that no transaction of
    // the broker it is taken from runs between its fence check and its commit); the lease's
    // generation then, none when another broker holds it.
    Result<std::optional<std::int64_t>> takeLease(const QString& scope, const LeaseRow& wanted, std::int64_t now);
    Result<std::optional<LeaseRow>> lease(const QString& scope);
    // The holder gives the lease up: it lapses now and names nobody (the holder's renewals leave it).
    Status releaseLease(const QString& scope, const QString& holder);
    // The holder's lease is gone (a job that ended): inside the caller's transaction, which may
    // still roll back (the next begin() reads whether it did), or now.
    enum class Now { No, Yes };
    Status dropLease(const QString& scope, const QString& holder, Now now = Now::No);
    // Renews every lease of the holder whose scope starts with `prefix` until expiresAt, in one
    // statement: the scopes it holds still, with their generations (what another broker took is
    // not among them). learn: this store's own holder learns that (its fence lets its
    // transactions through again); without, what another broker took still fences them.
    enum class Learn { Yes, No };
    Result<QHash<QString, std::int64_t>> renewLeases(
        const QString& prefix, const QString& holder, std::int64_t expiresAt, Learn learn = Learn::Yes);
    // The network's id (table network), made (`candidate`) by the first broker that asks, under
    // the writer lock: every broker of the database gets the same.
    Result<QString> networkId(const QString& candidate);
    // Running jobs whose lease lapsed before `now` or that have none (a network moved from
    // SQLite), in an order of this holder's own (brokers that look at once take different ones).
    Result<QStringList> unleasedJobs(std::int64_t now, int limit);
    // A job's lease is the scope JobScopePrefix + its id.
    static inline const QString JobScopePrefix = QStringLiteral("job:");

    // Jobs and their rounds.
    Status insertJob(const JobRow& job);
    Result<std::optional<JobRow>> job(const QString& id);
    Result<JobRow> existingJob(const QString& id); // an error names the missing job
    // The job an owner's SUBMIT named requestId created, if any.
    Result<std::optional<JobRow>> jobOfRequest(const QString& owner, const QString& requestId);
    Result<QList<JobRow>> jobs(); // in submission order
    Result<QList<JobRow>> runningJobs();
    Result<std::int64_t> runningJobsOf(const QString& owner);
    Status endJob(const QString& id, JobState state, const QString& failure = {});
    // The round was aggregated: the job trains `round` from these weights now (or is finished).
    Status advanceJob(const QString& id, std::int64_t round, const Digest& weightsHash, const Digest& weightsBlob, JobState state,
        const std::optional<Digest>& outerStateBlob, const std::optional<WeightsChange>& change = std::nullopt);
    Status insertRound(const QString& jobId, const RoundRecord& round);
    Result<QList<RoundRecord>> rounds(const QString& jobId);

    // The results that answered shards.
    Status insertShardResult(const QString& jobId, const ShardResultRow& row);
    Result<bool> isAnswered(const QString& jobId, std::int64_t round, std::int64_t shard);
    Result<QList<ShardResultRow>> shardResults(const QString& jobId, std::int64_t round); // by shard
    Result<std::int64_t> shardResultCount(const QString& jobId, std::int64_t round); // answered shards, without reading them
    Result<QList<ShardResultRow>> shardResultsIn(const QString& jobId, ResultState state);
    Status setResultState(const QString& jobId, std::int64_t round, std::int64_t shard, ResultState state);
    Status setResultStates(const QString& jobId, ResultState from, ResultState to);
    Status dropSampledResult(const QString& jobId, std::int64_t round, std::int64_t shard);
    // Whatever its state (a pipeline's stage whose partner was proven wrong).
    Status dropResult(const QString& jobId, std::int64_t round, std::int64_t shard);

    // Assignments.
    // readers: who may read which blobs once it is handed out (allowRead), in the same statement
    // on PostgreSQL (one round trip).
    Status insertAssignment(const AssignmentRow& assignment, const QList<Digest>& readers = {});
    Result<std::optional<AssignmentRow>> assignment(const QString& id);
    // onlyFrom: change it only if it is in that state now.
    Status setAssignmentState(const QString& id, AssignmentState to, std::optional<AssignmentState> onlyFrom = std::nullopt);
    // Every active assignment (of one job, where jobId is given) expires.
    Status expireActiveAssignments(const QString& jobId = {});
    Status expireActiveAssignmentsOf(const QString& node);
    Status expireActiveAssignmentsIn(const QString& jobId, std::int64_t round);
    Result<std::int64_t> failedAssignments(const QString& jobId, std::int64_t round, std::int64_t shard);
    // Re-executions still out past their deadline: (assignment, check).
    Result<QList<std::pair<QString, QString>>> overdueCheckAssignments(std::int64_t now);

    // Commit, then reveal.
    Status insertCommitment(const QString& assignment, const QString& node, const CommitmentRow& commitment,
        const QJsonObject& document, std::int64_t at); // the first one binds
    Result<std::optional<CommitmentRow>> commitment(const QString& assignment);

    // Nodes and their records.
    Status upsertNode(const QString& id, const QJsonObject& info, std::int64_t now);
    Result<std::optional<NodeRow>> node(const QString& id);
    Result<QList<NodeRow>> nodes(); // in the order they first came
    enum class Streak { Grows, Holds };
    Status countShardDone(const QString& node, std::int64_t now, Streak streak);
    Status countShardFailed(const QString& node);
    Status countVerified(const QString& node);
    // A portable record of another network starts the node's streak from `credit` (never lowers
    // it), once per node and network: the credit that network's record was given (now, or the
    // first time: a record presented again gets the same answer and moves nothing).
    Result<std::int64_t> creditRecord(const QString& node, const QString& network, std::int64_t credit, std::int64_t now);
    Status countTimeout(const QString& node);
    Status countSlash(const QString& node, Credits amount); // a lost dispute: the streak starts over
    Status touchNode(const QString& node, std::int64_t now);

    // Checks.
    Status insertCheck(const Check& check, std::int64_t createdAt);
    Result<std::optional<Check>> check(const QString& id);
    Status saveCheck(const Check& check);
    Status decideCheck(const Check& check, CheckState decided, Loser loser, const QString& why, std::int64_t now);
    // Re-executions whose node went, lied or ran out of time go back to the queue; a canary is
    // dropped (another will come).
    enum class Requeue { All, OfVerifier, OfVerifierAssignment, OfCheck, OfJob };
    Status requeueRunningChecks(Requeue which, const QString& value = {});
    // Checks waiting for a verifier other than `node`, oldest first.
    Result<QList<Check>> waitingChecks(const QString& node, int limit);
    // Whether any check waits for a re-execution: remembered "no" while this store writes no
    // check and forgetReads() is not called (the broker's tick: another broker may have written).
    Result<bool> anyWaitingChecks();
    void forgetReads() { m_noneWaiting = false; }
    // Who re-executed (or re-executes) the node's latest sampled results, newest first.
    Result<QStringList> latestVerifiersOf(const QString& accused, int limit);
    // Samples two nodes agreed on, neither of them `node`, newest first (canaries are made of them).
    Result<QList<Check>> verifiedSamples(const QString& node, int limit);
    // A job's checks in a state (all jobs' when jobId is empty), oldest first.
    Result<QList<Check>> checksIn(CheckState state, const QString& jobId = {});
    Result<QStringList> lateDisputes(std::int64_t now);
    // The nodes of a job's checks whose outcome blamed the job's code (Loser::Job), each once.
    Result<QStringList> nodesInChecksBlamingJob(const QString& jobId);
    // Samples waiting since createdBefore or longer: (check, created at).
    Result<QList<std::pair<QString, std::int64_t>>> waitingSamples(std::int64_t createdBefore);
    Status cancelOpenChecks(const QString& jobId, std::int64_t now);
    // A job's open checks (waiting, running, disputed), oldest first.
    Result<QList<Check>> openChecks(const QString& jobId);
    // Whether an open check (waiting, running, disputed) reads these stage inputs.
    Result<bool> inputsInUse(const Digest& inputs);
    Result<QList<CheckRecord>> checkRecords(const QString& jobId, int limit); // newest first; all jobs when empty

    // Who may read a blob.
    Status allowRead(const Digest& blob, const QString& principal);
    // The same for several blobs, in one statement (a shard handed out names 1 to 4).
    Status allowRead(const QList<Digest>& blobs, const QString& principal);
    Status allowOwnerToRead(const Digest& blob, const QString& jobId);
    Result<bool> mayRead(const QString& principal, const Digest& blob);
    // What the shards of a round uploaded: the weights of its accepted results and of its sampled
    // results' re-executions. Collected once the round is aggregated (docs/BROKER.md, "Disk").
    Result<QList<Digest>> uploadsOfRound(const QString& jobId, std::int64_t round);
    // Whether any job needs the blob: a kept round's weights, a job's current weights or outer state,
    // a file its spec names (model, data), a result of a round not yet aggregated, or an open check's
    // result or starting weights.
    Result<bool> blobNamed(const Digest& blob);
    // Marks a round's weights as no longer kept (docs/BROKER.md, "Disk") and returns their blob;
    // none when the round has no row or was collected before. The caller removes the blob unless
    // blobNamed() says another needs it.
    Result<std::optional<Digest>> forgetRoundWeights(const QString& jobId, std::int64_t round);
    // Uploads no job names yet (the uploads table): recorded when a PUT stores new bytes, summed
    // per uploader, listed for collection, forgotten once named or removed.
    struct UploadRow {
        Digest blob;
        QString uploader;
        std::int64_t size = 0;
        std::int64_t at = 0;
    };
    Status recordUpload(const UploadRow& upload);
    Result<std::int64_t> unnamedUploadBytes(const QString& uploader);
    Result<QList<UploadRow>> uploads();
    Status forgetUpload(const Digest& blob);
    Result<bool> owns(const QString& principal, const QString& jobId);

    // Stake being unbonded.
    Status insertUnbonding(const QString& node, Credits amount, std::int64_t releaseAt);
    Result<QList<UnbondingRow>> dueUnbondings(std::int64_t now);
    Status markReleased(std::int64_t id);

private:
    std::unique_ptr<storage::Database> m_db;
    bool m_noneWaiting = false; // no check waited when last asked, and none was written since
    // Where brokers share the database: this broker's id, and the leases it holds (scope:
    // generation), which begin() compares with the table.
    QString m_holder;
    QHash<QString, std::int64_t> m_held;
    QSet<QString> m_dropping; // leases deleted inside a transaction that may have rolled back
    // What m_held should be in the table: a digest of its (scope, generation) pairs in order.
    QByteArray heldDigest() const;
    // A transaction of this store's own where the caller has none (then none: it joins the caller's).
    enum class Fenced { No, Yes };
    Result<std::optional<storage::Transaction>> unlessInTransaction(Fenced fenced);
    // " AND <the job column's job is held by this broker>", or "" without shared leases.
    QString heldJobs(const char* jobColumn) const;
};

} // namespace tessera::core::broker
