// The broker's verification: sampled re-execution, canaries, refereed disputes, slashing and stake.
// docs/VERIFICATION.md describes the rules; this file carries them out.

#include "broker.h"

#include "../decomposition.h"
#include "../jsonreader.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QLoggingCategory>

Q_LOGGING_CATEGORY(lcVerification, "tessera.verification")

namespace tessera::core::broker {

using storage::execute;
using storage::fetch;
using storage::query;

namespace {

QString jsonText(const QJsonObject& object)
{
    return QString::fromUtf8(QJsonDocument(object).toJson(QJsonDocument::Compact));
}

QString newCheckId()
{
    return QStringLiteral("v%1").arg(QRandomGenerator::system()->generate64(), 16, 16, QLatin1Char('0'));
}

// Runtime profiles without the thread count: a node registers the profile of one thread and runs
// each shard on the shard's own thread count, so two nodes match when the rest is equal.
QString profileWithoutThreads(const QString& profile)
{
    QStringList kept;
    for (const auto& part : profile.split(u';', Qt::SkipEmptyParts)) {
        if (!part.startsWith(u"threads="))
            kept.append(part);
    }
    return kept.join(u';');
}

const QString CheckColumns = QStringLiteral(
    "id, kind, job, round, shard, start_hash, start_blob, COALESCE(accused, ''), COALESCE(accused_assignment, ''), "
    "accused_result, COALESCE(verifier, ''), COALESCE(verifier_assignment, ''), COALESCE(verifier_result, ''), state, "
    "COALESCE(checkpoint, -1), COALESCE(deadline, 0), asked");

} // namespace

struct Broker::Check {
    QString id;
    QString kind; // sample, canary
    QString jobId;
    std::int64_t round = 0;
    std::int64_t shard = 0;
    Digest startHash;
    Digest startBlob;
    QString accused; // empty for a canary
    QString accusedAssignment;
    ShardResult accusedResult;
    QString verifier;
    QString verifierAssignment;
    std::optional<ShardResult> verifierResult;
    QString state;
    std::int64_t checkpoint = -1;
    std::int64_t deadline = 0;
    QStringList asked;

    static Result<Check> fromRow(storage::Statement& row)
    {
        Check check;
        check.id = row.columnText(0);
        check.kind = row.columnText(1);
        check.jobId = row.columnText(2);
        check.round = row.columnInt(3);
        check.shard = row.columnInt(4);
        if (auto digest = Digest::fromHex(row.columnText(5)))
            check.startHash = *digest;
        if (auto digest = Digest::fromHex(row.columnText(6)))
            check.startBlob = *digest;
        check.accused = row.columnText(7);
        check.accusedAssignment = row.columnText(8);
        auto accused = ShardResult::fromJson(QJsonDocument::fromJson(row.columnText(9).toUtf8()).object());
        if (!accused)
            return accused.error();
        check.accusedResult = *accused;
        check.verifier = row.columnText(10);
        check.verifierAssignment = row.columnText(11);
        if (!row.columnText(12).isEmpty()) {
            auto verifier = ShardResult::fromJson(QJsonDocument::fromJson(row.columnText(12).toUtf8()).object());
            if (!verifier)
                return verifier.error();
            check.verifierResult = *verifier;
        }
        check.state = row.columnText(13);
        check.checkpoint = row.columnInt(14);
        check.deadline = row.columnInt(15);
        for (const auto& value : QJsonDocument::fromJson(row.columnText(16).toUtf8()).array())
            check.asked.append(value.toString());
        return check;
    }
};

namespace {

Result<std::optional<Broker::Check>> loadCheck(storage::Database& db, const QString& id)
{
    auto row = query(db, QStringLiteral("SELECT %1 FROM verifications WHERE id = ?").arg(CheckColumns), id);
    if (!row)
        return row.error();
    auto found = fetch(*row);
    if (!found)
        return found.error();
    if (!*found)
        return std::optional<Broker::Check> {};
    auto check = Broker::Check::fromRow(*row);
    if (!check)
        return check.error();
    return std::optional<Broker::Check>(*check);
}

Status saveCheck(storage::Database& db, const Broker::Check& check)
{
    QJsonArray asked;
    for (const auto& node : check.asked)
        asked.append(node);
    return execute(db,
        QStringLiteral("UPDATE verifications SET verifier = NULLIF(?, ''), verifier_assignment = NULLIF(?, ''), "
                       "verifier_result = NULLIF(?, ''), state = ?, checkpoint = NULLIF(?, -1), deadline = ?, asked = ? "
                       "WHERE id = ?"),
        check.verifier, check.verifierAssignment, check.verifierResult ? jsonText(check.verifierResult->toJson()) : QString(),
        check.state, check.checkpoint, check.deadline, QString::fromUtf8(QJsonDocument(asked).toJson(QJsonDocument::Compact)),
        check.id);
}

Result<QList<QString>> ids(storage::Database& db, const QString& sql, std::int64_t value)
{
    auto rows = query(db, sql, value);
    if (!rows)
        return rows.error();
    return storage::collect(*rows, [](storage::Statement& row) { return row.columnText(0); });
}

} // namespace

Status Broker::requeueChecks(const QString& column, const QString& value)
{
    // Re-executions whose node went, lied or ran out of time go back to the queue; a canary is
    // dropped (another will come). column: verifier, verifier_assignment or id; empty: all of them.
    const QString sql = QStringLiteral("UPDATE verifications SET state = CASE kind WHEN 'canary' THEN 'cancelled' ELSE "
                                       "'waiting' END, verifier = NULL, verifier_assignment = NULL WHERE state = 'running'");
    if (column.isEmpty())
        return execute(*m_db, sql);
    return execute(*m_db, sql + QStringLiteral(" AND %1 = ?").arg(column), value);
}

void Broker::notify(Notice::Kind kind, const QString& nodeId, QJsonObject body)
{
    if (!nodeId.isEmpty())
        m_notices.push_back({ kind, nodeId, std::move(body) });
}

std::vector<Notice> Broker::takeNotices()
{
    return std::exchange(m_notices, {});
}

Credits Broker::priceOf(const QString& jobId)
{
    auto price = query(*m_db, QStringLiteral("SELECT price_per_shard FROM jobs WHERE id = ?"), jobId);
    if (!price)
        return {};
    auto row = fetch(*price);
    return row && *row ? Credits::fromMicro(price->columnInt(0)) : Credits {};
}

Result<bool> Broker::drawSample(const QString& nodeId, const JobSpec& spec)
{
    auto record = query(*m_db, QStringLiteral("SELECT streak FROM nodes WHERE id = ?"), nodeId);
    if (!record)
        return record.error();
    auto row = fetch(*record);
    if (!row)
        return row.error();
    verification::NodeRecord node;
    node.streak = *row ? record->columnInt(0) : 0;
    const double p = std::max(verification::samplingProbability(node, m_options.sampling), spec.verificationRate);
    return m_random.generateDouble() < p;
}

Result<ShardTask> Broker::taskOf(const Check& check)
{
    auto spec = specOf(check.jobId);
    if (!spec)
        return spec.error();
    return decomposeShard(check.jobId, *spec, check.round, check.shard, check.startHash);
}

Result<std::optional<Assignment>> Broker::assignCheck(const NodeInfo& node)
{
    const auto now = m_clock.nowMs();
    auto handOut = [&](Check& check, const QString& kind) -> Result<std::optional<Assignment>> {
        auto task = taskOf(check);
        if (!task)
            return task.error();
        const double seconds
            = double(task->localSteps * task->batchSize) / expectedSamplesPerSecond(node) * double(task->threads);
        const auto deadline
            = now + std::max<std::int64_t>(m_options.minDeadlineMs, std::int64_t(seconds * 1000.0 * m_options.deadlineSlack));
        Assignment assignment { newCheckId().mid(1), *task, check.startBlob, deadline };
        check.verifier = node.nodeId;
        check.verifierAssignment = assignment.id;
        check.state = QStringLiteral("running");
        auto transaction = m_db->begin();
        if (!transaction)
            return transaction.error().toError();
        if (auto status = execute(*m_db,
                QStringLiteral("INSERT INTO assignments (id, job, round, shard, node, issued_at, deadline, state, kind, "
                               "verification) VALUES (?, ?, ?, ?, ?, ?, ?, 'active', ?, ?)"),
                assignment.id, check.jobId, check.round, check.shard, node.nodeId, now, deadline, kind, check.id);
            !status)
            return status.error();
        if (auto status = saveCheck(*m_db, check); !status)
            return status.error();
        if (auto spec = specOf(check.jobId)) {
            for (const auto& needed : blobsNamedBy(*spec) + QList<Digest> { check.startBlob }) {
                if (auto granted = allowRead(needed, node.nodeId); !granted)
                    return granted.error();
            }
        }
        if (auto committed = transaction->commit(); !committed)
            return committed.error().toError();
        return std::optional<Assignment>(assignment);
    };

    auto compatible = [&](const Check& check) {
        return profileWithoutThreads(check.accusedResult.runtimeProfile) == profileWithoutThreads(node.runtimeProfile);
    };

    // Rows are read into a list first so that no statement is open while the choice is written.
    auto checks = [&](const QString& sql) -> Result<QList<Check>> {
        auto rows = query(*m_db, sql.arg(CheckColumns), node.nodeId, node.nodeId);
        if (!rows)
            return rows.error();
        return storage::collect(*rows, [&](storage::Statement& row) -> std::optional<Check> {
            auto check = Check::fromRow(row);
            if (check && compatible(*check) && runningState(check->jobId))
                return *check;
            return std::nullopt;
        });
    };

    // Samples waiting for a re-execution, oldest first, by anyone but the node checked.
    auto waiting = checks(QStringLiteral("SELECT %1 FROM verifications WHERE state = 'waiting' AND COALESCE(accused, '') <> ? "
                                         "AND ? <> '' ORDER BY created_at LIMIT 50"));
    if (!waiting)
        return waiting.error();
    for (auto& check : *waiting) {
        auto spec = specOf(check.jobId);
        if (spec && spec->training.threads <= node.maxThreads)
            return handOut(check, QStringLiteral("verify"));
    }

    // Now and then a canary: a shard whose answer two nodes agreed on, handed out again as if new.
    if (m_options.canaryRate <= 0.0 || m_random.generateDouble() >= m_options.canaryRate)
        return std::optional<Assignment> {};
    auto known = checks(QStringLiteral("SELECT %1 FROM verifications WHERE kind = 'sample' AND state = 'verified' "
                                       "AND accused <> ? AND COALESCE(verifier, '') <> ? ORDER BY created_at DESC LIMIT 20"));
    if (!known)
        return known.error();
    std::optional<Check> reference;
    for (const auto& check : *known) {
        auto spec = specOf(check.jobId);
        if (!check.verifier.isEmpty() && spec && spec->training.threads <= node.maxThreads) {
            reference = check;
            break;
        }
    }
    if (!reference)
        return std::optional<Assignment> {};
    Check canary = *reference;
    canary.id = newCheckId();
    canary.kind = QStringLiteral("canary");
    canary.accused.clear();
    canary.accusedAssignment.clear();
    canary.verifierResult.reset();
    canary.asked.clear();
    canary.checkpoint = -1;
    if (auto status = execute(*m_db,
            QStringLiteral("INSERT INTO verifications (id, kind, job, round, shard, start_hash, start_blob, accused_result, "
                           "state, created_at) VALUES (?, 'canary', ?, ?, ?, ?, ?, ?, 'waiting', ?)"),
            canary.id, canary.jobId, canary.round, canary.shard, canary.startHash.toHex(), canary.startBlob.toHex(),
            jsonText(canary.accusedResult.toJson()), now);
        !status)
        return status.error();
    return handOut(canary, QStringLiteral("canary"));
}

Status Broker::recordResultError(const QString& nodeId, const QString& assignmentId, const Error& error)
{
    // The node signed a commitment and then revealed something that contradicts the shard it was
    // given: no honest node does that, so it is slashed like a lost dispute.
    auto found = query(*m_db, QStringLiteral("SELECT job FROM assignments WHERE id = ?"), assignmentId);
    if (!found)
        return found.error();
    if (auto row = fetch(*found); !row || !*row)
        return {};
    const QString jobId = found->columnText(0);
    auto transaction = m_db->begin();
    if (!transaction)
        return transaction.error().toError();
    if (auto status = execute(
            *m_db, QStringLiteral("UPDATE assignments SET state = 'failed' WHERE id = ? AND state = 'active'"), assignmentId);
        !status)
        return status;
    if (auto status = slash(nodeId, jobId, {}, QStringLiteral("slash:%1").arg(assignmentId), error.toString()); !status)
        return status;
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    if (auto* running = runningState(jobId); running && running->active.contains(assignmentId))
        release(*running, assignmentId);
    // A verifier that lied leaves the sample to someone else.
    (void)requeueChecks(QStringLiteral("verifier_assignment"), assignmentId);
    notify(Notice::Kind::Verdict, nodeId,
        { { QStringLiteral("assignment"), assignmentId }, { QStringLiteral("state"), QStringLiteral("slashed") },
            { QStringLiteral("detail"), error.toString() } });
    return {};
}

Status Broker::slash(const QString& nodeId, const QString& jobId, const QString& honest, const QString& cause, const QString& why)
{
    // Inside the caller's transaction. A fraction of what the node has at stake (bonded first,
    // then what is unbonding): half to the honest party, the rest to the job's owner.
    const auto now = m_clock.nowMs();
    auto owner = query(*m_db, QStringLiteral("SELECT owner FROM jobs WHERE id = ?"), jobId);
    if (!owner)
        return owner.error();
    auto ownerRow = fetch(*owner);
    if (!ownerRow)
        return ownerRow.error();
    const QString ownerId = *ownerRow ? owner->columnText(0) : QStringLiteral("local");
    std::int64_t total = 0;
    for (const auto& account : { ledger::accounts::stake(nodeId), ledger::accounts::unbonding(nodeId) }) {
        auto held = m_ledger->balance(account);
        if (!held)
            return held.error();
        if (held->micro() <= 0)
            continue;
        const auto amount = held->checkedScale(std::int64_t(m_options.slashFraction * 1'000'000), 1'000'000).value_or(Credits {});
        if (amount.micro() <= 0)
            continue;
        const auto toHonest = honest.isEmpty() ? Credits {} : Credits::fromMicro(amount.micro() / 2);
        const auto toOwner = Credits::fromMicro(amount.micro() - toHonest.micro());
        const QString suffix = account.startsWith(u"stake:") ? QString() : QStringLiteral(":unbonding");
        if (toHonest.micro() > 0) {
            auto paid = m_ledger->transfer(account, ledger::accounts::balance(honest), toHonest,
                cause + suffix + QStringLiteral(":honest"), QStringLiteral("slashed %1: %2").arg(nodeId.left(12), why), now);
            if (!paid)
                return paid.error();
        }
        if (toOwner.micro() > 0) {
            auto paid = m_ledger->transfer(account, ledger::accounts::balance(ownerId), toOwner,
                cause + suffix + QStringLiteral(":owner"), QStringLiteral("slashed %1: %2").arg(nodeId.left(12), why), now);
            if (!paid)
                return paid.error();
        }
        total += amount.micro();
        break; // one slash takes from one account
    }
    qCWarning(lcVerification).noquote() << "slashed node" << nodeId.left(12) << Credits::fromMicro(total).toString()
                                        << "credits:" << why;
    return execute(*m_db,
        QStringLiteral("UPDATE nodes SET slashed = slashed + ?, disputes_lost = disputes_lost + 1, streak = 0 WHERE id = ?"),
        total, nodeId);
}

Result<Verdict> Broker::acceptCheck(
    const QString& nodeId, const QString& assignmentId, const QString& verificationId, const ShardResult& result)
{
    auto loaded = loadCheck(*m_db, verificationId);
    if (!loaded)
        return loaded.error();
    if (!*loaded || (*loaded)->state != u"running" || (*loaded)->verifierAssignment != assignmentId) {
        (void)execute(*m_db, QStringLiteral("UPDATE assignments SET state = 'answered' WHERE id = ?"), assignmentId);
        return Verdict::Stale;
    }
    Check check = **loaded;
    if (result.jobId != check.jobId || result.round != check.round || result.shard != check.shard)
        return Error { QStringLiteral("result"), QStringLiteral("the result is for another shard than its assignment") };

    if (result.outcome != ShardResult::Outcome::Completed) {
        // Failed or given back: the check waits for another verifier (a canary is dropped).
        const bool returned = result.outcome == ShardResult::Outcome::Returned;
        auto transaction = m_db->begin();
        if (!transaction)
            return transaction.error().toError();
        (void)execute(*m_db, QStringLiteral("UPDATE assignments SET state = ? WHERE id = ?"),
            returned ? QStringLiteral("returned") : QStringLiteral("failed"), assignmentId);
        if (!returned)
            (void)execute(*m_db, QStringLiteral("UPDATE nodes SET shards_failed = shards_failed + 1 WHERE id = ?"), nodeId);
        check.verifier.clear();
        check.verifierAssignment.clear();
        check.state = check.kind == u"canary" ? QStringLiteral("cancelled") : QStringLiteral("waiting");
        if (auto status = saveCheck(*m_db, check); !status)
            return status.error();
        if (auto status = transaction->commit(); !status)
            return status.error().toError();
        return Verdict::Failed;
    }

    auto task = taskOf(check);
    if (!task)
        return task.error();
    if (auto revealed = checkReveal(nodeId, assignmentId, *task, result); !revealed)
        return revealed.error();

    check.verifierResult = result;
    auto transaction = m_db->begin();
    if (!transaction)
        return transaction.error().toError();
    for (const auto& status : {
             execute(*m_db, QStringLiteral("UPDATE assignments SET state = 'answered' WHERE id = ?"), assignmentId),
             execute(*m_db, QStringLiteral("UPDATE nodes SET last_seen = ? WHERE id = ?"), m_clock.nowMs(), nodeId),
             saveCheck(*m_db, check),
         }) {
        if (!status)
            return status.error();
    }
    if (auto status = transaction->commit(); !status)
        return status.error().toError();
    if (auto status = compare(check); !status)
        return status.error();
    return Verdict::Held;
}

Status Broker::compare(Check& check)
{
    const auto& a = check.accusedResult;
    const auto& b = *check.verifierResult;
    if (a.runtimeProfile != b.runtimeProfile) {
        // Different arithmetic: compare the weights with a tolerance; nobody is slashed for a mismatch.
        auto first = m_blobs->read(a.weightsSha256);
        auto second = m_blobs->read(b.weightsSha256);
        if (!first || !second)
            return settle(check, Loser::Accused, QStringLiteral("the weights to compare are gone"), false);
        auto distance = m_math.distance(*first, *second);
        if (distance && *distance <= m_options.crossProfileTolerance)
            return settle(check, Loser::None,
                QStringLiteral("equal within %1 across runtime profiles (distance %2)")
                    .arg(m_options.crossProfileTolerance)
                    .arg(*distance),
                false);
        return settle(check, Loser::Accused,
            QStringLiteral("results of different runtime profiles disagree (distance %1); the shard is trained again")
                .arg(distance ? QString::number(*distance) : distance.error().message),
            false);
    }
    if (a.finalHash == b.finalHash && a.checkpointHashes == b.checkpointHashes)
        return settle(check, Loser::None, QStringLiteral("re-execution gave the same bits"));

    // A dispute: narrow it to the first checkpoint where the chains part.
    auto j = verification::firstDivergence(a.checkpointHashes, b.checkpointHashes).value_or(a.checkpointHashes.size() - 1);
    j = std::max<qsizetype>(j, 1);
    check.checkpoint = j;
    qCInfo(lcVerification).noquote() << "dispute" << check.id << "over" << check.jobId << "round" << check.round << "shard"
                                     << check.shard << "at checkpoint" << j;
    for (const auto& [node, assignment] :
        { std::pair { check.accused, check.accusedAssignment }, std::pair { check.verifier, check.verifierAssignment } })
        notify(Notice::Kind::Verdict, node,
            { { QStringLiteral("assignment"), assignment }, { QStringLiteral("state"), QStringLiteral("disputed") },
                { QStringLiteral("detail"), QStringLiteral("checkpoint %1 differs").arg(j) } });
    if (j == 1) {
        auto start = m_blobs->read(check.startBlob);
        if (!start)
            return start.error();
        return refereeInterval(check, *start);
    }
    // The state at checkpoint j-1, which both sides agree on, comes from whoever sends it first.
    check.state = QStringLiteral("disputed");
    check.deadline = m_clock.nowMs() + m_options.disputeTimeoutMs;
    check.asked.clear();
    for (const auto& [node, assignment] :
        { std::pair { check.accused, check.accusedAssignment }, std::pair { check.verifier, check.verifierAssignment } }) {
        if (node.isEmpty())
            continue;
        check.asked.append(node);
        notify(Notice::Kind::CheckpointRequest, node,
            { { QStringLiteral("verification"), check.id }, { QStringLiteral("assignment"), assignment },
                { QStringLiteral("checkpoint"), static_cast<qint64>(j - 1) } });
    }
    return saveCheck(*m_db, check);
}

Status Broker::refereeInterval(Check& check, const QByteArray& state)
{
    auto task = taskOf(check);
    if (!task)
        return task.error();
    const auto j = check.checkpoint;
    const auto& a = check.accusedResult.checkpointHashes;
    const auto& b = check.verifierResult->checkpointHashes;
    auto replay = m_math.replay(*task, j - 1, state, a[j - 1], j);
    if (!replay)
        return replay.error();
    const auto& reference = replay->checkpoints.last();
    const auto verdict = verification::referee(a[j], b[j], reference);
    const QString at = QStringLiteral("the referee re-executed checkpoint %1").arg(j);
    switch (verdict) {
    case verification::Verdict::FirstHonest:
        return settle(check, Loser::Verifier, at + QStringLiteral(" and agrees with the checked result"));
    case verification::Verdict::SecondHonest:
        return settle(check, Loser::Accused, at + QStringLiteral(" and agrees with the re-execution"));
    case verification::Verdict::BothWrong:
        break;
    }
    return settle(check, Loser::Both, at + QStringLiteral(" and agrees with neither"));
}

Status Broker::checkpointDelivered(const QString& nodeId, const QString& verificationId, const Digest& blob)
{
    auto loaded = loadCheck(*m_db, verificationId);
    if (!loaded)
        return loaded.error();
    if (!*loaded || (*loaded)->state != u"disputed" || !(*loaded)->asked.contains(nodeId))
        return Error { QStringLiteral("verification"), QStringLiteral("no dispute asks this node for a checkpoint") };
    Check check = **loaded;
    QString problem;
    if (blob.isNull()) {
        problem = QStringLiteral("the node does not have the checkpoint");
    } else if (auto state = m_blobs->read(blob); !state) {
        problem = QStringLiteral("upload the checkpoint state (PUT) first");
        return Error { QStringLiteral("sha256"), problem };
    } else if (auto status = refereeInterval(check, *state); !status) {
        problem = status.error().message;
    } else {
        return {};
    }
    // Nothing usable from this node: a timeout on its record, and it is asked no more. The referee
    // needs one usable state; if none comes (from the other side, before the deadline), every side
    // that was asked loses, this one included.
    qCInfo(lcVerification).noquote() << "dispute" << check.id << ": node" << nodeId.left(12) << "gave no checkpoint:" << problem;
    check.asked.removeAll(nodeId);
    if (auto status = execute(*m_db, QStringLiteral("UPDATE nodes SET timeouts = timeouts + 1 WHERE id = ?"), nodeId); !status)
        return status;
    auto recorded = check.asked.isEmpty() ? settle(check, check.accused.isEmpty() ? Loser::Verifier : Loser::Both,
                        QStringLiteral("no side delivered a usable checkpoint state: that counts as a loss"))
                                          : saveCheck(*m_db, check);
    if (!recorded)
        return recorded;
    if (blob.isNull())
        return {}; // said honestly: acknowledged
    return Error { QStringLiteral("state"),
        QStringLiteral("the checkpoint state is unusable (%1); it counts as no answer, and a dispute without a usable state "
                       "is lost by every side asked")
            .arg(problem) };
}

Status Broker::settle(Check& check, Loser loser, const QString& why, bool punish)
{
    const bool accusedLost = loser == Loser::Accused || loser == Loser::Both;
    const bool verifierLost = loser == Loser::Verifier || loser == Loser::Both;
    const bool sample = check.kind == u"sample";
    const auto price = priceOf(check.jobId);
    const auto now = m_clock.nowMs();
    auto spec = specOf(check.jobId);
    if (!spec)
        return spec.error();

    auto pay = [&](const QString& node, const QString& cause, const QString& memo) -> Result<Credits> {
        auto escrow = m_ledger->balance(ledger::accounts::escrow(check.jobId));
        if (!escrow)
            return escrow.error();
        const auto amount = std::min(price, *escrow);
        if (amount.micro() <= 0)
            return Credits {};
        auto paid = m_ledger->transfer(
            ledger::accounts::escrow(check.jobId), ledger::accounts::balance(node), amount, cause, memo, now);
        if (!paid)
            return paid.error();
        return amount;
    };
    auto tell = [&](const QString& node, const QString& assignment, const QString& state, const QString& paid = {}) {
        QJsonObject body { { QStringLiteral("assignment"), assignment }, { QStringLiteral("state"), state },
            { QStringLiteral("detail"), why } };
        if (!paid.isEmpty())
            body.insert(QStringLiteral("paid"), paid);
        notify(Notice::Kind::Verdict, node, body);
    };

    auto transaction = m_db->begin();
    if (!transaction)
        return transaction.error().toError();
    bool reissue = false;
    // The referee checked one checkpoint: a verifier that lied there loses, but the checked result
    // is not proven right by it (a cheater checked by a cheater may be wrong further on). It goes
    // to another verifier.
    const bool recheck = sample && loser == Loser::Verifier;
    if (recheck) {
        if (auto status = execute(*m_db,
                QStringLiteral("INSERT INTO verifications (id, kind, job, round, shard, start_hash, start_blob, accused, "
                               "accused_assignment, accused_result, state, created_at) "
                               "SELECT ?, kind, job, round, shard, start_hash, start_blob, accused, accused_assignment, "
                               "accused_result, 'waiting', ? FROM verifications WHERE id = ?"),
                newCheckId(), now, check.id);
            !status)
            return status;
    } else if (sample && !accusedLost) {
        auto paid = pay(check.accused, QStringLiteral("pay:%1/%2/%3").arg(check.jobId).arg(check.round).arg(check.shard),
            QStringLiteral("shard %1 of round %2, verified").arg(check.shard).arg(check.round));
        if (!paid)
            return paid.error();
        for (const auto& status : {
                 execute(*m_db,
                     QStringLiteral("UPDATE shard_results SET state = 'verified' WHERE job = ? AND round = ? AND shard = ?"),
                     check.jobId, check.round, check.shard),
                 execute(*m_db, QStringLiteral("UPDATE nodes SET verified = verified + 1, streak = streak + 1 WHERE id = ?"),
                     check.accused),
             }) {
            if (!status)
                return status;
        }
        tell(check.accused, check.accusedAssignment, QStringLiteral("verified"));
        tell(check.accused, check.accusedAssignment, QStringLiteral("paid"), paid->toString());
    } else if (sample) {
        if (auto status = execute(*m_db,
                QStringLiteral("DELETE FROM shard_results WHERE job = ? AND round = ? AND shard = ? AND state = 'sampled'"),
                check.jobId, check.round, check.shard);
            !status)
            return status;
        reissue = true;
        if (punish) {
            const QString honest = loser == Loser::Accused ? check.verifier : QString();
            if (auto status
                = slash(check.accused, check.jobId, honest, QStringLiteral("slash:%1:%2").arg(check.id, check.accused), why);
                !status)
                return status;
        }
        tell(check.accused, check.accusedAssignment, punish ? QStringLiteral("slashed") : QStringLiteral("rejected"));
    }
    if (!check.verifier.isEmpty()) {
        if (!verifierLost) {
            auto paid = pay(check.verifier, QStringLiteral("verify:%1").arg(check.id),
                QStringLiteral("re-execution of shard %1 of round %2").arg(check.shard).arg(check.round));
            if (!paid)
                return paid.error();
            if (auto status = execute(*m_db,
                    QStringLiteral("UPDATE nodes SET verified = verified + 1, streak = streak + 1 WHERE id = ?"), check.verifier);
                !status)
                return status;
            tell(check.verifier, check.verifierAssignment, QStringLiteral("verified"));
            tell(check.verifier, check.verifierAssignment, QStringLiteral("paid"), paid->toString());
        } else {
            const QString honest = loser == Loser::Verifier ? check.accused : QString();
            if (auto status
                = slash(check.verifier, check.jobId, honest, QStringLiteral("slash:%1:%2").arg(check.id, check.verifier), why);
                !status)
                return status;
            tell(check.verifier, check.verifierAssignment, QStringLiteral("slashed"));
        }
    }
    static const char* const Losers[] = { "none", "accused", "verifier", "both" };
    const QString decided = recheck ? QStringLiteral("closed")
        : accusedLost && sample     ? QStringLiteral("rejected")
                                    : QStringLiteral("verified");
    if (auto status = execute(*m_db,
            QStringLiteral("UPDATE verifications SET state = ?, outcome = ?, detail = ?, decided_at = ?, verifier_result = "
                           "COALESCE(NULLIF(?, ''), verifier_result), checkpoint = NULLIF(?, -1) WHERE id = ?"),
            decided, QString::fromLatin1(Losers[int(loser)]), why, now,
            check.verifierResult ? jsonText(check.verifierResult->toJson()) : QString(), check.checkpoint, check.id);
        !status)
        return status;
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    check.state = decided;
    qCInfo(lcVerification).noquote() << "check" << check.id << "of" << check.jobId << "round" << check.round << "shard"
                                     << check.shard << ":" << check.state << "(" << Losers[int(loser)] << "lost )" << why;

    if (!sample)
        return {};
    auto* running = runningState(check.jobId);
    if (!running || running->round != check.round)
        return {};
    if (reissue) {
        running->done[std::size_t(check.shard)] = false;
        running->reissue.push_back(check.shard);
        return {};
    }
    if (recheck)
        return {};
    return finishRoundIfComplete(check.jobId, *spec, check.round);
}

Status Broker::selfVerify(Check& check)
{
    // No node with the same runtime profile came to re-execute the sample in time: the broker
    // re-executes the whole shard itself (it is the referee, so its answer decides).
    auto task = taskOf(check);
    if (!task)
        return task.error();
    auto start = m_blobs->read(check.startBlob);
    if (!start)
        return start.error();
    auto replay = m_math.replay(*task, 0, *start, check.startHash, task->checkpointCount() - 1);
    if (!replay)
        return settle(
            check, Loser::Accused, QStringLiteral("the broker could not re-execute it: %1").arg(replay.error().message), false);
    const auto& a = check.accusedResult;
    if (replay->runtimeProfile == a.runtimeProfile) {
        QList<Digest> chain { check.startHash };
        chain.append(replay->checkpoints);
        if (chain == a.checkpointHashes && replay->weightsHash == a.finalHash)
            return settle(check, Loser::None, QStringLiteral("the broker re-executed it and got the same bits"));
        return settle(check, Loser::Accused, QStringLiteral("the broker re-executed it and got other bits"));
    }
    auto weights = m_blobs->read(a.weightsSha256);
    if (!weights)
        return settle(check, Loser::Accused, QStringLiteral("the weights to compare are gone"), false);
    auto distance = m_math.distance(*weights, replay->weights);
    if (distance && *distance <= m_options.crossProfileTolerance)
        return settle(check, Loser::None,
            QStringLiteral("the broker re-executed it on another runtime profile: distance %1").arg(*distance), false);
    return settle(check, Loser::Accused,
        QStringLiteral("the broker re-executed it on another runtime profile and disagrees; trained again"), false);
}

bool Broker::anyVerifierOnline(const Check& check)
{
    auto spec = specOf(check.jobId);
    if (!spec)
        return true; // cannot tell: wait the full time
    const auto profile = profileWithoutThreads(check.accusedResult.runtimeProfile);
    for (const auto& node : std::as_const(m_nodes)) {
        if (node.nodeId == check.accused || profileWithoutThreads(node.runtimeProfile) != profile
            || node.maxThreads < spec->training.threads)
            continue;
        if (m_options.minStake.micro() > 0) {
            auto staked = m_ledger->balance(ledger::accounts::stake(node.nodeId));
            if (!staked || *staked < m_options.minStake)
                continue;
        }
        return true;
    }
    return false;
}

void Broker::tick()
{
    const auto now = m_clock.nowMs();
    // Disputes whose checkpoint state never came: everyone still asked timed out, and loses.
    if (auto late = ids(*m_db, QStringLiteral("SELECT id FROM verifications WHERE state = 'disputed' AND deadline < ?"), now)) {
        for (const auto& id : *late) {
            auto check = loadCheck(*m_db, id);
            if (!check || !*check)
                continue;
            for (const auto& node : (*check)->asked)
                (void)execute(*m_db, QStringLiteral("UPDATE nodes SET timeouts = timeouts + 1 WHERE id = ?"), node);
            // No usable state came (one would have settled it): every side that was asked loses,
            // also one that answered with a state the referee could not use.
            const Loser loser = (*check)->accused.isEmpty() ? Loser::Verifier : Loser::Both;
            if (auto status = settle(**check, loser, QStringLiteral("the checkpoint state did not come in time")); !status)
                qCWarning(lcVerification).noquote() << status.error().toString();
        }
    }
    // Re-executions past their deadline go back to the queue.
    if (auto late = query(*m_db,
            QStringLiteral(
                "SELECT id, verification FROM assignments WHERE kind <> 'train' AND state = 'active' AND deadline < ?"),
            now)) {
        const auto expired = storage::collect(*late, [](storage::Statement& row) {
            return std::pair { row.columnText(0), row.columnText(1) };
        });
        for (const auto& [assignment, verification] : expired.value_or({})) {
            (void)execute(*m_db, QStringLiteral("UPDATE assignments SET state = 'expired' WHERE id = ?"), assignment);
            (void)requeueChecks(QStringLiteral("id"), verification);
        }
    }
    // Samples nobody could check: the broker re-executes them, after Options::selfVerifyAfterMs, or at
    // once when no connected node could check them at all (a broker with a single node).
    if (m_options.selfVerifyAfterMs >= 0) {
        const bool early = m_options.selfVerifyAloneAfterMs >= 0 && now - m_openedAtMs >= m_options.selfVerifyAloneAfterMs;
        const auto soonest = early ? 0 : m_options.selfVerifyAfterMs;
        auto rows = query(*m_db,
            QStringLiteral("SELECT id, created_at FROM verifications WHERE state = 'waiting' AND kind = 'sample' AND "
                           "created_at <= ?"),
            now - soonest);
        const auto stuck = rows ? storage::collect(*rows,
                               [](storage::Statement& row) {
                                   return std::pair { row.columnText(0), row.columnInt(1) };
                               })
                                : Result<QList<std::pair<QString, std::int64_t>>>(rows.error());
        for (const auto& [id, createdAt] : stuck.value_or({})) {
            auto check = loadCheck(*m_db, id);
            if (!check || !*check || !runningState((*check)->jobId))
                continue;
            const bool due = createdAt <= now - m_options.selfVerifyAfterMs;
            if (!due && anyVerifierOnline(**check))
                continue;
            if (auto status = selfVerify(**check); !status)
                qCWarning(lcVerification).noquote() << status.error().toString();
        }
    }
    // Unbonded stake that has waited long enough returns to the node's balance.
    if (auto due = query(*m_db,
            QStringLiteral("SELECT id, node, amount FROM unbonding WHERE released = 0 AND release_at <= ? ORDER BY id"), now)) {
        const auto rows = storage::collect(*due, [](storage::Statement& row) {
            return std::tuple { row.columnInt(0), row.columnText(1), row.columnInt(2) };
        });
        for (const auto& [id, node, amount] : rows.value_or({})) {
            auto transaction = m_db->begin();
            if (!transaction)
                return;
            auto held = m_ledger->balance(ledger::accounts::unbonding(node));
            const auto release = std::min(Credits::fromMicro(amount), held ? *held : Credits {});
            if (release.micro() > 0) {
                auto moved = m_ledger->transfer(ledger::accounts::unbonding(node), ledger::accounts::balance(node), release,
                    QStringLiteral("unbonded:%1").arg(id), QStringLiteral("stake unbonded"), now);
                if (!moved)
                    continue; // rolls back
            }
            if (!execute(*m_db, QStringLiteral("UPDATE unbonding SET released = 1 WHERE id = ?"), id))
                continue;
            (void)transaction->commit();
        }
    }
}

Status Broker::settleJobChecks(const QString& jobId)
{
    // Inside the caller's transaction: the job ended (finished, cancelled, failed). Checks still
    // open are called off; a sampled result nobody proved wrong is paid.
    const auto price = priceOf(jobId);
    auto open
        = query(*m_db, QStringLiteral("SELECT round, shard, node FROM shard_results WHERE job = ? AND state = 'sampled'"), jobId);
    if (!open)
        return open.error();
    const auto unpaid = storage::collect(*open, [](storage::Statement& row) {
        return std::tuple { row.columnInt(0), row.columnInt(1), row.columnText(2) };
    });
    if (!unpaid)
        return unpaid.error();
    for (const auto& [round, shard, node] : *unpaid) {
        auto escrow = m_ledger->balance(ledger::accounts::escrow(jobId));
        if (!escrow)
            return escrow.error();
        const auto amount = std::min(price, *escrow);
        if (amount.micro() > 0) {
            auto paid = m_ledger->transfer(ledger::accounts::escrow(jobId), ledger::accounts::balance(node), amount,
                QStringLiteral("pay:%1/%2/%3").arg(jobId).arg(round).arg(shard),
                QStringLiteral("shard %1 of round %2 (its check was called off)").arg(shard).arg(round), m_clock.nowMs());
            if (!paid)
                return paid.error();
        }
    }
    if (auto status = execute(
            *m_db, QStringLiteral("UPDATE shard_results SET state = 'accepted' WHERE job = ? AND state = 'sampled'"), jobId);
        !status)
        return status;
    return execute(*m_db,
        QStringLiteral("UPDATE verifications SET state = 'cancelled', decided_at = ? WHERE job = ? AND state IN ('waiting', "
                       "'running', 'disputed')"),
        m_clock.nowMs(), jobId);
}

Result<QList<QJsonObject>> Broker::verifications(const QString& jobId, int limit)
{
    auto rows = query(*m_db,
        QStringLiteral("SELECT id, kind, job, round, shard, COALESCE(accused, ''), COALESCE(verifier, ''), state, "
                       "COALESCE(checkpoint, -1), outcome, detail, created_at, COALESCE(decided_at, 0) FROM verifications "
                       "WHERE ? = '' OR job = ? ORDER BY created_at DESC, rowid DESC LIMIT ?"),
        jobId, jobId, std::int64_t(limit));
    if (!rows)
        return rows.error();
    return storage::collect(*rows, [](storage::Statement& r) {
        QJsonObject row { { QStringLiteral("id"), r.columnText(0) }, { QStringLiteral("kind"), r.columnText(1) },
            { QStringLiteral("jobId"), r.columnText(2) }, { QStringLiteral("round"), static_cast<qint64>(r.columnInt(3)) },
            { QStringLiteral("shard"), static_cast<qint64>(r.columnInt(4)) }, { QStringLiteral("checked"), r.columnText(5) },
            { QStringLiteral("verifier"), r.columnText(6) }, { QStringLiteral("state"), r.columnText(7) },
            { QStringLiteral("outcome"), r.columnText(9) }, { QStringLiteral("detail"), r.columnText(10) } };
        if (r.columnInt(8) >= 0)
            row.insert(QStringLiteral("checkpoint"), static_cast<qint64>(r.columnInt(8)));
        return row;
    });
}

Result<QJsonObject> Broker::stake(const QJsonObject& signedRequest)
{
    if (auto status = verifyDocument(signedRequest); !status)
        return Error { QStringLiteral("request.") + status.error().field, status.error().message };
    JsonReader reader(signedRequest, QStringLiteral("request"));
    const QString kind = reader.string(u"kind");
    const QString nodeId = reader.string(u"node");
    const QString action = reader.string(u"action");
    const QString amountText = reader.string(u"amount");
    const QString nonce = reader.string(u"nonce");
    if (!reader.ok())
        return reader.status().error();
    if (kind != u"tessera-stake")
        return Error { QStringLiteral("request.kind"), QStringLiteral("must be tessera-stake") };
    if (action != u"bond" && action != u"unbond")
        return Error { QStringLiteral("request.action"), QStringLiteral("must be bond or unbond") };
    auto amount = Credits::parse(amountText);
    if (!amount || amount->micro() <= 0)
        return Error { QStringLiteral("request.amount"), QStringLiteral("must be a positive amount of credits") };
    auto info = query(*m_db, QStringLiteral("SELECT info FROM nodes WHERE id = ?"), nodeId);
    if (!info)
        return info.error();
    auto infoRow = fetch(*info);
    if (!infoRow)
        return infoRow.error();
    if (!*infoRow)
        return Error { QStringLiteral("request.node"), QStringLiteral("no node %1 has registered here").arg(nodeId) };
    const auto signingKey
        = QJsonDocument::fromJson(info->columnText(0).toUtf8()).object().value(QStringLiteral("signingKey")).toString();
    if (signingKey.isEmpty() || signedRequest.value(QStringLiteral("signer")).toString() != signingKey)
        return Error { QStringLiteral("request.signer"), QStringLiteral("the request is not signed with the node's key") };

    const auto now = m_clock.nowMs();
    const QString cause = QStringLiteral("%1:%2:%3").arg(action, nodeId, nonce);
    auto transaction = m_db->begin();
    if (!transaction)
        return transaction.error().toError();
    auto already = m_ledger->hasCause(cause);
    if (!already)
        return already.error();
    if (!*already) {
        if (action == u"bond") {
            auto moved = m_ledger->transfer(ledger::accounts::balance(nodeId), ledger::accounts::stake(nodeId), *amount, cause,
                QStringLiteral("stake bonded"), now);
            if (!moved)
                return Error { QStringLiteral("request.amount"), moved.error().message };
        } else {
            auto moved = m_ledger->transfer(ledger::accounts::stake(nodeId), ledger::accounts::unbonding(nodeId), *amount, cause,
                QStringLiteral("stake unbonding until %1").arg(now + m_options.unbondingDelayMs), now);
            if (!moved)
                return Error { QStringLiteral("request.amount"), moved.error().message };
            if (auto status = execute(*m_db, QStringLiteral("INSERT INTO unbonding (node, amount, release_at) VALUES (?, ?, ?)"),
                    nodeId, amount->micro(), now + m_options.unbondingDelayMs);
                !status)
                return status.error();
        }
    }
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    auto account = this->account(nodeId);
    if (!account)
        return account.error();
    auto unbonding = m_ledger->balance(ledger::accounts::unbonding(nodeId));
    if (unbonding)
        account->insert(QStringLiteral("unbonding"), unbonding->toString());
    return account;
}

} // namespace tessera::core::broker
