// The broker's verification: sampled re-execution, canaries, refereed disputes, slashing.
// docs/VERIFICATION.md describes the rules; this file carries them out.

#include "verifier.h"

#include "../decomposition.h"
#include "../inference/outputs.h"
#include "../verification/verification.h"

#include <QLoggingCategory>

#include <algorithm>

Q_LOGGING_CATEGORY(lcVerification, "tessera.verification")

namespace tessera::core::broker {

namespace {

QString newCheckId()
{
    return QStringLiteral("v%1").arg(QRandomGenerator::system()->generate64(), 16, 16, QLatin1Char('0'));
}

// CHECKPOINT's body (docs/PROTOCOL.md): a training state at a checkpoint, or for a portable job's
// dispute the trace of an interval or the operands of one instruction.
QJsonObject checkpointRequest(const QString& checkId, const QString& assignment, const DisputeQuestion& question)
{
    QJsonObject body { { QStringLiteral("verification"), checkId }, { QStringLiteral("assignment"), assignment } };
    if (question.want != DisputeQuestion::Want::Operands)
        body.insert(QStringLiteral("checkpoint"), static_cast<qint64>(question.checkpoint));
    if (question.want != DisputeQuestion::Want::State)
        body.insert(QStringLiteral("want"), nameOf(question.want));
    if (question.want == DisputeQuestion::Want::Operands) {
        body.insert(QStringLiteral("step"), static_cast<qint64>(question.step));
        body.insert(QStringLiteral("instruction"), static_cast<qint64>(question.instruction));
    }
    return body;
}

// What a dispute asks its sides now.
DisputeQuestion questionOf(const Check& check)
{
    switch (check.narrowing.stage) {
    case Narrowing::Stage::Traces:
        return { DisputeQuestion::Want::Trace, check.checkpoint };
    case Narrowing::Stage::Operands:
        return { DisputeQuestion::Want::Operands, 0, check.narrowing.step, check.narrowing.instruction };
    case Narrowing::Stage::None:
        break;
    }
    return { DisputeQuestion::Want::State, check.checkpoint - 1 };
}

// The nodes of a check, each with the assignment that put it there.
QList<std::pair<QString, QString>> sides(const Check& check)
{
    return { { check.accused, check.accusedAssignment }, { check.verifier, check.verifierAssignment } };
}

} // namespace

Verifier::Verifier(Parts parts)
    : m_(parts)
    , m_startedAtMs(parts.clock.nowMs())
{ }

void Verifier::tell(
    const QString& node, const QString& assignment, CheckVerdict verdict, const QString& why, std::optional<Credits> paid)
{
    QJsonObject body { { QStringLiteral("assignment"), assignment }, { QStringLiteral("state"), nameOf(verdict) },
        { QStringLiteral("detail"), why } };
    if (paid)
        body.insert(QStringLiteral("paid"), paid->toString());
    m_.notices.add(Notice::Kind::Verdict, node, body);
}

Status Verifier::recover(const QString& jobId)
{
    if (auto status = jobId.isEmpty() ? m_.store.requeueRunningChecks(BrokerStore::Requeue::All)
                                      : m_.store.requeueRunningChecks(BrokerStore::Requeue::OfJob, jobId);
        !status)
        return status;
    auto disputed = m_.store.checksIn(CheckState::Disputed, jobId);
    if (!disputed)
        return disputed.error();
    for (const auto& check : *disputed)
        ask(check);
    for (auto check : *disputed) {
        check.deadline = m_.clock.nowMs() + disputeWindowMs(check);
        if (auto status = m_.store.saveCheck(check); !status)
            return status;
    }
    return {};
}

void Verifier::ask(const Check& check)
{
    for (const auto& node : check.asked) {
        const QString assignment = node == check.accused ? check.accusedAssignment : check.verifierAssignment;
        m_.notices.add(Notice::Kind::CheckpointRequest, node, checkpointRequest(check.id, assignment, questionOf(check)));
    }
}

std::int64_t Verifier::disputeWindowMs(const Check& check)
{
    // A node may have to re-create the state (training up to a whole shard when it kept none) and
    // upload it: at least twice the job's usual shard time, and what the scheduler expects of a
    // node that never benchmarked for the whole shard.
    std::int64_t window = std::max<std::int64_t>(m_.options.disputeTimeoutMs, 2 * m_.scheduler.usualMs(check.jobId));
    if (const auto* round = m_.scheduler.find(check.jobId)) {
        if (auto task = taskOf(check))
            window = std::max(window,
                std::int64_t(std::min(Scheduler::expectedMs(*task, round->flopsPerSample, NodeInfo {}, 0.0, m_.options),
                    double(m_.options.maxDeadlineMs))));
    }
    return window;
}

void Verifier::nodeLost(const QString& nodeId)
{
    if (auto status = m_.store.requeueRunningChecks(BrokerStore::Requeue::OfVerifier, nodeId); !status)
        qCWarning(lcVerification).noquote() << status.error().toString();
}

Result<bool> Verifier::drawSample(const QString& nodeId, const JobSpec& spec)
{
    auto node = m_.store.node(nodeId);
    if (!node)
        return node.error();
    verification::NodeRecord record;
    record.streak = *node ? (*node)->streak : 0;
    const double p = std::max(verification::samplingProbability(record, m_.options.sampling), spec.verificationRate);
    return m_.random.generateDouble() < p;
}

Result<Verifier::Admission> Verifier::admit(
    const AssignmentRow& assignment, const JobRow& job, const JobSpec& spec, const ShardResult& result)
{
    const auto task = m_.manifests.shardTask(job.id, spec, assignment.round, assignment.shard, job.weightsHash);
    if (!task)
        return task.error();
    auto norm = checkReveal(assignment.node, assignment.id, *task, result, job.weightsBlob);
    if (!norm)
        return norm.error();
    // A stage's sample is re-executed from what it received (the broker adds its inputs).
    auto sampled = drawSample(assignment.node, spec);
    if (!sampled)
        return sampled.error();
    Admission admission { *norm, std::nullopt };
    if (*sampled)
        admission.sample = sampleOf(assignment, job.weightsHash, job.weightsBlob, result);
    return admission;
}

Check Verifier::sampleOf(
    const AssignmentRow& assignment, const Digest& startHash, const Digest& startBlob, const ShardResult& result)
{
    Check check;
    check.id = newCheckId();
    check.kind = CheckKind::Sample;
    check.jobId = assignment.jobId;
    check.round = assignment.round;
    check.shard = assignment.shard;
    check.startHash = startHash;
    check.startBlob = startBlob;
    check.accused = assignment.node;
    check.accusedAssignment = assignment.id;
    check.accusedResult = result;
    check.state = CheckState::Waiting;
    return check;
}

Result<JobSpec> Verifier::specOf(const QString& jobId)
{
    if (const auto* round = m_.scheduler.find(jobId))
        return round->spec;
    auto job = m_.store.existingJob(jobId); // a job that ended: its checks are closing
    if (!job)
        return job.error();
    return job->spec();
}

Result<ShardTask> Verifier::taskOf(const Check& check)
{
    auto spec = specOf(check.jobId);
    if (!spec)
        return spec.error();
    auto task = m_.manifests.shardTask(check.jobId, *spec, check.round, check.shard, check.startHash);
    if (task && task->isStage())
        task->stageInputs = check.inputs;
    return task;
}

// --- handing checks out --------------------------------------------------------------------------

Result<std::optional<Assignment>> Verifier::handOut(Check& check, AssignmentKind kind, const NodeInfo& node)
{
    auto task = taskOf(check);
    if (!task)
        return task.error();
    const auto now = m_.clock.nowMs();
    const auto* round = m_.scheduler.find(check.jobId);
    Assignment assignment { newCheckId().mid(1), *task, check.startBlob,
        m_.scheduler.deadline(*task, round ? round->flopsPerSample : 0.0, node, m_.options, now), std::nullopt };
    check.verifier = node.nodeId;
    check.verifierAssignment = assignment.id;
    check.state = CheckState::Running;
    auto transaction = m_.store.begin();
    if (!transaction)
        return transaction.error();
    const AssignmentRow row { assignment.id, check.jobId, check.round, check.shard, node.nodeId, now, assignment.deadlineMs,
        AssignmentState::Active, kind, check.id };
    if (auto status = m_.store.insertAssignment(row); !status)
        return status.error();
    if (auto status = m_.store.saveCheck(check); !status)
        return status.error();
    auto needed = (round ? blobsNamedBy(round->spec) : QList<Digest> {}) + QList<Digest> { check.startBlob } + task->dataChunks;
    if (!check.inputs.isNull())
        needed.append(check.inputs);
    if (auto granted = m_.store.allowRead(needed, node.nodeId); !granted)
        return granted.error();
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    return std::optional<Assignment>(assignment);
}

Result<std::optional<Assignment>> Verifier::assignCheck(const NodeInfo& node)
{
    // A check fits a node with the checked result's runtime profile, threads enough, whose job runs.
    auto fits = [&](const Check& check) {
        const auto* round = m_.scheduler.find(check.jobId);
        return round && round->runsOn(node) && reproduces(node.runtimeProfile, check.accusedResult.runtimeProfile);
    };
    // Samples waiting for a re-execution, oldest first, by anyone but the node checked (asked
    // only while any waits: a round trip saved per shard handed out on PostgreSQL).
    auto any = m_.store.anyWaitingChecks();
    if (!any)
        return any.error();
    auto waiting = *any ? m_.store.waitingChecks(node.nodeId, 50) : Result<QList<Check>>(QList<Check> {});
    if (!waiting)
        return waiting.error();
    for (auto& check : *waiting) {
        if (!fits(check))
            continue;
        // A sample goes to the node drawn for it, not to whoever asks first: a node cannot arrange
        // to check its partner's result by asking right after it came in.
        if (!check.accused.isEmpty()) {
            auto drawn = drawnToCheck(check, node);
            if (!drawn)
                return drawn.error();
            if (!*drawn)
                continue;
        }
        m_draws.remove(check.id);
        return handOut(check, AssignmentKind::Verify, node);
    }
    // Now and then a canary: a shard whose answer two nodes agreed on, handed out again as if new.
    if (m_.options.canaryRate <= 0.0 || m_.random.generateDouble() >= m_.options.canaryRate)
        return std::optional<Assignment> {};
    return canaryFor(node);
}

Result<std::optional<Assignment>> Verifier::canaryFor(const NodeInfo& node)
{
    auto known = m_.store.verifiedSamples(node.nodeId, 20);
    if (!known)
        return known.error();
    for (const auto& reference : *known) {
        const auto* round = m_.scheduler.find(reference.jobId);
        if (reference.verifier.isEmpty() || !round || !round->runsOn(node)
            || !reproduces(node.runtimeProfile, reference.accusedResult.runtimeProfile))
            continue;
        if (!m_.blobs.contains(reference.startBlob) || !reference.inputs.isNull())
            continue; // its round's weights were collected (docs/BROKER.md, "Disk"); a stage's inputs go once it is checked
        Check canary = reference;
        canary.id = newCheckId();
        canary.kind = CheckKind::Canary;
        canary.accused.clear();
        canary.accusedAssignment.clear();
        canary.verifier.clear();
        canary.verifierAssignment.clear();
        canary.verifierResult.reset();
        canary.asked.clear();
        canary.checkpoint = -1;
        canary.state = CheckState::Waiting;
        if (auto status = m_.store.insertCheck(canary, m_.clock.nowMs()); !status)
            return status.error();
        return handOut(canary, AssignmentKind::Canary, node);
    }
    return std::optional<Assignment> {};
}

// --- results of checks ---------------------------------------------------------------------------

Result<Acceptance> Verifier::acceptCheck(const QString& nodeId, const AssignmentRow& assignment, const ShardResult& result)
{
    auto loaded = m_.store.check(assignment.check);
    if (!loaded)
        return loaded.error();
    if (!*loaded || (*loaded)->state != CheckState::Running || (*loaded)->verifierAssignment != assignment.id) {
        if (auto status = m_.store.setAssignmentState(assignment.id, AssignmentState::Answered); !status)
            return status.error();
        return Acceptance::Stale;
    }
    Check check = **loaded;
    if (result.outcome != ShardResult::Outcome::Completed)
        return checkNotDone(check, assignment, result);
    auto task = taskOf(check);
    if (!task)
        return task.error();
    if (auto revealed = checkReveal(nodeId, assignment.id, *task, result, check.startBlob); !revealed) {
        // A re-execution in a form the task does not ask for (lines that are not the task's): the
        // verifier has given the check back, and another is drawn; it is not slashed.
        if (revealed.error().field == WrongFormField || revealed.error().field == inference::FormField) {
            auto given = result;
            given.outcome = ShardResult::Outcome::Returned;
            if (auto back = checkNotDone(check, assignment, given); !back)
                return back.error();
        }
        return revealed.error();
    }
    check.verifierResult = result;
    auto transaction = m_.store.begin();
    if (!transaction)
        return transaction.error();
    for (const auto& status : {
             m_.store.setAssignmentState(assignment.id, AssignmentState::Answered),
             m_.store.touchNode(nodeId, m_.clock.nowMs()),
             m_.store.saveCheck(check),
         }) {
        if (!status)
            return status.error();
    }
    if (auto status = transaction->commit(); !status)
        return status.error().toError();
    if (auto status = compare(check); !status)
        return status.error();
    return Acceptance::Held;
}

Result<Acceptance> Verifier::checkNotDone(Check& check, const AssignmentRow& assignment, const ShardResult& result)
{
    // Failed or given back: the check waits for another verifier (a canary is dropped). A failure
    // of the job's code in the verifier's sandbox is not held against the verifier.
    const bool returned = result.outcome == ShardResult::Outcome::Returned;
    auto transaction = m_.store.begin();
    if (!transaction)
        return transaction.error();
    if (auto status = m_.store.setAssignmentState(assignment.id, returned ? AssignmentState::Returned : AssignmentState::Failed);
        !status)
        return status.error();
    if (!returned && !result.failedInSandbox()) {
        if (auto status = m_.store.countShardFailed(assignment.node); !status)
            return status.error();
    }
    auto& declined = m_declined[check.id];
    declined.nodes.insert(assignment.node);
    declined.at = m_.clock.nowMs();
    check.verifier.clear();
    check.verifierAssignment.clear();
    check.state = check.kind == CheckKind::Canary ? CheckState::Cancelled : CheckState::Waiting;
    if (auto status = m_.store.saveCheck(check); !status)
        return status.error();
    if (auto status = transaction->commit(); !status)
        return status.error().toError();
    return Acceptance::Failed;
}

Result<double> Verifier::checkReveal(
    const QString& nodeId, const QString& assignmentId, const ShardTask& task, const ShardResult& result, const Digest& roundBlob)
{
    // The result's runtime profile decides who may check it (and whether the broker's audit can):
    // a portable task's is the portable profile, a fast one's the node's own (its registered
    // family), so that a node cannot name a profile only its partner has.
    const auto node = m_.online.constFind(nodeId);
    if (task.portable ? result.runtimeProfile != PortableProfile
                      : result.runtimeProfile == PortableProfile
                || (node != m_.online.constEnd()
                    && runtimeProfileFamily(node->runtimeProfile) != runtimeProfileFamily(result.runtimeProfile)))
        return Error { QStringLiteral("runtimeProfile"),
            task.portable ? QStringLiteral("a portable task's result has the runtime profile %1").arg(PortableProfile)
                          : QStringLiteral("the result's runtime profile is not the one the node registered with") };
    auto committed = m_.store.commitment(assignmentId);
    if (!committed)
        return committed.error();
    if (!*committed)
        return Error { QStringLiteral("commitment"), QStringLiteral("send the signed commitment (COMMIT) before the result") };
    // From here on the node has signed its answer: what contradicts the shard it was given is a lie.
    auto lie = [&](Error error) -> Error {
        if (auto status = punishSignedLie(nodeId, assignmentId, error); !status)
            qCWarning(lcVerification).noquote() << status.error().toString();
        return error;
    };
    const auto commitment = result.commitment();
    if ((*committed)->finalHash != commitment.finalHash || (*committed)->chainRoot != commitment.chainRoot)
        return lie(Error { QStringLiteral("commitment"), QStringLiteral("the result does not match the node's commitment") });
    if (result.checkpointHashes.size() != task.checkpointCount())
        return lie(Error { QStringLiteral("checkpointHashes"),
            QStringLiteral("a shard of %1 steps with checkpoints every %2 has %3 hashes, not %4")
                .arg(task.localSteps)
                .arg(task.checkpointInterval)
                .arg(task.checkpointCount())
                .arg(result.checkpointHashes.size()) });
    if (result.checkpointHashes.first() != task.startWeights)
        return lie(
            Error { QStringLiteral("checkpointHashes"), QStringLiteral("the chain does not start at the round's weights") });
    if (task.inference)
        return checkInferenceReveal(task, result, lie);
    // By file: the arithmetic reads the weights (hundreds of MB for a large model) off this thread.
    const auto weights = m_.blobs.path(result.weightsSha256);
    if (!weights)
        return Error { QStringLiteral("weightsSha256"), QStringLiteral("upload the weights (PUT) before the result") };
    // The node committed to the weights' canonical hash, not to a file: weights the broker cannot
    // read (another container, a format it does not know) prove nothing. Refused, not slashed; the
    // node may upload them as a dict of tensors and send the result again.
    const auto round = m_.blobs.storedFile(roundBlob);
    if (!round)
        return Error { QStringLiteral("assignment"), QStringLiteral("the round's weights are gone from the broker") };
    auto inspected = m_.math.inspectResult(*weights, *round,
        task.isStage() ? std::optional<TrainingMath::StagePart>({ task.stage, task.stages, task.model.layers }) : std::nullopt);
    if (!inspected)
        return Error { QStringLiteral("weightsSha256"),
            QStringLiteral("the broker cannot read the uploaded weights (%1); upload a dict of tensors and send the "
                           "result again")
                .arg(inspected.error().message) };
    if (inspected->canonicalHash != result.finalHash)
        return lie(
            Error { QStringLiteral("finalHash"), QStringLiteral("the uploaded weights do not hash to the result's finalHash") });
    // Whole weights where the task asked for an int8 update (or the other way round): a node that
    // does not know the form, not a liar (docs/PROTOCOL.md, "Capabilities"). Refused, and the
    // shard goes to another node.
    if (inspected->form && *inspected->form != task.compression)
        return Error { WrongFormField,
            QStringLiteral("the task asks for %1 and these are %2: the shard goes to another node")
                .arg(task.compression == Compression::Int8 ? QStringLiteral("an int8 update (compression int8)")
                                                           : QStringLiteral("whole weights (compression none)"),
                    *inspected->form == Compression::Int8 ? QStringLiteral("an int8 update") : QStringLiteral("whole weights")) };
    // What the node signed and revealed must be a finite update of the model: an honest node fails
    // a shard whose weights are not (docs/VERIFICATION.md, "Unchecked results").
    if (!inspected->unfit.isEmpty())
        return lie(Error { QStringLiteral("weightsSha256"),
            QStringLiteral("the revealed result is not a finite update of the model: %1").arg(inspected->unfit) });
    return inspected->updateNorm;
}

Result<double> Verifier::checkInferenceReveal(
    const ShardTask& task, const ShardResult& result, const std::function<Error(Error)>& lie)
{
    // The lines themselves (at most inference::MaxShardBytes, measured before they are read): each
    // input's line in order, hashing batch by batch to the chain the node signed, so that a dispute
    // is always over one batch. Lines of the wrong form are refused without a slash (an error of
    // field inference::FormField): Tessera's node checks its own before it commits.
    if (m_.blobs.sizeOf(result.weightsSha256).value_or(0) > inference::MaxShardBytes)
        return lie(Error { QStringLiteral("weightsSha256"), QStringLiteral("more bytes of lines than a shard may have") });
    if (!m_.blobs.contains(result.weightsSha256))
        return Error { QStringLiteral("weightsSha256"), QStringLiteral("upload the lines (PUT) before the result") };
    // The store names a blob by the SHA-256 it checked on upload: the lines are not hashed again.
    if (result.weightsSha256 != result.finalHash)
        return lie(
            Error { QStringLiteral("finalHash"), QStringLiteral("the uploaded lines do not hash to the result's finalHash") });
    auto blob = m_.blobs.read(result.weightsSha256);
    if (!blob)
        return Error { QStringLiteral("weightsSha256"), QStringLiteral("upload the lines (PUT) before the result") };
    if (auto status = inference::checkRevealed(task, *blob, result.checkpointHashes); !status)
        return status.error().field == inference::FormField ? status.error() : lie(status.error());
    return -1.0; // no update to measure
}

Result<QString> Verifier::inferenceDisagreement(const ShardTask& task, const Digest& first, const QByteArray& second)
{
    // Lines of two runtime profiles, compared with the tolerance (docs/DETERMINISM.md, "Inference").
    auto a = m_.blobs.read(first);
    if (!a)
        return a.error();
    auto x = inference::linesOf(*a);
    auto y = inference::linesOf(second);
    if (!x || !y || x->size() != y->size())
        return QStringLiteral("the lines do not match up");
    for (qsizetype k = 0; k < x->size(); ++k) {
        QString why;
        if (!inference::agreeWithin(task.inference->task, (*x)[k], (*y)[k], &why))
            return QStringLiteral("input %1: %2").arg(task.sampleBegin + k).arg(why);
    }
    return QString();
}

Status Verifier::punishSignedLie(const QString& nodeId, const QString& assignmentId, const Error& lie)
{
    // No honest node signs a commitment and then reveals something that contradicts the shard it
    // was given.
    auto found = m_.store.assignment(assignmentId);
    if (!found)
        return found.error();
    if (!*found)
        return {};
    const QString jobId = (*found)->jobId;
    auto transaction = m_.store.begin();
    if (!transaction)
        return transaction.error();
    if (auto status = m_.store.setAssignmentState(assignmentId, AssignmentState::Failed, AssignmentState::Active); !status)
        return status;
    if (auto status = m_.stakes.slash(nodeId, {}, QStringLiteral("slash:%1").arg(assignmentId), lie.toString()); !status)
        return status;
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    m_.scheduler.release(jobId, assignmentId);
    // A verifier that lied leaves the sample to someone else.
    if (auto status = m_.store.requeueRunningChecks(BrokerStore::Requeue::OfVerifierAssignment, assignmentId); !status)
        qCWarning(lcVerification).noquote() << status.error().toString();
    tell(nodeId, assignmentId, CheckVerdict::Slashed, lie.toString());
    return {};
}

// --- comparing and refereeing --------------------------------------------------------------------

Status Verifier::compare(Check& check)
{
    const auto& a = check.accusedResult;
    const auto& b = *check.verifierResult;
    if (a.runtimeProfile != b.runtimeProfile) {
        // Different arithmetic: compare the weights with a tolerance; nobody is slashed for a mismatch.
        auto task = taskOf(check);
        if (task && task->inference) {
            auto second = m_.blobs.read(b.weightsSha256);
            auto differs = second ? inferenceDisagreement(*task, a.weightsSha256, *second) : Result<QString>(second.error());
            if (differs && differs->isEmpty())
                return settle(
                    check, Loser::None, QStringLiteral("equal within the tolerance across runtime profiles"), Penalty::None);
            return settle(check, Loser::Accused,
                QStringLiteral("results of different runtime profiles disagree (%1); the shard is computed again")
                    .arg(differs ? *differs : differs.error().message),
                Penalty::None);
        }
        auto first = m_.blobs.read(a.weightsSha256);
        auto second = m_.blobs.read(b.weightsSha256);
        auto round = m_.blobs.read(check.startBlob);
        if (!first || !second || !round)
            return settle(check, Loser::Accused, QStringLiteral("the weights to compare are gone"), Penalty::None);
        auto distance = m_.math.distance(*first, *second, *round);
        if (distance && *distance <= m_.options.crossProfileTolerance)
            return settle(check, Loser::None,
                QStringLiteral("equal within %1 across runtime profiles (distance %2)")
                    .arg(m_.options.crossProfileTolerance)
                    .arg(*distance),
                Penalty::None);
        return settle(check, Loser::Accused,
            QStringLiteral("results of different runtime profiles disagree (distance %1); the shard is trained again")
                .arg(distance ? QString::number(*distance) : distance.error().message),
            Penalty::None);
    }
    if (!check.inputs.isNull()) // a stage: its tensors count too, and the referee replays it whole
        return a.finalHash == b.finalHash && a.checkpointHashes == b.checkpointHashes && a.tensorsRoot == b.tensorsRoot
            ? settle(check, Loser::None, QStringLiteral("re-execution from what the stage received gave the same bits"))
            : refereeStage(check);
    if (a.finalHash == b.finalHash && a.checkpointHashes == b.checkpointHashes) {
        if (m_.options.auditRate > 0.0) { // the task is read only where an audit may follow
            auto task = taskOf(check);
            if (!task)
                return task.error();
            if (shouldAudit(check, *task))
                return audit(check, *task);
        }
        return settle(check, Loser::None, QStringLiteral("re-execution gave the same bits"));
    }
    // A dispute: narrow it to the first checkpoint where the chains part. Equal chains with
    // different revealed forms: the dispute is over what was revealed from the last state (a
    // "checkpoint" one past the chain, refereed by revealing from that state).
    const auto j = verification::firstDivergence(a.checkpointHashes, b.checkpointHashes);
    return dispute(check, j ? std::max<qsizetype>(*j, 1) : a.checkpointHashes.size());
}

Status Verifier::dispute(Check& check, qsizetype j)
{
    check.checkpoint = j;
    qCInfo(lcVerification).noquote() << "dispute" << check.id << "over" << check.jobId << "round" << check.round << "shard"
                                     << check.shard << "at checkpoint" << j;
    for (const auto& [node, assignment] : sides(check))
        tell(node, assignment, CheckVerdict::Disputed,
            j == check.accusedResult.checkpointHashes.size() ? QStringLiteral("the revealed result differs")
                                                             : QStringLiteral("checkpoint %1 differs").arg(j));
    // An inference shard's input j is computed from the model's weights alone: refereed at once.
    auto task = taskOf(check);
    if (!task)
        return task.error();
    if (task->inference) {
        auto start = m_.blobs.read(check.startBlob);
        if (!start)
            return start.error();
        return refereeInterval(check, *start);
    }
    // A portable job's interval between two nodes: narrowed to one instruction by their traces.
    const bool interval = j < check.accusedResult.checkpointHashes.size();
    if (interval && !check.accused.isEmpty() && !check.verifier.isEmpty() && task->portable)
        return narrow(check);
    if (j == 1) {
        auto start = m_.blobs.read(check.startBlob);
        if (!start)
            return start.error();
        return refereeInterval(check, *start);
    }
    // The state at checkpoint j-1, which both sides agree on, comes from whoever sends it first.
    check.state = CheckState::Disputed;
    check.deadline = m_.clock.nowMs() + disputeWindowMs(check);
    check.asked.clear();
    for (const auto& [node, assignment] : sides(check)) {
        if (!node.isEmpty())
            check.asked.append(node);
    }
    ask(check);
    return m_.store.saveCheck(check);
}

// --- disputes over portable jobs (docs/VERIFICATION.md, "Disputes over portable jobs") ----------

Status Verifier::narrow(Check& check)
{
    check.state = CheckState::Disputed;
    check.narrowing = Narrowing {};
    check.narrowing.stage = Narrowing::Stage::Traces;
    check.deadline = m_.clock.nowMs() + disputeWindowMs(check);
    check.asked = { check.accused, check.verifier };
    ask(check);
    return m_.store.saveCheck(check);
}

Status Verifier::traceDelivered(Check& check, const QString& nodeId, Digest blob)
{
    if (!blob.isNull() && !m_.blobs.contains(blob))
        return Error { QStringLiteral("sha256"), QStringLiteral("upload the trace (PUT) first") };
    if (!blob.isNull()) {
        // Bounded by what an honest trace of this program can hold, before it is read.
        auto task = taskOf(check);
        if (!task)
            return task.error();
        const auto bound = m_.math.traceBytesBound(*task, check.checkpoint);
        const auto size = m_.blobs.sizeOf(blob).value_or(0);
        if (bound && *bound >= 0 && size > *bound) {
            qCWarning(lcVerification).noquote() << "dispute" << check.id << ": node" << nodeId.left(12) << "sent a trace of"
                                                << size << "bytes, more than any of this program (" << *bound << "): not read";
            blob = Digest {};
        }
    }
    if (blob.isNull())
        qCInfo(lcVerification).noquote() << "dispute" << check.id << ": node" << nodeId.left(12) << "has no trace";
    (nodeId == check.accused ? check.narrowing.accusedTrace : check.narrowing.verifierTrace) = blob;
    check.asked.removeAll(nodeId);
    if (!check.asked.isEmpty())
        return m_.store.saveCheck(check);
    return judgeTraces(check);
}

Status Verifier::judgeTraces(Check& check)
{
    // Both traces are in, or the deadline passed: a side without a usable trace loses; with both
    // usable, the referee finds the first instruction whose output differs.
    auto task = taskOf(check);
    if (!task)
        return task.error();
    auto read = [&](const Digest& blob) { return blob.isNull() ? QByteArray() : m_.blobs.read(blob).value_or(QByteArray()); };
    const auto j = check.checkpoint;
    const auto& a = check.accusedResult.checkpointHashes;
    const auto& b = check.verifierResult->checkpointHashes;
    QByteArray round;
    if (j == 1) {
        auto start = m_.blobs.read(check.startBlob);
        if (!start)
            return start.error();
        round = std::move(*start);
    }
    auto compared = m_.math.compareTraces(
        *task, j, a[j - 1], round, a[j], b[j], read(check.narrowing.accusedTrace), read(check.narrowing.verifierTrace));
    if (!compared)
        return settle(check, Loser::Accused,
            QStringLiteral("the referee could not compare the traces (%1); the shard is trained again")
                .arg(compared.error().message),
            Penalty::None);
    const bool accusedFault = !compared->firstFault.isEmpty(), verifierFault = !compared->secondFault.isEmpty();
    if (accusedFault || verifierFault) {
        QStringList faults;
        if (accusedFault)
            faults << QStringLiteral("the checked node's trace: %1").arg(compared->firstFault);
        if (verifierFault)
            faults << QStringLiteral("the verifier's trace: %1").arg(compared->secondFault);
        const Loser loser = accusedFault && verifierFault ? Loser::Both : accusedFault ? Loser::Accused : Loser::Verifier;
        return settle(
            check, loser, QStringLiteral("no usable trace of checkpoint %1 (%2)").arg(j).arg(faults.join(QStringLiteral("; "))));
    }
    const QString at = QStringLiteral("step %1, instruction %2 %3")
                           .arg(compared->step)
                           .arg(compared->instruction)
                           .arg(compared->instructionName);
    if (compared->ruling)
        return rule(check, *compared->ruling, QStringLiteral("the referee read the batch of %1 itself").arg(at));
    qCInfo(lcVerification).noquote() << "dispute" << check.id << "narrowed to" << at;
    check.narrowing.stage = Narrowing::Stage::Operands;
    check.narrowing.step = compared->step;
    check.narrowing.instruction = compared->instruction;
    check.narrowing.instructionName = compared->instructionName;
    check.deadline = m_.clock.nowMs() + disputeWindowMs(check);
    check.asked = { check.accused, check.verifier };
    ask(check);
    return m_.store.saveCheck(check);
}

Result<verification::Ruling> Verifier::refereeInstruction(const Check& check, const QByteArray& operands)
{
    auto task = taskOf(check);
    if (!task)
        return task.error();
    auto read = [&](const Digest& blob) { return m_.blobs.read(blob).value_or(QByteArray()); };
    return m_.math.refereeInstruction(*task, check.narrowing.step, check.narrowing.instruction, operands,
        read(check.narrowing.accusedTrace), read(check.narrowing.verifierTrace));
}

Status Verifier::rule(Check& check, verification::Ruling ruling, const QString& at)
{
    switch (ruling) {
    case verification::Ruling::FirstHonest:
        return settle(check, Loser::Verifier, at + QStringLiteral(" and agrees with the checked result"));
    case verification::Ruling::SecondHonest:
        return settle(check, Loser::Accused, at + QStringLiteral(" and agrees with the re-execution"));
    case verification::Ruling::BothWrong:
        break;
    }
    return settle(check, Loser::Both, at + QStringLiteral(" and agrees with neither"));
}

Status Verifier::refereeInterval(Check& check, const QByteArray& state)
{
    auto task = taskOf(check);
    if (!task)
        return task.error();
    const auto j = check.checkpoint;
    const auto& a = check.accusedResult.checkpointHashes;
    // j one past the chain: both agree on every checkpoint and differ in what they revealed.
    const bool revealed = j == a.size();
    const auto to = revealed ? j - 1 : j;
    QByteArray round; // a compressed update is taken from the round's weights
    if (to == task->checkpointCount() - 1 && task->compression != Compression::None) {
        auto read = m_.blobs.read(check.startBlob);
        if (!read)
            return read.error();
        round = std::move(*read);
    }
    // An inference shard: input j alone, from the model's weights (the whole shard, for the
    // revealed lines, which the broker's check at RESULT leaves no room for).
    const auto from = task->inference && revealed ? 0 : j - 1;
    const auto until = task->inference && revealed ? a.size() - 1 : to;
    auto run = [&] { return m_.math.replay(*task, from, state, a[from], until, round); };
    auto replay = run();
    if (!replay) {
        // From the round's weights nobody's state is involved: the job's own code failed on the
        // referee. From a node's state the state may be at fault, or the code: the caller decides.
        // An inference batch is computed from the model's weights alone, whatever j.
        if ((j == 1 || task->inference) && runsOwnerCode(*task))
            return blameJob(check,
                QStringLiteral("the referee could not re-execute checkpoint %1: %2").arg(j).arg(replay.error().message),
                Proof::Proven);
        return replay.error();
    }
    const QString at = task->inference ? inferenceAt(check, *task)
        : revealed                     ? QStringLiteral("the referee revealed the update from the last checkpoint")
                                       : QStringLiteral("the referee re-executed checkpoint %1").arg(j);
    return ruleOnReplay(check, *task, *replay, at, run);
}

QString Verifier::inferenceAt(const Check& check, const ShardTask& task)
{
    // The batch the referee computed, and where in it the two sides' lines part (both are in the
    // store): the input, and for generate the first token position where the completions part.
    const auto j = check.checkpoint;
    const auto first = (j - 1) * task.batchSize; // within the shard
    QString at = task.batchSize == 1 ? QStringLiteral("the referee computed input %1").arg(task.sampleBegin + first)
                                     : QStringLiteral("the referee computed the batch of inputs %1 to %2")
                                           .arg(task.sampleBegin + first)
                                           .arg(std::min(task.sampleEnd, task.sampleBegin + first + task.batchSize) - 1);
    if (!check.verifierResult)
        return at;
    auto linesOf = [&](const Digest& blob) {
        auto bytes = m_.blobs.read(blob);
        auto lines = bytes ? inference::linesOf(*bytes) : Result<QList<QByteArray>>(Error {});
        return lines ? lines->mid(first, task.batchSize) : QList<QByteArray>();
    };
    const auto a = linesOf(check.accusedResult.weightsSha256), b = linesOf(check.verifierResult->weightsSha256);
    for (qsizetype k = 0; k < std::min(a.size(), b.size()); ++k) {
        if (a[k] == b[k])
            continue;
        at += QStringLiteral(" (the sides part at input %1").arg(task.sampleBegin + first + k);
        if (task.inference->task == InferenceSpec::Task::Generate)
            at += QStringLiteral(", where the completions part at token %1").arg(inference::firstDifferingToken(a[k], b[k]));
        return at + u')';
    }
    return at;
}

Status Verifier::refereeFromStart(Check& check)
{
    // A job owner's code: no side's silence or unusable state is taken as a loss, since the job's
    // code may be what keeps an honest node from re-creating its state. The referee re-executes
    // from the round's weights to the disputed checkpoint itself (at most one shard of training).
    auto task = taskOf(check);
    if (!task)
        return task.error();
    auto start = m_.blobs.read(check.startBlob);
    if (!start)
        return start.error();
    const auto j = check.checkpoint;
    const auto& a = check.accusedResult.checkpointHashes;
    const bool revealed = j == a.size();
    const auto to = revealed ? j - 1 : j;
    auto run = [&] { return m_.math.replay(*task, 0, *start, check.startHash, to, *start); };
    auto replay = run();
    if (!replay)
        return blameJob(check,
            QStringLiteral(
                "no side gave a usable state, and the referee could not re-execute the shard from the round's weights: %1")
                .arg(replay.error().message),
            Proof::Proven);
    // Both sides signed checkpoint j-1: a referee that does not reach it cannot rule on j.
    if (j >= 2 && (replay->checkpoints.size() < j - 1 || replay->checkpoints[j - 2] != a[j - 1]))
        return ruleOnReplay(check, *task, *replay,
            QStringLiteral("the referee re-executed the shard from the round's weights and does not reach checkpoint %1, which "
                           "both sides signed,")
                .arg(j - 1),
            run, Agreement::Neither);
    const QString at = revealed
        ? QStringLiteral("no side gave a usable state; the referee re-executed the shard and revealed its update")
        : QStringLiteral("no side gave a usable state; the referee re-executed the shard to checkpoint %1").arg(j);
    return ruleOnReplay(check, *task, *replay, at, run);
}

Status Verifier::ruleOnReplay(Check& check, const ShardTask& task, const TrainingMath::Replay& replay, const QString& at,
    const std::function<Result<TrainingMath::Replay>()>& again, Agreement agreement)
{
    const auto j = check.checkpoint;
    const auto& a = check.accusedResult.checkpointHashes;
    const bool revealed = j == a.size();
    if (agreement == Agreement::AsHashed) {
        const auto ruling = revealed
            ? verification::referee(check.accusedResult.finalHash, check.verifierResult->finalHash, replay.weightsHash)
            : verification::referee(a[j], check.verifierResult->checkpointHashes[j], replay.checkpoints.last());
        if (ruling != verification::Ruling::BothWrong)
            return rule(check, ruling, at);
    }
    const QString why = at + QStringLiteral(" and agrees with neither");
    // Another CPU or BLAS: the referee's bits are not the sides' to begin with.
    if (!reproduces(replay.runtimeProfile, check.accusedResult.runtimeProfile))
        return settle(check, Loser::Both,
            why + QStringLiteral(" (its runtime profile is not theirs); nobody is slashed and the shard is trained again"),
            Penalty::None);
    // Tessera's own models compute the same bits every time on one runtime profile: both sides
    // computed wrongly what they were given.
    if (!runsOwnerCode(task))
        return settle(check, Loser::Both, why);
    // A job owner's code may not compute the same result twice (uninitialised memory, addresses):
    // then nobody computed wrongly, and an honest node is never slashed for what the job's code
    // does. The referee runs it once more: other bits prove it.
    auto second = again();
    if (!second)
        return blameJob(
            check, why + QStringLiteral("; run again, the job's code failed (%1)").arg(second.error().message), Proof::Proven);
    if (second->checkpoints != replay.checkpoints || second->weightsHash != replay.weightsHash)
        return blameJob(check,
            why + QStringLiteral("; run again, the job's code gave other bits: it does not compute the same result twice"),
            Proof::Proven);
    return blameJob(check,
        why + QStringLiteral("; the job's code is blamed (it may not compute the same result twice on every machine)"),
        Proof::Unproven);
}

bool Verifier::sameAsReplay(const Check& check, const ShardResult& result, const TrainingMath::Replay& replay)
{
    QList<Digest> chain { check.startHash };
    chain.append(replay.checkpoints);
    return chain == result.checkpointHashes && replay.weightsHash == result.finalHash
        && (check.inputs.isNull() || replay.tensorsRoot == result.tensorsRoot);
}

Status Verifier::refereeStage(Check& check)
{
    // A stage's check (docs/VERIFICATION.md, "Pipeline stages"): the referee re-executes the stage
    // whole from the round's weights and what the broker relayed to it, and rules on its chain, its
    // revealed part and the root of what it sent and received. No side's state is asked for: a
    // stage's state alone does not re-create the tensors it traded before it.
    auto task = taskOf(check);
    if (!task)
        return task.error();
    auto start = m_.blobs.read(check.startBlob);
    if (!start)
        return start.error();
    auto replay = m_.math.replay(*task, 0, *start, check.startHash, task->checkpointCount() - 1, *start);
    if (!replay)
        return settle(check, Loser::Both,
            QStringLiteral("the referee could not re-execute the stage (%1); nobody is slashed and the shard is trained again")
                .arg(replay.error().message),
            Penalty::None);
    const auto& a = check.accusedResult;
    const bool accused = sameAsReplay(check, a, *replay), verifier = sameAsReplay(check, *check.verifierResult, *replay);
    QList<Digest> chain { check.startHash };
    chain.append(replay->checkpoints);
    const auto parted = verification::firstDivergence(a.checkpointHashes, chain);
    check.checkpoint = parted ? *parted : a.checkpointHashes.size();
    QString at = QStringLiteral("the referee re-executed the stage from what it received");
    if (!accused)
        at += parted ? QStringLiteral(" (the checked result parts from it at checkpoint %1)").arg(*parted)
            : a.finalHash != replay->weightsHash ? QStringLiteral(" (the checked result reveals another part)")
                                                 : QStringLiteral(" (the checked result sent other tensors)");
    if (accused && verifier)
        return settle(check, Loser::None, at + QStringLiteral(" and agrees with both"));
    if (accused != verifier)
        return rule(check, accused ? verification::Ruling::FirstHonest : verification::Ruling::SecondHonest, at);
    return settle(check, Loser::Both, at + QStringLiteral(" and agrees with neither"));
}

Status Verifier::dropPartners(const Check& check)
{
    auto spec = specOf(check.jobId);
    if (!spec)
        return spec.error();
    auto job = m_.store.existingJob(check.jobId);
    if (!job)
        return job.error();
    auto results = m_.store.shardResults(check.jobId, check.round);
    if (!results)
        return results.error();
    const auto S = spec->stagesPerShard(), first = check.shard / S * S;
    const QString why = QStringLiteral("another stage of its pipeline was proven wrong: the shard is trained again");
    for (const auto& result : *results) {
        if (result.shard < first || result.shard >= first + S || result.shard == check.shard)
            continue;
        // Paid now; its own check goes on (detachedStage), and slashes it if it lied too.
        if (result.state == ResultState::Sampled) {
            auto paid = m_.stakes.payFromEscrow(check.jobId, result.node, job->pricePerShard,
                payCause(check.jobId, check.round, result.shard, result.assignment),
                QStringLiteral("stage %1 of shard %2 of round %3 (its check was called off)")
                    .arg(result.shard % S)
                    .arg(result.shard / S)
                    .arg(check.round));
            if (!paid)
                return paid.error();
            tell(result.node, result.assignment, CheckVerdict::Paid, why, *paid);
        }
        if (auto status = m_.store.dropResult(check.jobId, check.round, result.shard); !status)
            return status;
    }
    return {};
}

bool Verifier::runsOwnerCode(const ShardTask& task)
{
    return task.model.source == ModelSpec::Source::TorchScript;
}

Status Verifier::blameJob(Check& check, const QString& why, Proof proof)
{
    // Nobody is slashed or paid for the shard; it is trained again. The job fails at once when the
    // referee proved its code nondeterministic, else once results of as many distinct nodes as fail
    // a job (BrokerOptions::maxShardFailures, 3) were blamed on it: a pair of colluding liars alone
    // cannot fail someone's job.
    const QString jobId = check.jobId;
    if (auto status = settle(check, Loser::Job, why, Penalty::None); !status)
        return status;
    auto blamedWith = m_.store.nodesInChecksBlamingJob(jobId);
    if (!blamedWith)
        return blamedWith.error();
    if (proof == Proof::Unproven && blamedWith->size() < m_.options.maxShardFailures)
        return {};
    auto job = m_.store.job(jobId);
    if (!job)
        return job.error();
    if (!*job || (*job)->state != JobState::Running)
        return {};
    if (failing(jobId))
        return {}; // failed once, with the first reason
    m_settled.failedJobs.append({ jobId,
        QStringLiteral("the job's code does not compute the same result twice (round %1, shard %2: %3); nobody is slashed")
            .arg(check.round)
            .arg(check.shard)
            .arg(why) });
    return {};
}

Status Verifier::checkpointDelivered(const QString& nodeId, const QString& checkId, const Digest& blob)
{
    auto loaded = m_.store.check(checkId);
    if (!loaded)
        return loaded.error();
    if (!*loaded || (*loaded)->state != CheckState::Disputed || !(*loaded)->asked.contains(nodeId))
        return Error { QStringLiteral("verification"), QStringLiteral("no dispute asks this node for a checkpoint") };
    Check check = **loaded;
    if (check.narrowing.stage == Narrowing::Stage::Traces)
        return traceDelivered(check, nodeId, blob);
    const bool operands = check.narrowing.stage == Narrowing::Stage::Operands;
    const QString what = operands ? QStringLiteral("operands") : QStringLiteral("checkpoint state");
    QString problem;
    if (blob.isNull()) {
        problem = QStringLiteral("the node does not have the %1").arg(what);
    } else if (auto bytes = m_.blobs.read(blob); !bytes) {
        return Error { QStringLiteral("sha256"), QStringLiteral("upload the %1 (PUT) first").arg(what) };
    } else if (operands) {
        auto ruling = refereeInstruction(check, *bytes);
        if (ruling)
            return rule(check, *ruling,
                QStringLiteral("the referee ran step %1, instruction %2 %3 alone")
                    .arg(check.narrowing.step)
                    .arg(check.narrowing.instruction)
                    .arg(check.narrowing.instructionName));
        problem = ruling.error().message;
    } else if (auto status = refereeInterval(check, *bytes); !status) {
        problem = status.error().message;
    } else {
        return {};
    }
    // Nothing usable from this node: a timeout on its record, and it is asked no more. The referee
    // needs one usable state; if none comes (from the other side, before the deadline), every side
    // that was asked loses, this one included. A job owner's code may be what made the state
    // unusable: there nothing is counted, and the referee re-executes from the round's weights.
    qCInfo(lcVerification).noquote() << "dispute" << check.id << ": node" << nodeId.left(12) << "gave no usable" << what << ":"
                                     << problem;
    check.asked.removeAll(nodeId);
    auto task = taskOf(check);
    if (!task)
        return task.error();
    const bool ownerCode = !operands && runsOwnerCode(*task);
    if (!ownerCode) {
        if (auto status = m_.store.countTimeout(nodeId); !status)
            return status;
    }
    auto recorded = !check.asked.isEmpty() ? m_.store.saveCheck(check)
        : ownerCode                        ? refereeFromStart(check)
                                           : settle(check, check.accused.isEmpty() ? Loser::Verifier : Loser::Both,
                                               QStringLiteral("no side delivered usable %1: that counts as a loss").arg(what));
    if (!recorded)
        return recorded;
    if (blob.isNull())
        return {}; // said honestly: acknowledged
    return Error { operands ? QStringLiteral("operands") : QStringLiteral("state"),
        QStringLiteral("the %1 %2 unusable (%3); it counts as no answer, and a dispute without a usable one is lost by "
                       "every side asked")
            .arg(what, operands ? QStringLiteral("are") : QStringLiteral("is"), problem) };
}

// --- settling ------------------------------------------------------------------------------------

Status Verifier::settle(Check& check, Loser loser, const QString& why, Penalty penalty)
{
    const bool accusedLost = loser == Loser::Accused || loser == Loser::Both || loser == Loser::Job;
    const bool sample = check.kind == CheckKind::Sample;
    // The referee checked one checkpoint: a verifier that lied there loses, but the checked result
    // is not proven right by it (a cheater checked by a cheater may be wrong further on). It goes
    // to another verifier.
    const bool recheck = sample && loser == Loser::Verifier;
    const bool retrain = sample && accusedLost;
    auto job = m_.store.existingJob(check.jobId);
    if (!job)
        return job.error();
    const auto now = m_.clock.nowMs();
    auto transaction = m_.store.begin();
    if (!transaction)
        return transaction.error();
    Check again = check;
    again.id = newCheckId();
    again.state = CheckState::Waiting;
    auto detached = detachedStage(check);
    if (!detached)
        return detached.error();
    const Status accused = recheck ? m_.store.insertCheck(again, now)
        : retrain                  ? rejectAccused(check, loser, why, penalty, *detached)
        : sample                   ? payAccused(check, why, *detached)
                                   : Status {};
    if (!accused)
        return accused;
    const bool stage = !check.inputs.isNull();
    if (retrain && stage && !*detached) {
        if (auto status = dropPartners(check); !status)
            return status;
    }
    if (auto status = settleVerifier(check, loser, why, penalty); !status)
        return status;
    const auto decided = recheck ? CheckState::Closed : retrain ? CheckState::Rejected : CheckState::Verified;
    if (auto status = m_.store.decideCheck(check, decided, loser, why, now); !status)
        return status;
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    check.state = decided;
    qCInfo(lcVerification).noquote() << "check" << check.id << "of" << check.jobId << "round" << check.round << "shard"
                                     << check.shard << ":" << nameOf(decided) << "(" << nameOf(loser) << "lost )" << why;
    if (retrain && !*detached)
        reopenShardOf(check);
    if (stage && !recheck) // what the stage received is needed no more
        forgetInputs(check.inputs);
    const auto* round = m_.scheduler.find(check.jobId);
    if (sample && !recheck && (!retrain || *detached) && round && round->round == check.round)
        m_settled.roundsToFinish.insert(check.jobId);
    return {};
}

void Verifier::forgetInputs(const Digest& inputs)
{
    if (inputs.isNull())
        return;
    if (auto used = m_.store.inputsInUse(inputs); used && !*used)
        m_.blobs.remove(inputs);
}

void Verifier::reopenShardOf(const Check& check)
{
    if (check.inputs.isNull())
        return m_.scheduler.reopen(check.jobId, check.round, check.shard);
    const auto* round = m_.scheduler.find(check.jobId); // a stage: the shard's S stages go out together again
    const auto S = round ? round->spec.stagesPerShard() : 1;
    for (auto unit = check.shard / S * S; unit < (check.shard / S + 1) * S; ++unit)
        m_.scheduler.reopen(check.jobId, check.round, unit);
}

Result<bool> Verifier::detachedStage(const Check& check)
{
    if (check.inputs.isNull() || check.kind != CheckKind::Sample)
        return false;
    auto results = m_.store.shardResults(check.jobId, check.round);
    if (!results)
        return results.error();
    for (const auto& result : *results) {
        if (result.shard == check.shard)
            return result.assignment != check.accusedAssignment;
    }
    return true;
}

Status Verifier::payAccused(const Check& check, const QString& why, bool detached)
{
    if (detached) { // paid when its partner's lie dropped it
        tell(check.accused, check.accusedAssignment, CheckVerdict::Verified, why);
        return m_.store.countVerified(check.accused);
    }
    auto job = m_.store.existingJob(check.jobId);
    if (!job)
        return job.error();
    auto paid = m_.stakes.payFromEscrow(check.jobId, check.accused, job->pricePerShard,
        payCause(check.jobId, check.round, check.shard, check.inputs.isNull() ? QString() : check.accusedAssignment),
        QStringLiteral("shard %1 of round %2, verified").arg(check.shard).arg(check.round));
    if (!paid)
        return paid.error();
    for (const auto& status : {
             m_.store.setResultState(check.jobId, check.round, check.shard, ResultState::Verified),
             m_.store.countVerified(check.accused),
         }) {
        if (!status)
            return status;
    }
    tell(check.accused, check.accusedAssignment, CheckVerdict::Verified, why);
    tell(check.accused, check.accusedAssignment, CheckVerdict::Paid, why, *paid);
    return {};
}

Status Verifier::rejectAccused(const Check& check, Loser loser, const QString& why, Penalty penalty, bool detached)
{
    if (auto status = detached ? Status {} : m_.store.dropSampledResult(check.jobId, check.round, check.shard); !status)
        return status;
    if (penalty == Penalty::Slash) {
        const QString honest = loser == Loser::Accused ? check.verifier : QString();
        if (auto status = m_.stakes.slash(check.accused, honest, QStringLiteral("slash:%1:%2").arg(check.id, check.accused), why);
            !status)
            return status;
    }
    tell(check.accused, check.accusedAssignment, penalty == Penalty::Slash ? CheckVerdict::Slashed : CheckVerdict::Rejected, why);
    return {};
}

Status Verifier::settleVerifier(const Check& check, Loser loser, const QString& why, Penalty penalty)
{
    if (check.verifier.isEmpty())
        return {};
    if (loser == Loser::Job || ((loser == Loser::Verifier || loser == Loser::Both) && penalty == Penalty::None)) {
        tell(check.verifier, check.verifierAssignment, CheckVerdict::Rejected, why); // not paid, not slashed
        return {};
    }
    if (loser == Loser::Verifier || loser == Loser::Both) {
        const QString honest = loser == Loser::Verifier ? check.accused : QString();
        if (auto status
            = m_.stakes.slash(check.verifier, honest, QStringLiteral("slash:%1:%2").arg(check.id, check.verifier), why);
            !status)
            return status;
        tell(check.verifier, check.verifierAssignment, CheckVerdict::Slashed, why);
        return {};
    }
    auto job = m_.store.existingJob(check.jobId);
    if (!job)
        return job.error();
    auto paid
        = m_.stakes.payFromEscrow(check.jobId, check.verifier, job->pricePerShard, QStringLiteral("verify:%1").arg(check.id),
            QStringLiteral("re-execution of shard %1 of round %2").arg(check.shard).arg(check.round));
    if (!paid)
        return paid.error();
    if (auto status = m_.store.countVerified(check.verifier); !status)
        return status;
    tell(check.verifier, check.verifierAssignment, CheckVerdict::Verified, why);
    tell(check.verifier, check.verifierAssignment, CheckVerdict::Paid, why, *paid);
    return {};
}

Status Verifier::closeChecksOf(const QString& jobId)
{
    auto job = m_.store.existingJob(jobId);
    if (!job)
        return job.error();
    auto unpaid = m_.store.shardResultsIn(jobId, ResultState::Sampled);
    if (!unpaid)
        return unpaid.error();
    const auto spec = job->spec();
    const bool stages = spec && spec->stagesPerShard() > 1;
    for (const auto& result : *unpaid) {
        auto paid = m_.stakes.payFromEscrow(jobId, result.node, job->pricePerShard,
            payCause(jobId, result.round, result.shard, stages ? result.assignment : QString()),
            QStringLiteral("shard %1 of round %2 (its check was called off)").arg(result.shard).arg(result.round));
        if (!paid)
            return paid.error();
    }
    if (auto status = m_.store.setResultStates(jobId, ResultState::Sampled, ResultState::Accepted); !status)
        return status;
    QList<Digest> inputs; // what their stages received goes with the checks
    for (const auto& open : stages ? m_.store.openChecks(jobId).value_or(QList<Check> {}) : QList<Check> {})
        inputs.append(open.inputs);
    if (auto status = m_.store.cancelOpenChecks(jobId, m_.clock.nowMs()); !status)
        return status;
    for (const auto& digest : inputs)
        forgetInputs(digest);
    return {};
}

// --- the broker's own re-executions and deadlines ------------------------------------------------

Status Verifier::selfVerify(Check& check)
{
    // No node with the same runtime profile came to re-execute the sample in time: the broker
    // re-executes the whole shard itself (it is the referee, so its answer decides).
    auto task = taskOf(check);
    if (!task)
        return task.error();
    auto start = m_.blobs.read(check.startBlob);
    if (!start)
        return start.error();
    auto run = [&] { return m_.math.replay(*task, 0, *start, check.startHash, task->checkpointCount() - 1, *start); };
    auto replay = run();
    if (!replay) {
        const QString why = QStringLiteral("the broker could not re-execute it: %1").arg(replay.error().message);
        if (runsOwnerCode(*task)) // the node ran what fails here: the job's code is blamed, not the node
            return blameJob(check, why, Proof::Unproven);
        return settle(check, Loser::Accused, why, Penalty::None);
    }
    const auto& a = check.accusedResult;
    if (replay->runtimeProfile == a.runtimeProfile) {
        if (sameAsReplay(check, a, *replay))
            return settle(check, Loser::None, QStringLiteral("the broker re-executed it and got the same bits"));
        const QString why = QStringLiteral("the broker re-executed it and got other bits");
        if (!runsOwnerCode(*task))
            return settle(check, Loser::Accused, why);
        // A job owner's code: other bits prove a lie only if the code computes the same bits twice.
        auto second = run();
        const bool differs = !second || second->checkpoints != replay->checkpoints || second->weightsHash != replay->weightsHash;
        return blameJob(check,
            differs
                ? why
                    + QStringLiteral("; run again, the job's code gave other bits again: it does not compute the same "
                                     "result twice")
                : why + QStringLiteral("; the job's code is blamed (it may not compute the same result twice on every machine)"),
            differs ? Proof::Proven : Proof::Unproven);
    }
    if (task->inference) {
        auto differs = inferenceDisagreement(*task, a.weightsSha256, replay->weights);
        if (differs && differs->isEmpty())
            return settle(check, Loser::None,
                QStringLiteral("the broker re-executed it on another runtime profile: equal within the tolerance"),
                Penalty::None);
        return settle(check, Loser::Accused,
            QStringLiteral("the broker re-executed it on another runtime profile and disagrees (%1); computed again")
                .arg(differs ? *differs : differs.error().message),
            Penalty::None);
    }
    auto weights = m_.blobs.read(a.weightsSha256);
    if (!weights)
        return settle(check, Loser::Accused, QStringLiteral("the weights to compare are gone"), Penalty::None);
    auto distance = m_.math.distance(*weights, replay->weights, *start);
    if (distance && *distance <= m_.options.crossProfileTolerance)
        return settle(check, Loser::None,
            QStringLiteral("the broker re-executed it on another runtime profile: distance %1").arg(*distance), Penalty::None);
    return settle(check, Loser::Accused,
        QStringLiteral("the broker re-executed it on another runtime profile and disagrees; trained again"), Penalty::None);
}

bool Verifier::shouldAudit(const Check& check, const ShardTask& task)
{
    // Only where the broker's answer is exact (a zoo model: a job owner's code may differ between
    // processes) and cheap; a node's own profile is found out by running it.
    if (check.kind != CheckKind::Sample || check.accused.isEmpty() || check.verifier.isEmpty() || runsOwnerCode(task)
        || m_.options.auditRate <= 0.0)
        return false;
    const auto* round = m_.scheduler.find(check.jobId);
    const double gflop = (round ? round->flopsPerSample : 0.0) * double(task.localSteps) * double(task.batchSize) / 1e9;
    if (round == nullptr || round->flopsPerSample <= 0.0 || gflop > BrokerOptions::auditMaxShardGflop)
        return false;
    // A budget of broker time: refilled at auditGflopPerSecond, up to two of the largest shards.
    const auto now = m_.clock.nowMs();
    const double cap = 2 * BrokerOptions::auditMaxShardGflop;
    m_auditBudgetGflop = std::min(cap,
        m_auditBudgetGflop
            + double(std::max<std::int64_t>(0, now - m_auditBudgetAt)) / 1000.0 * BrokerOptions::auditGflopPerSecond);
    m_auditBudgetAt = now;
    if (m_auditBudgetGflop < gflop || m_.random.generateDouble() >= m_.options.auditRate)
        return false;
    m_auditBudgetGflop -= gflop;
    return true;
}

Status Verifier::audit(Check& check, const ShardTask& task)
{
    auto start = m_.blobs.read(check.startBlob);
    if (!start)
        return start.error();
    auto replay = m_.math.replay(task, 0, *start, check.startHash, task.checkpointCount() - 1, *start);
    const auto& a = check.accusedResult;
    if (!replay || (!task.portable && replay->runtimeProfile != a.runtimeProfile)) // it cannot tell
        return settle(check, Loser::None, QStringLiteral("re-execution gave the same bits"));
    if (sameAsReplay(check, a, *replay))
        return settle(check, Loser::None, QStringLiteral("re-execution gave the same bits, and so did the broker's audit"));
    qCWarning(lcVerification).noquote() << "audit of check" << check.id << ":" << check.accused.left(12) << "and"
                                        << check.verifier.left(12) << "agreed on bits the broker does not get";
    return settle(check, Loser::Both,
        QStringLiteral("the verifier agreed with the checked result, and the broker's own re-execution (an audit) gives "
                       "other bits: both computed it wrongly"));
}

bool Verifier::anyVerifierOnline(const Check& check)
{
    if (!m_.scheduler.find(check.jobId))
        return true; // cannot tell: wait the full time
    return !candidatesFor(check).isEmpty(); // the partner rule never leaves none
}

QStringList Verifier::candidatesFor(const Check& check) const
{
    const auto* round = m_.scheduler.find(check.jobId);
    const QString address = m_.addresses.value(check.accused);
    QStringList eligible;
    for (const auto& node : m_.online) {
        if (node.nodeId == check.accused || (!address.isEmpty() && m_.addresses.value(node.nodeId) == address))
            continue; // its own node, or one at its address (where that can be told)
        if (mayCheck(check, node, round))
            eligible.append(node.nodeId);
    }
    std::sort(eligible.begin(), eligible.end()); // the draw depends on the random source only
    return eligible;
}

Result<QStringList> Verifier::eligibleVerifiers(const Check& check)
{
    const auto eligible = candidatesFor(check);
    if (check.accused.isEmpty() || eligible.size() < 2)
        return eligible;
    auto latest = m_.store.latestVerifiersOf(check.accused, PartnerWindow);
    if (!latest)
        return latest.error();
    QStringList others;
    for (const auto& id : std::as_const(eligible)) {
        if (latest->count(id) < PartnerChecks)
            others.append(id);
    }
    return others.isEmpty() ? eligible : others;
}

bool Verifier::mayCheck(const Check& check, const NodeInfo& node, const Scheduler::Round* round) const
{
    if ((round && !round->runsOn(node)) || !reproduces(node.runtimeProfile, check.accusedResult.runtimeProfile)
        || !m_.stakes.hasStake(node.nodeId))
        return false;
    const auto declined = m_declined.constFind(check.id); // it gave this check back, or failed it
    return declined == m_declined.constEnd() || !declined->nodes.contains(node.nodeId);
}

Result<bool> Verifier::drawnToCheck(const Check& check, const NodeInfo& node)
{
    const auto now = m_.clock.nowMs();
    // The draw stands while its node is connected and may still check it (it may lose its stake).
    if (const auto found = m_draws.constFind(check.id); found != m_draws.constEnd()) {
        const auto drawn = m_.online.constFind(found->node);
        if (drawn != m_.online.constEnd() && mayCheck(check, *drawn, m_.scheduler.find(check.jobId)))
            return found->node == node.nodeId;
    }
    auto eligible = eligibleVerifiers(check);
    if (!eligible)
        return eligible.error();
    if (eligible->isEmpty()) {
        m_draws.remove(check.id);
        return false;
    }
    const QString drawn = eligible->at(qsizetype(m_.random.bounded(quint32(eligible->size()))));
    m_draws.insert(check.id, Draw { drawn, now });
    qCDebug(lcVerification).noquote() << "check" << check.id << "of" << check.accused.left(12) << "drawn for" << drawn.left(12)
                                      << "among" << eligible->size();
    return drawn == node.nodeId;
}

void Verifier::tick()
{
    const auto now = m_.clock.nowMs();
    // A draw stands while its node is connected (a busy node takes its check after its shard; one
    // that never comes leaves it to the broker's own re-execution, selfVerifyAfterMs); a check
    // that ended otherwise (its job did) is forgotten after an hour.
    m_draws.removeIf(
        [&](const auto& draw) { return !m_.online.contains(draw.value().node) || now - draw.value().at >= ForgetDrawMs; });
    m_declined.removeIf([&](const auto& declined) { return now - declined.value().at >= ForgetDrawMs; });
    expireLateDisputes(now);
    requeueOverdue(now);
    selfVerifyStuck(now);
}

void Verifier::expireLateDisputes(std::int64_t now)
{
    // Disputes whose checkpoint state never came: everyone still asked timed out, and loses (also
    // one that answered with a state the referee could not use).
    auto late = m_.store.lateDisputes(now);
    for (const auto& id : late.value_or(QStringList {})) {
        auto check = m_.store.check(id);
        // Settled by an earlier one of this tick (a blamed job), or of a job that fails with it.
        if (!check || !*check || (*check)->state != CheckState::Disputed || failing((*check)->jobId))
            continue;
        auto task = taskOf(**check);
        if (task && (*check)->narrowing.stage == Narrowing::Stage::None && runsOwnerCode(*task)) {
            // A job owner's code: silence is not taken as a loss (the job's code may be what keeps
            // an honest node from re-creating its state); the referee re-executes from the start.
            Check judged = **check;
            judged.asked.clear();
            if (auto status = refereeFromStart(judged); !status)
                qCWarning(lcVerification).noquote() << status.error().toString();
            continue;
        }
        for (const auto& node : (*check)->asked) {
            if (auto status = m_.store.countTimeout(node); !status)
                qCWarning(lcVerification).noquote() << status.error().toString();
        }
        if ((*check)->narrowing.stage == Narrowing::Stage::Traces) { // judged on the traces that came
            Check judged = **check;
            judged.asked.clear();
            if (auto status = judgeTraces(judged); !status)
                qCWarning(lcVerification).noquote() << status.error().toString();
            continue;
        }
        const Loser loser = (*check)->accused.isEmpty() ? Loser::Verifier : Loser::Both;
        if (auto status = settle(**check, loser, QStringLiteral("the checkpoint state did not come in time")); !status)
            qCWarning(lcVerification).noquote() << status.error().toString();
    }
}

void Verifier::requeueOverdue(std::int64_t now)
{
    auto overdue = m_.store.overdueCheckAssignments(now);
    for (const auto& [assignment, check] : overdue.value_or(QList<std::pair<QString, QString>> {})) {
        for (const auto& status : { m_.store.setAssignmentState(assignment, AssignmentState::Expired),
                 m_.store.requeueRunningChecks(BrokerStore::Requeue::OfCheck, check) }) {
            if (!status)
                qCWarning(lcVerification).noquote() << status.error().toString();
        }
    }
}

void Verifier::selfVerifyStuck(std::int64_t now)
{
    // Samples nobody could check: the broker re-executes them, after Options::selfVerifyAfterMs, or
    // at once when no connected node could check them at all (a broker with a single node).
    if (m_.options.selfVerifyAfterMs < 0)
        return;
    const bool early = m_.options.selfVerifyAloneAfterMs >= 0 && now - m_startedAtMs >= m_.options.selfVerifyAloneAfterMs;
    auto stuck = m_.store.waitingSamples(now - (early ? 0 : m_.options.selfVerifyAfterMs));
    for (const auto& [id, createdAt] : stuck.value_or(QList<std::pair<QString, std::int64_t>> {})) {
        auto check = m_.store.check(id);
        if (!check || !*check || (*check)->state != CheckState::Waiting || !m_.scheduler.find((*check)->jobId)
            || failing((*check)->jobId))
            continue;
        const bool due = createdAt <= now - m_.options.selfVerifyAfterMs;
        if (!due && anyVerifierOnline(**check))
            continue;
        if (auto status = selfVerify(**check); !status)
            qCWarning(lcVerification).noquote() << status.error().toString();
    }
}

} // namespace tessera::core::broker
