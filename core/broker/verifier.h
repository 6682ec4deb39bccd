#pragma once

#include "../blobstore.h"
#include "../clock.h"
#include "../disputequestion.h"
#include "../error.h"
#include "../nodeinfo.h"
#include "../resultstates.h"
#include "../shardresult.h"
#include "../shardtask.h"
#include "assignment.h"
#include "brokerstore.h"
#include "datamanifests.h"
#include "notices.h"
#include "options.h"
#include "scheduler.h"
#include "stakes.h"
#include "trainingmath.h"

#include <QHash>
#include <QRandomGenerator>
#include <QSet>

#include <algorithm>
#include <functional>
#include <optional>

namespace tessera::core::broker {

// The broker's verification (docs/VERIFICATION.md): which results are sampled, checks handed to
// verifiers (and canaries), commit-then-reveal, comparing a re-execution with the result it
// checks, the referee's replay of one checkpoint interval in a dispute, settling a check (pay,
// slash, train the shard again), and the broker's own re-execution of samples nobody can check.
class Verifier {
public:
    struct Parts {
        BrokerStore& store;
        Stakes& stakes;
        Scheduler& scheduler;
        Notices& notices;
        BlobStore& blobs;
        DataManifests& manifests;
        TrainingMath& math;
        const Clock& clock;
        const BrokerOptions& options;
        const QHash<QString, NodeInfo>& online; // the nodes connected now
        const QHash<QString, QString>& addresses; // nodes' network addresses (also of nodes that went), where known
        QRandomGenerator& random;
    };
    explicit Verifier(Parts parts);

    // After a restart: re-executions in flight start over; disputes ask for their checkpoint
    // again, with a new deadline.
    // After a restart, or a job taken over from another broker (jobId): re-executions in flight
    // go back to the queue, disputes ask again.
    Status recover(const QString& jobId = {});
    // A node's completed training result, before it is counted: its reveal checked (checkReveal,
    // below) and whether it is sampled for re-execution. The one call a result makes.
    struct Admission {
        double updateNorm = -1.0; // negative: not measured
        std::optional<Check> sample; // the check to insert beside the result, when it is sampled
    };
    Result<Admission> admit(const AssignmentRow& assignment, const JobRow& job, const JobSpec& spec, const ShardResult& result);
    // The check of a sampled result, to insert beside it.
    static Check sampleOf(
        const AssignmentRow& assignment, const Digest& startHash, const Digest& startBlob, const ShardResult& result);
    // A check for this node to re-execute, if one waits (or, now and then, a canary).
    Result<std::optional<Assignment>> assignCheck(const NodeInfo& node);
    // A verifier's re-execution came back.
    Result<Acceptance> acceptCheck(const QString& nodeId, const AssignmentRow& assignment, const ShardResult& result);
    // A reveal in the wrong form (whole weights for an int8 task, or the other way) is refused with
    // an error naming WrongFormField, not slashed: the caller gives the shard to another node.
    static inline const QString WrongFormField = QStringLiteral("compression");
    // A node signed something that contradicts the shard it was given: slashed like a lost dispute.
    // An inference shard's revealed lines against its task and chain (docs/VERIFICATION.md, "Inference").
    Result<double> checkInferenceReveal(const ShardTask& task, const ShardResult& result, const std::function<Error(Error)>& lie);
    // Where two inference results of different runtime profiles part beyond the tolerance (empty: they agree).
    Result<QString> inferenceDisagreement(const ShardTask& task, const Digest& first, const QByteArray& second);
    // What the referee of an inference dispute computed, for the verdict.
    QString inferenceAt(const Check& check, const ShardTask& task);
    Status punishSignedLie(const QString& nodeId, const QString& assignmentId, const Error& lie);
    // A disputed checkpoint state came (a null digest: the node says it does not have it).
    Status checkpointDelivered(const QString& nodeId, const QString& checkId, const Digest& blob);
    // Late disputes and re-executions, samples nobody can check.
    void tick();
    // A stage's recorded inputs (Check::inputs) that no open check reads any more: removed. Two
    // pipelines whose stage received the same bytes share one blob.
    void forgetInputs(const Digest& inputs);
    // The job ended: open checks are called off, a sampled result nobody proved wrong is paid.
    // Inside the caller's transaction.
    Status closeChecksOf(const QString& jobId);
    // The node went: what it was re-executing goes back to the queue.
    void nodeLost(const QString& nodeId);

    // What settled checks leave to the broker, which takes it after each call that may settle one
    // (and on every tick): jobs whose running round had a sampled result confirmed, so that it may
    // be complete now, and jobs whose own code was blamed, which fail with the reason.
    struct Settled {
        struct Failure {
            QString jobId;
            QString why;
        };
        QSet<QString> roundsToFinish;
        QList<Failure> failedJobs;
    };
    Settled takeSettled() { return std::exchange(m_settled, {}); }
    // A blamed job whose failure waits in takeSettled: none of its checks is settled or
    // re-executed meanwhile (its failure calls them off, and pays the sampled results).
    bool failing(const QString& jobId) const
    {
        return std::any_of(m_settled.failedJobs.begin(), m_settled.failedJobs.end(),
            [&](const Settled::Failure& failure) { return failure.jobId == jobId; });
    }

private:
    enum class Penalty { Slash, None }; // None: the loser is only not paid (results of different arithmetic)

    // Whether this result of the node's is sampled for re-execution.
    Result<bool> drawSample(const QString& nodeId, const JobSpec& spec);
    // Commit, then reveal: the result matches the node's commitment and the shard it was given; a
    // node that committed and then revealed something impossible is slashed.
    // Also: the revealed result must be a finite update of the round's weights (roundBlob). The
    // update's norm comes back (negative: not measured).
    Result<double> checkReveal(const QString& nodeId, const QString& assignmentId, const ShardTask& task,
        const ShardResult& result, const Digest& roundBlob);
    // The job's spec: the scheduler's, read once when the job came, while it runs.
    Result<JobSpec> specOf(const QString& jobId);

    Result<ShardTask> taskOf(const Check& check);
    Result<std::optional<Assignment>> handOut(Check& check, AssignmentKind kind, const NodeInfo& node);
    Result<std::optional<Assignment>> canaryFor(const NodeInfo& node);
    Result<Acceptance> checkNotDone(Check& check, const AssignmentRow& assignment, const ShardResult& result);
    Status compare(Check& check);
    Status dispute(Check& check, qsizetype checkpoint);
    Status refereeInterval(Check& check, const QByteArray& state);
    // A job owner's code: a dispute that no side answered with a usable state is refereed by
    // re-executing from the round's weights (docs/VERIFICATION.md, "What a job's code cannot do").
    Status refereeFromStart(Check& check);
    // The referee's replay against both sides; one that agrees with neither slashes both only for
    // Tessera's own models on the sides' runtime profile, else nobody (blameJob for owner code).
    enum class Agreement { AsHashed, Neither };
    Status ruleOnReplay(Check& check, const ShardTask& task, const TrainingMath::Replay& replay, const QString& at,
        const std::function<Result<TrainingMath::Replay>()>& again, Agreement agreement = Agreement::AsHashed);
    static bool runsOwnerCode(const ShardTask& task);

public:
    // The cause of a result's payment (docs/PROTOCOL.md, "RECEIPT"): pay:JOB/ROUND/SHARD, and for a
    // pipeline's stage pay:JOB/ROUND/UNIT/ASSIGNMENT (a unit is paid again when its shard is
    // trained again after a partner's lie).
    static QString payCause(const QString& jobId, std::int64_t round, std::int64_t unit, const QString& stageAssignment = {})
    {
        const QString cause = QStringLiteral("pay:%1/%2/%3").arg(jobId).arg(round).arg(unit);
        return stageAssignment.isEmpty() ? cause : cause + u'/' + stageAssignment;
    }

private:
    // Whether a replay of the whole shard gives the result's bits (a stage's: its tensors too).
    static bool sameAsReplay(const Check& check, const ShardResult& result, const TrainingMath::Replay& replay);
    // A stage's check whose sides differ: the referee replays the stage from its inputs.
    Status refereeStage(Check& check);
    // A stage's result proven wrong: its partners' results go too (they computed on what it sent),
    // paid (their own checks go on), and the shard's S stages are trained again.
    Status dropPartners(const Check& check);
    // Proven: the referee's own two runs differ (or one fails); Unproven: they agree, but a job's
    // code may differ between processes or machines.
    enum class Proof { Proven, Unproven };
    Status blameJob(Check& check, const QString& why, Proof proof);
    // A portable job's dispute: both sides' traces, then the operands of the first differing
    // instruction, which the referee runs alone (docs/VERIFICATION.md, "Disputes over portable jobs").
    Status narrow(Check& check);
    Status traceDelivered(Check& check, const QString& nodeId, Digest blob);
    Status judgeTraces(Check& check);
    // The referee's ruling from one side's operands, or why they cannot be used.
    Result<verification::Ruling> refereeInstruction(const Check& check, const QByteArray& operands);
    Status rule(Check& check, verification::Ruling ruling, const QString& at);
    // Sends the dispute's current question to every node it still waits for.
    void ask(const Check& check);
    Status settle(Check& check, Loser loser, const QString& why, Penalty penalty = Penalty::Slash);
    // detached: a stage's result dropped since (detachedStage): nothing of the round changes.
    Status payAccused(const Check& check, const QString& why, bool detached);
    Status rejectAccused(const Check& check, Loser loser, const QString& why, Penalty penalty, bool detached);
    // A stage's check whose result is no longer the round's (its partner lied; it was paid then).
    Result<bool> detachedStage(const Check& check);
    // A rejected result's shard goes out again (a stage's: its S stages together).
    void reopenShardOf(const Check& check);
    Status settleVerifier(const Check& check, Loser loser, const QString& why, Penalty penalty);
    Status selfVerify(Check& check);
    bool anyVerifierOnline(const Check& check);
    // Who checks whom (docs/VERIFICATION.md, "Who checks whom"): the connected nodes that may
    // re-execute this sample (its runtime profile, room for its job, stake), never its own node
    // nor one at the same address, and a frequent partner only when nobody else may.
    Result<QStringList> eligibleVerifiers(const Check& check);
    // The same without the partner rule (which never leaves none), from memory alone.
    QStringList candidatesFor(const Check& check) const;
    // What a node needs to re-execute the check, whoever it is: the result's profile, room for its
    // job, stake, and not having given this check back.
    bool mayCheck(const Check& check, const NodeInfo& node, const Scheduler::Round* round) const;
    // Whether this node is the one drawn at random to re-execute the check (drawn anew when the
    // drawn node went).
    Result<bool> drawnToCheck(const Check& check, const NodeInfo& node);
    // A check both sides agreed on: the broker re-executes the shard itself, now and then, where
    // its answer is exact and cheap (docs/VERIFICATION.md, "The broker's audits").
    bool shouldAudit(const Check& check, const ShardTask& task);
    Status audit(Check& check, const ShardTask& task);
    void expireLateDisputes(std::int64_t now);
    void requeueOverdue(std::int64_t now);
    void selfVerifyStuck(std::int64_t now);
    // A VERDICT for a node (docs/PROTOCOL.md), sent when it is connected.
    void tell(const QString& node, const QString& assignment, CheckVerdict verdict, const QString& why,
        std::optional<Credits> paid = std::nullopt);

    // How long a dispute waits for a checkpoint state.
    std::int64_t disputeWindowMs(const Check& check);
    Parts m_;
    Settled m_settled;
    std::int64_t m_startedAtMs = 0; // nodes come back over the first seconds after a restart
    struct Draw {
        QString node;
        std::int64_t at = 0;
    };
    QHash<QString, Draw> m_draws; // check id: the node drawn to re-execute it
    struct Declined {
        QSet<QString> nodes;
        std::int64_t at = 0;
    };
    double m_auditBudgetGflop = 2 * BrokerOptions::auditMaxShardGflop; // what audits may still spend
    std::int64_t m_auditBudgetAt = 0;
    QHash<QString, Declined> m_declined; // check id: nodes that gave it back or failed it, not drawn again

public:
    // A draw for a check that ended without being handed out (its job ended) is forgotten after this.
    static constexpr std::int64_t ForgetDrawMs = 3'600'000;
    // A node that re-executed at least PartnerChecks of another's latest PartnerWindow checked
    // results is its frequent partner: not drawn for it while anyone else may be.
    static constexpr int PartnerWindow = 6;
    static constexpr int PartnerChecks = 3;
};

} // namespace tessera::core::broker
