#pragma once

#include "../blobstore.h"
#include "../clock.h"
#include "../error.h"
#include "../jobspec.h"
#include "../ledger/ledger.h"
#include "../nodeinfo.h"
#include "../pricing.h"
#include "../shardresult.h"
#include "../signing.h"
#include "assignment.h"
#include "blobmirror.h"
#include "brokerstore.h"
#include "jobleases.h"
#include "logpublisher.h"
#include "networklease.h"
#include "notices.h"
#include "options.h"
#include "pipelines.h"
#include "records.h"
#include "scheduler.h"
#include "serving.h"
#include "stakes.h"
#include "trainingmath.h"
#include "verifier.h"

#include <QHash>
#include <QJsonObject>
#include <QList>
#include <QRandomGenerator>
#include <QSet>
#include <QString>

#include <functional>
#include <future>
#include <list>
#include <memory>
#include <optional>
#include <vector>

class QLockFile;

namespace tessera::core::broker {

// The broker's brain: jobs, rounds, shards, assignments, results and nodes, kept in SQLite so that a
// kill -9 loses nothing but the shards in flight (re-issued on restart). Single-threaded: the
// broker's network loop owns it. It knows nothing of sockets; net/ turns messages into calls.
//
// A façade over named parts (docs/ARCHITECTURE.md): BrokerStore (every SQL statement), Scheduler
// (which shard goes to which node, in memory), Verifier (sampling, checks, disputes, the referee)
// and Stakes (escrow, stake, slashing, receipts). This class keeps jobs and rounds: submit,
// accept a result, aggregate a round and move on.
class Broker {
public:
    using Options = BrokerOptions;

    // blobs: the broker's blob store (data/blobs), which its TrainingMath reads job files from too.
    static Result<std::unique_ptr<Broker>> open(
        const QString& dataDirectory, BlobStore& blobs, TrainingMath& math, const Clock& clock, Options options = {});
    // The broker's blob store in its data folder.
    static Result<std::unique_ptr<BlobStore>> openBlobs(const QString& dataDirectory);
    ~Broker();

    BlobStore& blobs() { return m_blobs; }

    // Job owners. The budget moves from the owner's balance into the job's escrow. Everything that
    // needs no code of the owner's is checked first (the spec, the files, the owner's running jobs,
    // and without a faucet that the owner's balance holds the budget; a TorchScript job's price, from
    // its archive): a penniless caller runs nothing.
    //
    // requestId (optional): the client's name for this submit. A submit that repeats an owner's
    // earlier requestId with the same spec gets the job the first one created (or, while that one's
    // weights are still being built, its answer): one job, one escrow, however often a client that
    // gave up waiting asks again. With another spec it is refused.
    Result<QString> submit(const JobSpec& spec, const QString& owner = QStringLiteral("local"), const QString& requestId = {});
    // The same, with the job's initial weights (the owner's code: a TorchScript model's loading)
    // built on a thread of their own by `jobCode` (setJobCodeMath) while the broker goes on serving
    // everyone else; `done` is called from pollSubmits() once they are built (or failed). Without
    // jobCode, or for a zoo model (Tessera's own code, built at once), it is submit() and `done` is
    // called before this returns. An error: refused before anything ran (nor is `done` called).
    Status submitInBackground(
        const JobSpec& spec, const QString& owner, const QString& requestId, std::function<void(Result<QString>)> done);
    // The math that builds TorchScript jobs' initial weights in the background: it must allow calls
    // from any thread beside the broker's own (compute::BrokerMath does: each runs in a worker).
    void setJobCodeMath(TrainingMath* jobCode) { m_jobCode = jobCode; }
    // Finishes the background submits whose weights are built; the network loop calls it often.
    void pollSubmits();
    // Submits whose owner code is still running.
    int submitsInBackground() const { return int(m_pendingSubmits.size()); }
    static constexpr int MaxSubmitsInBackground = 4; // at most 1 an owner
    Result<Quote> quoteFor(const JobSpec& spec);
    Result<JobStatus> status(const QString& jobId);
    // Listings: Recent leaves out what aged (jobs ended before the latest Options::listedEndedJobs,
    // nodes neither connected nor seen in Options::listedForMs); All has everything.
    enum class Listing { Recent, All };
    Result<QList<JobStatus>> list(Listing listing = Listing::Recent);
    Status cancel(const QString& jobId);

    // Nodes.
    // Whether this REGISTER may take the node id: under CURVE (authenticated) the key is the id; a
    // plaintext claim of an id that registered before must come with the same signing key.
    Status checkRegistration(const NodeInfo& node, bool authenticated);
    // address: where the node connects from (an IP address; empty where it cannot be told, e.g.
    // loopback): two nodes at one address never check each other's results.
    Status registerNode(const NodeInfo& node, const QString& address = {});
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
    Result<Acceptance> acceptResult(const QString& nodeId, const QString& assignmentId, const ShardResult& result);
    // Pipeline jobs (docs/PROTOCOL.md, "Stage tasks"): a shard's S stage tasks handed to S of these
    // waiting nodes at once (node and assignment, stage by stage), or none when no pipeline shard
    // and S of them fit. net/ calls it before assign() with the nodes that sent READY.
    Result<QList<std::pair<QString, Assignment>>> assignPipeline(const QList<QString>& waitingNodes);
    // A node's round trip to the broker, measured by its echo of a HEARTBEAT's probe
    // (docs/PROTOCOL.md, "Round trips"): smoothed, each new one weighing a quarter. A pipeline's
    // stages go to the nodes of the shortest (Scheduler::pickPipeline).
    void noteRoundTrip(const QString& nodeId, std::int64_t milliseconds);
    std::optional<std::int64_t> roundTripOf(const QString& nodeId) const;
    // A stage's TENSOR part (the bytes `payload`): where to forward it, or why not (not sent).
    Result<Pipelines::Forward> relayTensor(
        const QString& nodeId, const QString& assignment, const Pipelines::Part& part, const QByteArray& payload);
    // Whether any running job has a shard waiting for a node (to wake waiting nodes).
    bool hasWork() const { return m_scheduler.hasWork() || m_serving->wantsReplicas(); }

    // Served jobs (docs/PROTOCOL.md, "Serving"): a replica is handed out by assign(); net/ hands in
    // ASK, TOKENS, ANSWER and HOSTING and sends what takeServeNotices() says.
    Status ask(const QString& jobId, const QString& caller, bool operatorCaller, const inference::Question& question,
        const QString& requestId, std::int64_t asker);
    void tokens(const QString& nodeId, const QString& ticket, std::int64_t from, const QList<std::int64_t>& tokens)
    {
        m_serving->tokens(nodeId, ticket, from, tokens);
    }
    Status answered(const QString& nodeId, const QString& ticket, const QByteArray& line, const QJsonObject& signedAnswer,
        const QString& failure);
    Status hosting(const QString& nodeId, const QString& assignment, bool ready, const QString& failure)
    {
        return m_serving->hosting(nodeId, assignment, ready, failure);
    }
    std::vector<ServeNotice> takeServeNotices() { return m_serving->takeNotices(); }

    // Disputes. The node's training state at the checkpoint a dispute asked for has arrived as a
    // blob (a null digest: the node says it does not have it); the broker replays the one interval.
    Status checkpointDelivered(const QString& nodeId, const QString& checkId, const Digest& blob);
    // Deadlines of disputes and re-executions, samples nobody can check, unbonded stake that is
    // due: called about once a second by the network loop.
    void tick();
    // What to send to nodes since the last call.
    std::vector<Notice> takeNotices() { return m_notices.take(); }
    // Every check of a job (or of all jobs) with its state and outcome, newest first.
    Result<QList<QJsonObject>> verifications(const QString& jobId = {}, int limit = 1000);

    // Stake: a request signed with the node's registered key to bond credits from its balance or to
    // unbond them (they stay slashable for Options::unbondingDelayMs, then return to the balance).
    // {"kind": "tessera-stake", "node": id, "action": "bond"|"unbond", "amount": "12.5", "nonce": n,
    //  "broker": this broker's signing key (base64), "expires": ms since the epoch, within a day}
    // caller: who sent it (a node's own key may bond before its first REGISTER).
    Result<QJsonObject> stake(const QJsonObject& signedRequest, const QString& caller = {})
    {
        return m_stakes->stake(signedRequest, caller);
    }

    // Who may read a blob (GET): its uploader, the owner of a job that names or made it, a node
    // handed work that needs it (docs/PROTOCOL.md, "Who may do what"). submit(), assign() and the
    // aggregation grant what they hand out; the network grants an upload to its uploader.
    Status allowRead(const Digest& blob, const QString& principal);
    // Uploads (docs/BROKER.md, "Uploads"): whether this uploader may start one of a new blob of
    // this size (its unnamed uploads stay within Options::maxUnnamedUploadBytes), and the record of
    // one that stored new bytes. Unnamed uploads older than Options::unnamedUploadMs are removed
    // by tick().
    Status admitUpload(const QString& uploader, std::int64_t size);
    Status recordUpload(const Digest& blob, const QString& uploader, std::int64_t size);
    Result<bool> mayRead(const QString& principal, const Digest& blob) { return m_store->mayRead(principal, blob); }
    // The chunks a chunked dataset's manifest lists (none for other data), which a job's owner
    // must be able to read as they must its other files.
    Result<QList<Digest>> chunksNamedBy(const JobSpec& spec);
    // Whether the transfer with this cause moved money of this principal's: its balance, stake or
    // unbonding stake, or the escrow of one of its jobs (a receipt is for the parties it names).
    Result<bool> isPartyTo(const QString& principal, const QString& cause) { return m_stakes->isPartyTo(principal, cause); }

    ledger::Ledger& ledger() { return *m_ledger; }
    // The ledger's log (docs/LEDGER.md): entries [from, from + limit), in order.
    Result<QList<QJsonObject>> logEntries(std::int64_t from, int limit);
    // The broker's signed receipt for the transfer with this cause (verifyDocument checks it).
    Result<QJsonObject> receipt(const QString& cause) { return m_stakes->receipt(cause); }
    // A node presents its portable record of another network (docs/LEDGER.md, "Portable records"):
    // checked against Broker/TrustedNetworks, it starts the node's sampling streak (bounded by
    // Broker/RecordCreditMax, once per network). `credited` and the record's `summary`.
    Result<QJsonObject> creditRecord(const QString& nodeId, const QJsonObject& record);
    // The log's signed heads and proofs (docs/LEDGER.md, "Asking for the log").
    LogPublisher& log() { return *m_log; }
    QByteArray signingKey() const { return m_signing.publicKey; }
    // An owner's or node's money: balance and stake.
    Result<QJsonObject> account(const QString& id) { return m_stakes->account(id); }

    // Every node the broker has seen, with its record: shards done and failed, verified, disputes lost,
    // timeouts, stake slashed, first and last seen.
    Result<QList<QJsonObject>> nodes(Listing listing = Listing::Recent);
    // How the scheduler ranks a node: its benchmark throughput times its record,
    // (done + 1) / (done + failed + 10 x disputes lost + dispute timeouts + 1), so that nodes that fail
    // or cheat lose work to nodes that deliver.
    double schedulingScore(const QString& nodeId);

    // Several brokers on one PostgreSQL database (docs/STORE.md, "Several brokers"): whether this
    // one holds the job's lease (hands out its shards and checks, takes their results, aggregates
    // and pays; on SQLite: every job). Every broker answers reads and takes submits, uploads and
    // stake; a job whose broker is gone is taken over by another once its lease lapses (tick()).
    bool holds(const QString& jobId) const { return m_jobLeases->holds(jobId); }
    // Whether this broker does the network's chores now (due unbondings): one at a time.
    bool doesChores() const { return m_lease->held(); }
    // Renews the leases while the broker waits on long work (an aggregation, a replay): at most
    // every third of the lease, outside a transaction; nothing else of tick().
    void keepLease();
    // The network's id (table network): the same for every broker of a database; in WELCOME.
    const QString& networkId() const { return m_networkId; }
    // This broker's id in broker_leases (DIR/broker.id).
    const QString& brokerId() const { return m_lease->holder(); }

    // Samples per second this broker expects of a node, from its benchmark.
    static double expectedSamplesPerSecond(const NodeInfo& node) { return Scheduler::expectedSamplesPerSecond(node); }

private:
    // What submit() knows before any of the owner's code runs: the parameters counted from the
    // spec or the model's archive.
    Result<std::optional<std::int64_t>> prepareSubmit(const JobSpec& spec, const QString& owner);
    Result<QString> completeSubmit(const JobSpec& spec, const QString& owner, const QString& requestId,
        std::optional<std::int64_t> counted, const TrainingMath::Weights& initial);
    // The job an earlier submit with this requestId created (none: a new submit); an error when
    // that job's spec is not this one.
    Result<std::optional<QString>> submittedBefore(const JobSpec& spec, const QString& owner, const QString& requestId);
    struct PendingSubmit {
        JobSpec spec;
        QString owner;
        QString requestId;
        std::optional<std::int64_t> counted;
        std::future<Result<TrainingMath::Weights>> initial;
        std::vector<std::function<void(Result<QString>)>> done; // the first asker's and any repeat's
    };
    void collectUnnamedUploads();
    // Removes the weights of the round that fell out of what a job keeps (docs/BROKER.md, "Disk").
    void collectOldWeights(const QString& jobId, const JobSpec& spec, std::int64_t finished);
    std::int64_t m_nextUploadCollection = 0;
    TrainingMath* m_jobCode = nullptr;
    std::list<PendingSubmit> m_pendingSubmits;

    // A round whose every shard is in, aggregated and (unless training.evaluateEvery skips it)
    // evaluated, ready to be recorded.
    struct AggregatedRound {
        RoundRecord record;
        std::optional<Digest> outerStateBlob;
        std::optional<Digest> changeBlob; // the round's int8 change (WeightsChange)
    };

    Broker(std::unique_ptr<storage::Database> database, BlobStore& blobs, TrainingMath& math, const Clock& clock, Options options,
        SigningKeys signing, const QString& brokerId);
    Status recover();
    // Renews the leases (tick()): forgets the jobs another broker took, takes over those whose
    // broker is gone (MaxJobsTakenPerTick a tick), and those this broker held before a restart.
    Status updateLeases();
    static constexpr int MaxJobsTakenPerTick = 8;
    // A job taken over: its blobs fetched before (fetchMissingBlobs), its work in flight handed out
    // again as after a restart (recover()).
    Status adoptJob(const QString& jobId);
    Status fetchMissingBlobs();
    void forgetJob(const QString& jobId);
    // The refusal of what only the job's broker does, naming it; none where this one holds it.
    Status refuseUnlessHeld(const QString& jobId, const QString& what);
    // A running job into the scheduler, with the shards answered so far.
    Status loadJob(const JobRow& job);
    Status checkPrompts(const JobSpec& spec);
    Status checkSubmittable(const JobSpec& spec, const QString& owner);
    // A model's parameters before anything is built: a zoo model's from its spec (for tensor
    // files a lower bound), a TorchScript model's from its archive (ModelArchive).
    Result<std::optional<std::int64_t>> parametersOf(const JobSpec& spec);
    // The same, refused above Options::maxParameters.
    Result<std::optional<std::int64_t>> boundedParametersOf(const JobSpec& spec);
    // An aggregated round's shard uploads (results' and re-executions' weights) are needed by
    // nothing any more: deleted, unless a job names the same bytes (docs/BROKER.md, "Disk").
    void discardUploadsOf(const QString& jobId, std::int64_t round);
    // A running job's round as the scheduler holds it, with what its model's parameter count gives
    // (0: not counted): training FLOPs per sample, for deadlines, and a shard's memory on a node.
    Scheduler::Round scheduledRound(const JobRow& job, const JobSpec& spec, std::int64_t parameters);
    // A shard's memory on a node (core::estimateShardMemory), in MiB; 0 when the model is not counted.
    std::int64_t shardMemoryMiBOf(const JobSpec& spec, std::int64_t parameters);
    Result<Acceptance> acceptTraining(const AssignmentRow& assignment, const ShardResult& result);
    Result<Acceptance> acceptFailure(const AssignmentRow& assignment, const ShardResult& result);
    // Whether a connected node with the threads and stake, other than these, could run the job's shards.
    bool anotherNodeCouldRun(const QString& jobId, const QList<QString>& failedBy);
    Status confirmFailure(const AssignmentRow& assignment, const QList<QString>& failedBy, const QString& failure);
    Status judgeFailureReports(const AssignmentRow& assignment, const QList<QString>& failedBy,
        const QHash<QString, QString>& reasons, bool ownerCode, const QString& brokerProfile);
    static QString failureKey(const QString& jobId, std::int64_t round, std::int64_t shard);
    Status finishRound(const QString& jobId, const JobSpec& spec, std::int64_t round);
    // Rounds whose finishing failed (a database error): tried again on each tick.
    void finishPendingRounds();
    // What the verifier's last calls settled: blamed jobs failed, confirmed rounds finished (as the
    // rounds that could not be finished before are, finishPendingRounds).
    void applySettled();
    // Sends the round's implausible unchecked results to re-execution; true when it held any.
    Result<bool> recheckImplausible(const JobRow& job, std::int64_t round);
    Result<Acceptance> acceptCompleted(
        const AssignmentRow& assignment, const JobRow& job, const JobSpec& spec, const ShardResult& result);
    Status finishRoundIfComplete(const QString& jobId, const JobSpec& spec, std::int64_t round);
    Result<std::optional<QList<ShardResult>>> collectRound(const QString& jobId, const JobSpec& spec, std::int64_t round);
    Result<std::optional<AggregatedRound>> aggregateRound(
        const JobRow& job, const JobSpec& spec, std::int64_t round, const QList<ShardResult>& results);
    Result<QList<TrainingMath::Update>> updatesOf(
        const QString& jobId, const JobSpec& spec, std::int64_t round, const QList<ShardResult>& results, double& meanTrainLoss);
    // An inference job's one round: the shards' lines assembled into its result.
    Result<std::optional<AggregatedRound>> assembleInference(const JobRow& job, const JobSpec& spec, QList<ShardResult> results);
    Status advanceRound(const JobRow& job, const JobSpec& spec, const AggregatedRound& aggregated);
    Status failJob(const QString& jobId, const QString& why);
    // A stage of a pipeline failed, went or was given back: the shard's other stages still out are
    // stopped (given back, a Stop notice to their nodes) and the pipeline is forgotten; the S
    // stages go out together again.
    // named: the assignment's own stage too (it ran late, its node went, the job ended).
    void stopPipelineOf(const QString& assignmentId, const QString& why, bool named = false);
    // Every stage of the assignment's pipeline has answered: their held results accepted and paid.
    Status completePipeline(const AssignmentRow& assignment, const JobRow& job, const JobSpec& spec);
    Result<Acceptance> acceptStageFailure(const AssignmentRow& assignment, const ShardResult& result);
    // Pipelines past a stage's deadline: stopped (tick()).
    void stopLatePipelines();
    // A stage's result checked against what the broker relayed (its tensorsRoot) and its schedule
    // (it received everything). An error refuses the result (not counted; an answer before the
    // stage's inputs came is slashed); the pipeline is stopped and handed out again.
    Status checkStageResult(const AssignmentRow& assignment, const ShardResult& result);
    // What a drawn stage received, stored as a blob for its re-execution (null: it could not be).
    Digest keepStageInputs(const QString& assignment);
    // A stage's result the verifier refused: its pipeline stopped where the stage is over.
    void refusedStage(const AssignmentRow& assignment, const Error& why);
    // The shard an assignment's task is of (a pipeline job's assignments are of stage units).
    std::int64_t shardOf(const AssignmentRow& assignment);
    // A served job whose time is up: finished, what is left of its budget back to its owner.
    Status finishServed(const QString& jobId);
    // What served answers earned since the last tick, paid in one transaction.
    void payServed();
    // Ends a running job in `state` (cancelled, or a served job's time up): its served answers paid,
    // the rest of its escrow back to its owner. Inside the caller's transaction.
    Status endAndRefund(const QString& jobId, JobState state);
    // What is left of the job's escrow goes back to its owner; open checks are called off. Inside
    // the caller's transaction.
    Status refund(const QString& jobId);

    std::unique_ptr<QLockFile> m_folderLock; // DIR/broker.lock, held while the broker runs
    std::unique_ptr<BrokerStore> m_store;
    std::unique_ptr<NetworkLease> m_lease; // the network's chores
    std::unique_ptr<JobLeases> m_jobLeases;
    QString m_networkId;
    BlobStore& m_blobs;
    std::unique_ptr<BlobMirror> m_mirror; // on PostgreSQL: the blobs' copy in the database
    DataManifests m_manifests { m_blobs };
    std::unique_ptr<ledger::Ledger> m_ledger;
    SigningKeys m_signing;
    TrainingMath& m_math;
    const Clock& m_clock;
    Options m_options;
    QHash<QString, NodeInfo> m_nodes; // registered in this run
    QHash<QString, std::int64_t> m_roundTrips; // smoothed, by node (noteRoundTrip)
    QHash<QString, QString> m_addresses; // of the nodes registered in this run, where they can be told
    // Why each node reported a shard failed (by failureKey, then node), until the broker confirms it.
    QHash<QString, QHash<QString, QString>> m_failureReasons;
    QSet<QString> m_roundsToFinish; // jobs whose round could not be finished (finishPendingRounds)
    Scheduler m_scheduler;
    Notices m_notices;
    QRandomGenerator m_random;
    std::unique_ptr<Stakes> m_stakes;
    std::unique_ptr<Verifier> m_verifier;
    std::unique_ptr<Serving> m_serving;
    std::unique_ptr<LogPublisher> m_log;
    Pipelines m_pipelines;
};

} // namespace tessera::core::broker
