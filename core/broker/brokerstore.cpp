#include "brokerstore.h"

#include "../ledger/ledgerlog.h"

#include <QCryptographicHash>
#include <QJsonArray>
#include <QJsonDocument>

namespace tessera::core::broker {

using storage::collect;
using storage::execute;
using storage::fetch;
using storage::query;
using storage::Statement;

namespace {

// The first column of every row, as text.
Result<QStringList> texts(Result<Statement> rows)
{
    if (!rows)
        return rows.error();
    auto values = collect(*rows, [](Statement& row) { return row.columnText(0); });
    if (!values)
        return values.error();
    return QStringList(*values);
}

QString jsonText(const QJsonObject& object)
{
    return QString::fromUtf8(QJsonDocument(object).toJson(QJsonDocument::Compact));
}

QJsonObject jsonObject(const QString& text)
{
    return QJsonDocument::fromJson(text.toUtf8()).object();
}

Digest digestOr(const QString& hex)
{
    auto digest = Digest::fromHex(hex);
    return digest ? *digest : Digest {};
}

// Each table's columns, named once: the SELECT list and the index of each column in it.
namespace jobs {
const QString Columns = QStringLiteral(
    "id, spec, state, round, weights_hash, weights_blob, outer_state_blob, failure, owner, price_per_shard, created_at, "
    "COALESCE(change_blob, ''), COALESCE(change_base_blob, '')");
enum Column {
    Id,
    Spec,
    State,
    Round,
    WeightsHash,
    WeightsBlob,
    OuterStateBlob,
    Failure,
    Owner,
    PricePerShard,
    CreatedAt,
    ChangeBlob,
    ChangeBase
};
} // namespace jobs

namespace rounds {
const QString Columns
    = QStringLiteral("round, test_loss, test_accuracy, train_loss, weights_hash, weights_blob, finished_at, evaluated");
enum Column { Round, TestLoss, TestAccuracy, TrainLoss, WeightsHash, WeightsBlob, FinishedAt, Evaluated };
} // namespace rounds

namespace results {
const QString Columns = QStringLiteral("round, shard, node, result, state, COALESCE(assignment, ''), COALESCE(update_norm, -1)");
enum Column { Round, Shard, Node, Result, State, Assignment, UpdateNorm };
} // namespace results

namespace assignments {
const QString Columns
    = QStringLiteral("id, job, round, shard, node, issued_at, deadline, state, kind, COALESCE(verification, '')");
enum Column { Id, Job, Round, Shard, Node, IssuedAt, Deadline, State, Kind, Check };
} // namespace assignments

namespace nodes {
const QString Columns = QStringLiteral(
    "id, info, first_seen, last_seen, shards_done, shards_failed, verified, disputes_lost, timeouts, slashed, streak");
enum Column { Id, Info, FirstSeen, LastSeen, ShardsDone, ShardsFailed, Verified, DisputesLost, Timeouts, Slashed, Streak };
} // namespace nodes

namespace checks {
const QString Columns = QStringLiteral(
    "id, kind, job, round, shard, start_hash, start_blob, COALESCE(accused, ''), COALESCE(accused_assignment, ''), "
    "accused_result, COALESCE(verifier, ''), COALESCE(verifier_assignment, ''), COALESCE(verifier_result, ''), state, "
    "COALESCE(checkpoint, -1), COALESCE(deadline, 0), asked, outcome, detail, COALESCE(narrowing, ''), COALESCE(inputs, '')");
enum Column {
    Id,
    Kind,
    Job,
    Round,
    Shard,
    StartHash,
    StartBlob,
    Accused,
    AccusedAssignment,
    AccusedResult,
    Verifier,
    VerifierAssignment,
    VerifierResult,
    State,
    Checkpoint,
    Deadline,
    Asked,
    Outcome,
    Detail,
    NarrowingColumn,
    Inputs
};
} // namespace checks

JobRow readJob(Statement& row)
{
    JobRow job;
    job.id = row.columnText(jobs::Id);
    job.specJson = jsonObject(row.columnText(jobs::Spec));
    job.state = fromName<JobState>(row.columnText(jobs::State)).value_or(JobState::Failed);
    job.round = row.columnInt(jobs::Round);
    job.weightsHash = digestOr(row.columnText(jobs::WeightsHash));
    job.weightsBlob = digestOr(row.columnText(jobs::WeightsBlob));
    if (!row.columnIsNull(jobs::OuterStateBlob))
        job.outerStateBlob = digestOr(row.columnText(jobs::OuterStateBlob));
    job.failure = row.columnIsNull(jobs::Failure) ? QString() : row.columnText(jobs::Failure);
    job.owner = row.columnText(jobs::Owner);
    job.pricePerShard = Credits::fromMicro(row.columnInt(jobs::PricePerShard));
    job.createdAt = row.columnInt(jobs::CreatedAt);
    const auto changeBlob = Digest::fromHex(row.columnText(jobs::ChangeBlob));
    const auto changeBase = Digest::fromHex(row.columnText(jobs::ChangeBase));
    if (changeBlob && changeBase)
        job.change = WeightsChange { *changeBlob, *changeBase };
    return job;
}

RoundRecord readRound(Statement& row)
{
    RoundRecord record;
    record.round = row.columnInt(rounds::Round);
    record.testLoss = row.columnDouble(rounds::TestLoss);
    record.testAccuracy = row.columnDouble(rounds::TestAccuracy);
    record.trainLoss = row.columnDouble(rounds::TrainLoss);
    record.weightsHash = digestOr(row.columnText(rounds::WeightsHash));
    record.weightsBlob = digestOr(row.columnText(rounds::WeightsBlob));
    record.finishedAt = row.columnInt(rounds::FinishedAt);
    record.evaluated = row.columnInt(rounds::Evaluated) != 0;
    return record;
}

ShardResultRow readResult(Statement& row)
{
    ShardResultRow result;
    result.round = row.columnInt(results::Round);
    result.shard = row.columnInt(results::Shard);
    result.node = row.columnText(results::Node);
    result.resultJson = jsonObject(row.columnText(results::Result));
    result.state = fromName<ResultState>(row.columnText(results::State)).value_or(ResultState::Accepted);
    result.assignment = row.columnText(results::Assignment);
    result.updateNorm = row.columnDouble(results::UpdateNorm);
    return result;
}

AssignmentRow readAssignment(Statement& row)
{
    AssignmentRow assignment;
    assignment.id = row.columnText(assignments::Id);
    assignment.jobId = row.columnText(assignments::Job);
    assignment.round = row.columnInt(assignments::Round);
    assignment.shard = row.columnInt(assignments::Shard);
    assignment.node = row.columnText(assignments::Node);
    assignment.issuedAt = row.columnInt(assignments::IssuedAt);
    assignment.deadline = row.columnInt(assignments::Deadline);
    assignment.state = fromName<AssignmentState>(row.columnText(assignments::State)).value_or(AssignmentState::Expired);
    assignment.kind = fromName<AssignmentKind>(row.columnText(assignments::Kind)).value_or(AssignmentKind::Train);
    assignment.check = row.columnText(assignments::Check);
    return assignment;
}

NodeRow readNode(Statement& row)
{
    NodeRow node;
    node.id = row.columnText(nodes::Id);
    node.info = jsonObject(row.columnText(nodes::Info));
    node.firstSeen = row.columnInt(nodes::FirstSeen);
    node.lastSeen = row.columnInt(nodes::LastSeen);
    node.shardsDone = row.columnInt(nodes::ShardsDone);
    node.shardsFailed = row.columnInt(nodes::ShardsFailed);
    node.verified = row.columnInt(nodes::Verified);
    node.disputesLost = row.columnInt(nodes::DisputesLost);
    node.timeouts = row.columnInt(nodes::Timeouts);
    node.slashed = Credits::fromMicro(row.columnInt(nodes::Slashed));
    node.streak = row.columnInt(nodes::Streak);
    return node;
}

} // namespace

QJsonObject Narrowing::toJson() const
{
    QJsonObject json { { QStringLiteral("stage"),
        stage == Stage::Operands ? QStringLiteral("operands") : QStringLiteral("traces") } };
    if (!accusedTrace.isNull())
        json.insert(QStringLiteral("accusedTrace"), accusedTrace.toHex());
    if (!verifierTrace.isNull())
        json.insert(QStringLiteral("verifierTrace"), verifierTrace.toHex());
    if (stage == Stage::Operands) {
        json.insert(QStringLiteral("step"), static_cast<qint64>(step));
        json.insert(QStringLiteral("instruction"), static_cast<qint64>(instruction));
        json.insert(QStringLiteral("instructionName"), instructionName);
    }
    return json;
}

Narrowing Narrowing::fromJson(const QJsonObject& json)
{
    Narrowing narrowing;
    const auto stage = json.value(QStringLiteral("stage")).toString();
    if (stage.isEmpty())
        return narrowing;
    narrowing.stage = stage == QLatin1String("operands") ? Stage::Operands : Stage::Traces;
    narrowing.accusedTrace = digestOr(json.value(QStringLiteral("accusedTrace")).toString());
    narrowing.verifierTrace = digestOr(json.value(QStringLiteral("verifierTrace")).toString());
    narrowing.step = json.value(QStringLiteral("step")).toInteger();
    narrowing.instruction = json.value(QStringLiteral("instruction")).toInteger(-1);
    narrowing.instructionName = json.value(QStringLiteral("instructionName")).toString();
    return narrowing;
}

namespace {

Result<Check> readCheck(Statement& row)
{
    Check check;
    check.id = row.columnText(checks::Id);
    check.kind = fromName<CheckKind>(row.columnText(checks::Kind)).value_or(CheckKind::Sample);
    check.jobId = row.columnText(checks::Job);
    check.round = row.columnInt(checks::Round);
    check.shard = row.columnInt(checks::Shard);
    check.startHash = digestOr(row.columnText(checks::StartHash));
    check.startBlob = digestOr(row.columnText(checks::StartBlob));
    check.accused = row.columnText(checks::Accused);
    check.accusedAssignment = row.columnText(checks::AccusedAssignment);
    auto accused = ShardResult::fromJson(jsonObject(row.columnText(checks::AccusedResult)));
    if (!accused)
        return accused.error();
    check.accusedResult = *accused;
    check.verifier = row.columnText(checks::Verifier);
    check.verifierAssignment = row.columnText(checks::VerifierAssignment);
    if (const QString text = row.columnText(checks::VerifierResult); !text.isEmpty()) {
        auto verifier = ShardResult::fromJson(jsonObject(text));
        if (!verifier)
            return verifier.error();
        check.verifierResult = *verifier;
    }
    check.state = fromName<CheckState>(row.columnText(checks::State)).value_or(CheckState::Cancelled);
    check.checkpoint = row.columnInt(checks::Checkpoint);
    check.deadline = row.columnInt(checks::Deadline);
    for (const auto& value : QJsonDocument::fromJson(row.columnText(checks::Asked).toUtf8()).array())
        check.asked.append(value.toString());
    check.narrowing = Narrowing::fromJson(jsonObject(row.columnText(checks::NarrowingColumn)));
    check.inputs = digestOr(row.columnText(checks::Inputs));
    return check;
}

CheckRecord readCheckRecord(Statement& row)
{
    CheckRecord record;
    record.id = row.columnText(checks::Id);
    record.kind = row.columnText(checks::Kind);
    record.jobId = row.columnText(checks::Job);
    record.round = row.columnInt(checks::Round);
    record.shard = row.columnInt(checks::Shard);
    record.checked = row.columnText(checks::Accused);
    record.verifier = row.columnText(checks::Verifier);
    record.state = row.columnText(checks::State);
    record.checkpoint = row.columnInt(checks::Checkpoint);
    record.outcome = row.columnText(checks::Outcome);
    record.detail = row.columnText(checks::Detail);
    return record;
}

// Reads the rows of a check query; rows that do not parse are skipped (they cannot be acted on).
Result<QList<Check>> collectChecks(Result<Statement> rows)
{
    if (!rows)
        return rows.error();
    return collect(*rows, [](Statement& row) -> std::optional<Check> {
        auto check = readCheck(row);
        return check ? std::optional<Check>(*check) : std::nullopt;
    });
}

template<typename Row, typename Read> Result<std::optional<Row>> first(Result<Statement> rows, Read read)
{
    if (!rows)
        return rows.error();
    auto found = fetch(*rows);
    if (!found)
        return found.error();
    if (!*found)
        return std::optional<Row> {};
    return std::optional<Row>(read(*rows));
}

} // namespace

BrokerStore::BrokerStore(std::unique_ptr<storage::Database> database)
    : m_db(std::move(database))
{ }

Result<storage::Transaction> BrokerStore::begin()
{
    auto transaction = m_db->begin();
    if (!transaction)
        return transaction.error().toError();
    if (!m_holder.isEmpty()) {
        // Leases deleted in a transaction since: gone if it committed, still this broker's if not.
        for (const auto& scope : std::exchange(m_dropping, {})) {
            auto row = lease(scope);
            if (!row)
                return row.error();
            if (!*row || (*row)->holder != m_holder)
                m_held.remove(scope);
        }
        // Under the writer lock, which takeLease holds too: no other broker takes a lease of this
        // one's between this check and the commit, and one that took it before is seen here. The
        // (scope, generation) pairs naming this broker must be what it knows it holds: a lease
        // taken by another broker leaves them, one taken back since comes with a new generation,
        // and one that lapsed unused changes nothing (nobody worked on it). PostgreSQL only (no
        // broker on SQLite shares its file).
        auto held
            = first<QByteArray>(query(*m_db,
                                    QStringLiteral("SELECT md5(COALESCE(string_agg(scope || ' ' || generation, ',' "
                                                   "ORDER BY scope COLLATE \"C\"), '')) FROM broker_leases WHERE holder = ?"),
                                    m_holder),
                [](Statement& row) { return row.columnText(0).toLatin1(); });
        if (!held)
            return held.error();
        if (!*held || **held != heldDigest())
            return Error { QStringLiteral("standby"),
                QStringLiteral("another broker of the network took over work this broker held; nothing was written") };
    }
    return std::move(*transaction);
}

QByteArray BrokerStore::heldDigest() const
{
    // The query's text: the scopes in byte order (COLLATE "C" there), each with its generation.
    QStringList scopes = m_held.keys();
    std::sort(scopes.begin(), scopes.end());
    QStringList pairs;
    for (const auto& scope : scopes)
        pairs.append(scope + QLatin1Char(' ') + QString::number(m_held.value(scope)));
    return QCryptographicHash::hash(pairs.join(QLatin1Char(',')).toUtf8(), QCryptographicHash::Md5).toHex();
}

Result<std::optional<storage::Transaction>> BrokerStore::unlessInTransaction(Fenced fenced)
{
    if (m_db->inTransaction())
        return std::optional<storage::Transaction> {};
    if (fenced == Fenced::Yes) {
        auto transaction = begin();
        if (!transaction)
            return transaction.error();
        return std::optional<storage::Transaction>(std::move(*transaction));
    }
    auto transaction = m_db->begin();
    if (!transaction)
        return transaction.error().toError();
    return std::optional<storage::Transaction>(std::move(*transaction));
}

Status BrokerStore::holdLeasesAs(const QString& holder)
{
    if (holder.size() != 32 || QByteArray::fromHex(holder.toLatin1()).toHex() != holder.toLatin1())
        return Error { QStringLiteral("broker.id"), QStringLiteral("not a broker id (32 hex digits)") };
    m_holder = holder;
    m_held.clear();
    return {};
}

QString BrokerStore::heldJobs(const char* jobColumn) const
{
    // The holder is 32 hex digits (holdLeasesAs): written into the text, one statement a broker.
    if (m_holder.isEmpty())
        return {};
    return QStringLiteral(" AND EXISTS (SELECT 1 FROM broker_leases l WHERE l.scope = '%1' || %2 AND l.holder = '%3')")
        .arg(JobScopePrefix, QLatin1String(jobColumn), m_holder);
}

// --- jobs ----------------------------------------------------------------------------------------

Status BrokerStore::insertJob(const JobRow& job)
{
    return execute(*m_db,
        QStringLiteral("INSERT INTO jobs (id, spec, state, round, weights_hash, weights_blob, created_at, owner, "
                       "price_per_shard, request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''))"),
        job.id, jsonText(job.specJson), nameOf(job.state), job.round, job.weightsHash.toHex(), job.weightsBlob.toHex(),
        job.createdAt, job.owner, job.pricePerShard.micro(), job.requestId.isNull() ? QStringLiteral("") : job.requestId);
}

Result<std::optional<JobRow>> BrokerStore::jobOfRequest(const QString& owner, const QString& requestId)
{
    return first<JobRow>(query(*m_db, QStringLiteral("SELECT %1 FROM jobs WHERE owner = ? AND request_id = ?").arg(jobs::Columns),
                             owner, requestId),
        readJob);
}

Result<std::optional<JobRow>> BrokerStore::job(const QString& id)
{
    return first<JobRow>(query(*m_db, QStringLiteral("SELECT %1 FROM jobs WHERE id = ?").arg(jobs::Columns), id), readJob);
}

Result<JobRow> BrokerStore::existingJob(const QString& id)
{
    auto row = job(id);
    if (!row)
        return row.error();
    if (!*row)
        return Error { QStringLiteral("jobId"), QStringLiteral("no job %1").arg(id) };
    return **row;
}

Result<QList<JobRow>> BrokerStore::jobs()
{
    auto rows = query(*m_db, QStringLiteral("SELECT %1 FROM jobs ORDER BY created_at, id").arg(jobs::Columns));
    if (!rows)
        return rows.error();
    return collect(*rows, readJob);
}

Result<QList<JobRow>> BrokerStore::runningJobs()
{
    auto rows = query(*m_db, QStringLiteral("SELECT %1 FROM jobs WHERE state = ? ORDER BY created_at, id").arg(jobs::Columns),
        nameOf(JobState::Running));
    if (!rows)
        return rows.error();
    return collect(*rows, readJob);
}

Result<std::int64_t> BrokerStore::runningJobsOf(const QString& owner)
{
    auto count = first<std::int64_t>(
        query(*m_db, QStringLiteral("SELECT COUNT(*) FROM jobs WHERE owner = ? AND state = ?"), owner, nameOf(JobState::Running)),
        [](Statement& row) { return row.columnInt(0); });
    if (!count)
        return count.error();
    return count->value_or(0);
}

Status BrokerStore::endJob(const QString& id, JobState state, const QString& failure)
{
    return execute(*m_db, QStringLiteral("UPDATE jobs SET state = ?, failure = COALESCE(NULLIF(?, ''), failure) WHERE id = ?"),
        nameOf(state), failure, id);
}

Status BrokerStore::advanceJob(const QString& id, std::int64_t round, const Digest& weightsHash, const Digest& weightsBlob,
    JobState state, const std::optional<Digest>& outerStateBlob, const std::optional<WeightsChange>& change)
{
    return execute(*m_db,
        QStringLiteral("UPDATE jobs SET round = ?, weights_hash = ?, weights_blob = ?, state = ?, "
                       "outer_state_blob = COALESCE(NULLIF(?, ''), outer_state_blob), change_blob = NULLIF(?, ''), "
                       "change_base_blob = NULLIF(?, '') WHERE id = ?"),
        round, weightsHash.toHex(), weightsBlob.toHex(), nameOf(state), outerStateBlob ? outerStateBlob->toHex() : QString(),
        change ? change->blob.toHex() : QString(), change ? change->base.toHex() : QString(), id);
}

Status BrokerStore::insertRound(const QString& jobId, const RoundRecord& round)
{
    return execute(*m_db,
        QStringLiteral("INSERT INTO rounds (job, round, test_loss, test_accuracy, train_loss, weights_hash, weights_blob, "
                       "finished_at, evaluated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
        jobId, round.round, round.testLoss, round.testAccuracy, round.trainLoss, round.weightsHash.toHex(),
        round.weightsBlob.toHex(), round.finishedAt, std::int64_t(round.evaluated ? 1 : 0));
}

Result<QList<RoundRecord>> BrokerStore::rounds(const QString& jobId)
{
    auto rows = query(*m_db, QStringLiteral("SELECT %1 FROM rounds WHERE job = ? ORDER BY round").arg(rounds::Columns), jobId);
    if (!rows)
        return rows.error();
    return collect(*rows, readRound);
}

// --- shard results -------------------------------------------------------------------------------

Status BrokerStore::insertShardResult(const QString& jobId, const ShardResultRow& row)
{
    return execute(*m_db,
        QStringLiteral("INSERT INTO shard_results (job, round, shard, node, result, state, assignment, update_norm) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, NULLIF(?, -1.0))"),
        jobId, row.round, row.shard, row.node, jsonText(row.resultJson), nameOf(row.state), row.assignment, row.updateNorm);
}

Result<bool> BrokerStore::isAnswered(const QString& jobId, std::int64_t round, std::int64_t shard)
{
    auto row = first<bool>(query(*m_db, QStringLiteral("SELECT 1 FROM shard_results WHERE job = ? AND round = ? AND shard = ?"),
                               jobId, round, shard),
        [](Statement&) { return true; });
    if (!row)
        return row.error();
    return row->has_value();
}

Result<QList<ShardResultRow>> BrokerStore::shardResults(const QString& jobId, std::int64_t round)
{
    auto rows = query(*m_db,
        QStringLiteral("SELECT %1 FROM shard_results WHERE job = ? AND round = ? ORDER BY shard").arg(results::Columns), jobId,
        round);
    if (!rows)
        return rows.error();
    return collect(*rows, readResult);
}

Result<std::int64_t> BrokerStore::shardResultCount(const QString& jobId, std::int64_t round)
{
    auto count = first<std::int64_t>(
        query(*m_db, QStringLiteral("SELECT COUNT(*) FROM shard_results WHERE job = ? AND round = ?"), jobId, round),
        [](Statement& row) { return row.columnInt(0); });
    if (!count)
        return count.error();
    return count->value_or(0);
}

Result<QList<ShardResultRow>> BrokerStore::shardResultsIn(const QString& jobId, ResultState state)
{
    auto rows = query(*m_db,
        QStringLiteral("SELECT %1 FROM shard_results WHERE job = ? AND state = ? ORDER BY round, shard").arg(results::Columns),
        jobId, nameOf(state));
    if (!rows)
        return rows.error();
    return collect(*rows, readResult);
}

Status BrokerStore::setResultState(const QString& jobId, std::int64_t round, std::int64_t shard, ResultState state)
{
    return execute(*m_db, QStringLiteral("UPDATE shard_results SET state = ? WHERE job = ? AND round = ? AND shard = ?"),
        nameOf(state), jobId, round, shard);
}

Status BrokerStore::setResultStates(const QString& jobId, ResultState from, ResultState to)
{
    return execute(
        *m_db, QStringLiteral("UPDATE shard_results SET state = ? WHERE job = ? AND state = ?"), nameOf(to), jobId, nameOf(from));
}

Status BrokerStore::dropResult(const QString& jobId, std::int64_t round, std::int64_t shard)
{
    return execute(
        *m_db, QStringLiteral("DELETE FROM shard_results WHERE job = ? AND round = ? AND shard = ?"), jobId, round, shard);
}

Status BrokerStore::dropSampledResult(const QString& jobId, std::int64_t round, std::int64_t shard)
{
    return execute(*m_db, QStringLiteral("DELETE FROM shard_results WHERE job = ? AND round = ? AND shard = ? AND state = ?"),
        jobId, round, shard, nameOf(ResultState::Sampled));
}

// --- assignments ---------------------------------------------------------------------------------

Status BrokerStore::insertAssignment(const AssignmentRow& a, const QList<Digest>& readers)
{
    const QString insert
        = QStringLiteral("INSERT INTO assignments (id, job, round, shard, node, issued_at, deadline, state, kind, verification) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''))");
    if (readers.isEmpty() || m_db->engine() != storage::Engine::PostgreSQL) {
        if (auto status = execute(*m_db, insert, a.id, a.jobId, a.round, a.shard, a.node, a.issuedAt, a.deadline, nameOf(a.state),
                nameOf(a.kind), a.check);
            !status)
            return status;
        return allowRead(readers, a.node);
    }
    // PostgreSQL: a data-modifying WITH runs to completion whatever the main statement reads.
    QStringList rows;
    for (qsizetype i = 0; i < readers.size(); ++i)
        rows.append(QStringLiteral("(?, ?)"));
    auto statement = m_db->prepare(
        QStringLiteral("WITH handed AS (%1) INSERT INTO blob_readers (blob, principal) VALUES %2 ON CONFLICT DO NOTHING")
            .arg(insert, rows.join(u", ")));
    if (!statement)
        return statement.error().toError();
    statement->bind(1, a.id).bind(2, a.jobId).bind(3, a.round).bind(4, a.shard).bind(5, a.node).bind(6, a.issuedAt);
    statement->bind(7, a.deadline).bind(8, nameOf(a.state)).bind(9, nameOf(a.kind)).bind(10, a.check);
    int index = 11;
    for (const auto& blob : readers) {
        statement->bind(index, blob.toHex()).bind(index + 1, a.node);
        index += 2;
    }
    if (auto status = statement->run(); !status)
        return status.error().toError();
    return {};
}

Result<std::optional<AssignmentRow>> BrokerStore::assignment(const QString& id)
{
    return first<AssignmentRow>(
        query(*m_db, QStringLiteral("SELECT %1 FROM assignments WHERE id = ?").arg(assignments::Columns), id), readAssignment);
}

Status BrokerStore::setAssignmentState(const QString& id, AssignmentState to, std::optional<AssignmentState> onlyFrom)
{
    if (onlyFrom)
        return execute(*m_db, QStringLiteral("UPDATE assignments SET state = ? WHERE id = ? AND state = ?"), nameOf(to), id,
            nameOf(*onlyFrom));
    return execute(*m_db, QStringLiteral("UPDATE assignments SET state = ? WHERE id = ?"), nameOf(to), id);
}

Status BrokerStore::expireActiveAssignments(const QString& jobId)
{
    return execute(*m_db, QStringLiteral("UPDATE assignments SET state = ? WHERE state = ? AND (? = '' OR job = ?)"),
        nameOf(AssignmentState::Expired), nameOf(AssignmentState::Active), jobId, jobId);
}

Status BrokerStore::expireActiveAssignmentsOf(const QString& node)
{
    return execute(*m_db,
        QStringLiteral("UPDATE assignments SET state = ? WHERE node = ? AND state = ?") + heldJobs("assignments.job"),
        nameOf(AssignmentState::Expired), node, nameOf(AssignmentState::Active));
}

Status BrokerStore::expireActiveAssignmentsIn(const QString& jobId, std::int64_t round)
{
    return execute(*m_db, QStringLiteral("UPDATE assignments SET state = ? WHERE job = ? AND round = ? AND state = ?"),
        nameOf(AssignmentState::Expired), jobId, round, nameOf(AssignmentState::Active));
}

Result<std::int64_t> BrokerStore::failedAssignments(const QString& jobId, std::int64_t round, std::int64_t shard)
{
    auto count = first<std::int64_t>(
        query(*m_db, QStringLiteral("SELECT COUNT(*) FROM assignments WHERE job = ? AND round = ? AND shard = ? AND state = ?"),
            jobId, round, shard, nameOf(AssignmentState::Failed)),
        [](Statement& row) { return row.columnInt(0); });
    if (!count)
        return count.error();
    return count->value_or(0);
}

Result<QList<std::pair<QString, QString>>> BrokerStore::overdueCheckAssignments(std::int64_t now)
{
    auto rows = query(*m_db,
        QStringLiteral("SELECT id, verification FROM assignments WHERE kind <> ? AND state = ? AND deadline < ?")
            + heldJobs("assignments.job"),
        nameOf(AssignmentKind::Train), nameOf(AssignmentState::Active), now);
    if (!rows)
        return rows.error();
    return collect(*rows, [](Statement& row) { return std::pair { row.columnText(0), row.columnText(1) }; });
}

// --- commitments ---------------------------------------------------------------------------------

Status BrokerStore::insertCommitment(
    const QString& assignment, const QString& node, const CommitmentRow& commitment, const QJsonObject& document, std::int64_t at)
{
    return execute(*m_db,
        QStringLiteral(
            "INSERT INTO commitments (assignment, node, final_hash, chain_root, document, at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(assignment) DO NOTHING"),
        assignment, node, commitment.finalHash.toHex(), commitment.chainRoot.toHex(), jsonText(document), at);
}

Result<std::optional<CommitmentRow>> BrokerStore::commitment(const QString& assignment)
{
    return first<CommitmentRow>(
        query(*m_db, QStringLiteral("SELECT final_hash, chain_root FROM commitments WHERE assignment = ?"), assignment),
        [](Statement& row) {
            return CommitmentRow { digestOr(row.columnText(0)), digestOr(row.columnText(1)) };
        });
}

// --- nodes ---------------------------------------------------------------------------------------

Status BrokerStore::upsertNode(const QString& id, const QJsonObject& info, std::int64_t now)
{
    return execute(*m_db,
        QStringLiteral("INSERT INTO nodes (id, info, first_seen, last_seen) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT(id) DO UPDATE SET info = excluded.info, last_seen = excluded.last_seen"),
        id, jsonText(info), now, now);
}

Result<std::optional<NodeRow>> BrokerStore::node(const QString& id)
{
    return first<NodeRow>(query(*m_db, QStringLiteral("SELECT %1 FROM nodes WHERE id = ?").arg(nodes::Columns), id), readNode);
}

Result<QList<NodeRow>> BrokerStore::nodes()
{
    auto rows = query(*m_db, QStringLiteral("SELECT %1 FROM nodes ORDER BY first_seen, id").arg(nodes::Columns));
    if (!rows)
        return rows.error();
    return collect(*rows, readNode);
}

Status BrokerStore::countShardDone(const QString& node, std::int64_t now, Streak streak)
{
    return execute(*m_db,
        QStringLiteral("UPDATE nodes SET shards_done = shards_done + 1, streak = streak + ?, last_seen = ? WHERE id = ?"),
        std::int64_t(streak == Streak::Grows ? 1 : 0), now, node);
}

Status BrokerStore::countShardFailed(const QString& node)
{
    return execute(*m_db, QStringLiteral("UPDATE nodes SET shards_failed = shards_failed + 1 WHERE id = ?"), node);
}

Result<std::int64_t> BrokerStore::creditRecord(const QString& node, const QString& network, std::int64_t credit, std::int64_t now)
{
    auto own = unlessInTransaction(Fenced::No);
    if (!own)
        return own.error();
    auto earlier
        = query(*m_db, QStringLiteral("SELECT credited FROM node_records WHERE node = ? AND network = ?"), node, network);
    if (!earlier)
        return earlier.error();
    auto found = fetch(*earlier);
    if (!found)
        return found.error();
    if (*found) // presented before: the same answer, nothing moves
        return earlier->columnInt(0);
    earlier->reset();
    if (auto status = execute(*m_db, QStringLiteral("INSERT INTO node_records (node, network, credited, at) VALUES (?, ?, ?, ?)"),
            node, network, credit, now);
        !status)
        return status.error();
    if (auto status
        = execute(*m_db, QStringLiteral("UPDATE nodes SET streak = CASE WHEN streak < ? THEN ? ELSE streak END WHERE id = ?"),
            credit, credit, node);
        !status)
        return status.error();
    if (m_db->changes() != 1) // its own transaction rolls back: the record stays unused
        return Error { QStringLiteral("record"), QStringLiteral("the node has not registered with this broker yet") };
    if (*own) {
        if (auto committed = (*own)->commit(); !committed)
            return committed.error().toError();
    }
    return credit;
}

Status BrokerStore::countVerified(const QString& node)
{
    return execute(*m_db, QStringLiteral("UPDATE nodes SET verified = verified + 1, streak = streak + 1 WHERE id = ?"), node);
}

Status BrokerStore::countTimeout(const QString& node)
{
    return execute(*m_db, QStringLiteral("UPDATE nodes SET timeouts = timeouts + 1 WHERE id = ?"), node);
}

Status BrokerStore::countSlash(const QString& node, Credits amount)
{
    return execute(*m_db,
        QStringLiteral("UPDATE nodes SET slashed = slashed + ?, disputes_lost = disputes_lost + 1, streak = 0 WHERE id = ?"),
        amount.micro(), node);
}

Status BrokerStore::touchNode(const QString& node, std::int64_t now)
{
    return execute(*m_db, QStringLiteral("UPDATE nodes SET last_seen = ? WHERE id = ?"), now, node);
}

// --- checks --------------------------------------------------------------------------------------

Status BrokerStore::insertCheck(const Check& check, std::int64_t createdAt)
{
    m_noneWaiting = false;
    return execute(*m_db,
        QStringLiteral(
            "INSERT INTO checks (id, kind, job, round, shard, start_hash, start_blob, accused, accused_assignment, "
            "accused_result, state, created_at, seq, inputs) VALUES (?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), NULLIF(?, ''), ?, ?, "
            "?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM checks), NULLIF(?, ''))"),
        check.id, nameOf(check.kind), check.jobId, check.round, check.shard, check.startHash.toHex(), check.startBlob.toHex(),
        check.accused, check.accusedAssignment, jsonText(check.accusedResult.toJson()), nameOf(check.state), createdAt,
        check.inputs.isNull() ? QString() : check.inputs.toHex());
}

Result<std::optional<Check>> BrokerStore::check(const QString& id)
{
    auto rows = query(*m_db, QStringLiteral("SELECT %1 FROM checks WHERE id = ?").arg(checks::Columns), id);
    if (!rows)
        return rows.error();
    auto found = fetch(*rows);
    if (!found)
        return found.error();
    if (!*found)
        return std::optional<Check> {};
    auto check = readCheck(*rows);
    if (!check)
        return check.error();
    return std::optional<Check>(*check);
}

Status BrokerStore::saveCheck(const Check& check)
{
    m_noneWaiting = false;
    QJsonArray asked;
    for (const auto& node : check.asked)
        asked.append(node);
    return execute(*m_db,
        QStringLiteral(
            "UPDATE checks SET verifier = NULLIF(?, ''), verifier_assignment = NULLIF(?, ''), "
            "verifier_result = NULLIF(?, ''), state = ?, checkpoint = NULLIF(CAST(? AS BIGINT), -1), deadline = ?, asked = ?, "
            "narrowing = NULLIF(?, '') WHERE id = ?"),
        check.verifier, check.verifierAssignment, check.verifierResult ? jsonText(check.verifierResult->toJson()) : QString(),
        nameOf(check.state), check.checkpoint, check.deadline,
        QString::fromUtf8(QJsonDocument(asked).toJson(QJsonDocument::Compact)),
        check.narrowing.stage == Narrowing::Stage::None ? QString() : jsonText(check.narrowing.toJson()), check.id);
}

Status BrokerStore::decideCheck(const Check& check, CheckState decided, Loser loser, const QString& why, std::int64_t now)
{
    m_noneWaiting = false;
    // The ruling and its entry in the log together: the caller's transaction (the settlement's), or one of its own.
    auto own = unlessInTransaction(Fenced::Yes);
    if (!own)
        return own.error();
    if (auto status = execute(*m_db,
            QStringLiteral("UPDATE checks SET state = ?, outcome = ?, detail = ?, decided_at = ?, verifier_result = "
                           "COALESCE(NULLIF(?, ''), verifier_result), checkpoint = NULLIF(CAST(? AS BIGINT), -1) WHERE id = ?"),
            nameOf(decided), nameOf(loser), why, now, check.verifierResult ? jsonText(check.verifierResult->toJson()) : QString(),
            check.checkpoint, check.id);
        !status)
        return status;
    // The ruling goes to the ledger's log beside the transfers it caused (docs/LEDGER.md, "Entries").
    const QJsonObject entry { { QStringLiteral("kind"), QStringLiteral("verdict") }, { QStringLiteral("check"), check.id },
        { QStringLiteral("checkKind"), nameOf(check.kind) }, { QStringLiteral("job"), check.jobId },
        { QStringLiteral("round"), qint64(check.round) }, { QStringLiteral("shard"), qint64(check.shard) },
        { QStringLiteral("accused"), check.accused }, { QStringLiteral("verifier"), check.verifier },
        { QStringLiteral("state"), nameOf(decided) }, { QStringLiteral("loser"), nameOf(loser) },
        { QStringLiteral("why"), why.left(500) }, { QStringLiteral("at"), qint64(now) } };
    if (auto logged = ledger::LedgerLog(*m_db).append(entry); !logged)
        return logged.error();
    if (*own) {
        if (auto committed = (*own)->commit(); !committed)
            return committed.error().toError();
    }
    return {};
}

Status BrokerStore::requeueRunningChecks(Requeue which, const QString& value)
{
    m_noneWaiting = false;
    static const QString Update = QStringLiteral(
        "UPDATE checks SET state = CASE kind WHEN ? THEN ? ELSE ? END, verifier = NULL, verifier_assignment = NULL "
        "WHERE state = ?");
    const auto canary = nameOf(CheckKind::Canary);
    const auto cancelled = nameOf(CheckState::Cancelled);
    const auto waiting = nameOf(CheckState::Waiting);
    const auto running = nameOf(CheckState::Running);
    switch (which) {
    case Requeue::All:
        return execute(*m_db, Update, canary, cancelled, waiting, running);
    case Requeue::OfVerifier: // of the jobs this broker holds: the node may work for another broker too
        return execute(*m_db, Update + QStringLiteral(" AND verifier = ?") + heldJobs("checks.job"), canary, cancelled, waiting,
            running, value);
    case Requeue::OfVerifierAssignment:
        return execute(
            *m_db, Update + QStringLiteral(" AND verifier_assignment = ?"), canary, cancelled, waiting, running, value);
    case Requeue::OfCheck:
        return execute(*m_db, Update + QStringLiteral(" AND id = ?"), canary, cancelled, waiting, running, value);
    case Requeue::OfJob:
        return execute(*m_db, Update + QStringLiteral(" AND job = ?"), canary, cancelled, waiting, running, value);
    }
    return {};
}

Result<bool> BrokerStore::anyWaitingChecks()
{
    if (m_noneWaiting)
        return false;
    auto row
        = first<bool>(query(*m_db, QStringLiteral("SELECT 1 FROM checks WHERE state = ?%1 LIMIT 1").arg(heldJobs("checks.job")),
                          nameOf(CheckState::Waiting)),
            [](Statement&) { return true; });
    if (!row)
        return row.error();
    m_noneWaiting = !row->has_value();
    return row->has_value();
}

Result<QList<Check>> BrokerStore::waitingChecks(const QString& node, int limit)
{
    return collectChecks(query(*m_db,
        QStringLiteral("SELECT %1 FROM checks WHERE state = ? AND COALESCE(accused, '') <> ? AND ? <> ''%2 "
                       "ORDER BY created_at LIMIT ?")
            .arg(checks::Columns, heldJobs("checks.job")),
        nameOf(CheckState::Waiting), node, node, std::int64_t(limit)));
}

Result<QStringList> BrokerStore::latestVerifiersOf(const QString& accused, int limit)
{
    return texts(query(*m_db,
        QStringLiteral("SELECT verifier FROM checks WHERE accused = ? AND kind = ? AND verifier IS NOT NULL "
                       "ORDER BY created_at DESC LIMIT ?"),
        accused, nameOf(CheckKind::Sample), std::int64_t(limit)));
}

Result<QList<Check>> BrokerStore::verifiedSamples(const QString& node, int limit)
{
    return collectChecks(query(*m_db,
        QStringLiteral("SELECT %1 FROM checks WHERE kind = ? AND state = ? AND accused <> ? AND COALESCE(verifier, '') <> ? "
                       "ORDER BY created_at DESC LIMIT ?")
            .arg(checks::Columns),
        nameOf(CheckKind::Sample), nameOf(CheckState::Verified), node, node, std::int64_t(limit)));
}

Result<QList<Check>> BrokerStore::checksIn(CheckState state, const QString& jobId)
{
    return collectChecks(query(*m_db,
        QStringLiteral("SELECT %1 FROM checks WHERE state = ? AND (? = '' OR job = ?) ORDER BY created_at").arg(checks::Columns),
        nameOf(state), jobId, jobId));
}

Result<QList<Check>> BrokerStore::openChecks(const QString& jobId)
{
    return collectChecks(query(*m_db,
        QStringLiteral("SELECT %1 FROM checks WHERE job = ? AND state IN (?, ?, ?) ORDER BY created_at").arg(checks::Columns),
        jobId, nameOf(CheckState::Waiting), nameOf(CheckState::Running), nameOf(CheckState::Disputed)));
}

Result<QStringList> BrokerStore::lateDisputes(std::int64_t now)
{
    return texts(query(*m_db, QStringLiteral("SELECT id FROM checks WHERE state = ? AND deadline < ?") + heldJobs("checks.job"),
        nameOf(CheckState::Disputed), now));
}

Result<QStringList> BrokerStore::nodesInChecksBlamingJob(const QString& jobId)
{
    return texts(query(*m_db,
        QStringLiteral("SELECT accused FROM checks WHERE job = ? AND outcome = ? AND accused IS NOT NULL "
                       "UNION SELECT verifier FROM checks WHERE job = ? AND outcome = ? AND verifier IS NOT NULL"),
        jobId, nameOf(Loser::Job), jobId, nameOf(Loser::Job)));
}

Result<QList<std::pair<QString, std::int64_t>>> BrokerStore::waitingSamples(std::int64_t createdBefore)
{
    auto rows = query(*m_db,
        QStringLiteral("SELECT id, created_at FROM checks WHERE state = ? AND kind = ? AND created_at <= ?")
            + heldJobs("checks.job"),
        nameOf(CheckState::Waiting), nameOf(CheckKind::Sample), createdBefore);
    if (!rows)
        return rows.error();
    return collect(*rows, [](Statement& row) { return std::pair { row.columnText(0), row.columnInt(1) }; });
}

Status BrokerStore::cancelOpenChecks(const QString& jobId, std::int64_t now)
{
    m_noneWaiting = false;
    return execute(*m_db, QStringLiteral("UPDATE checks SET state = ?, decided_at = ? WHERE job = ? AND state IN (?, ?, ?)"),
        nameOf(CheckState::Cancelled), now, jobId, nameOf(CheckState::Waiting), nameOf(CheckState::Running),
        nameOf(CheckState::Disputed));
}

Result<bool> BrokerStore::inputsInUse(const Digest& inputs)
{
    auto rows = query(*m_db, QStringLiteral("SELECT 1 FROM checks WHERE inputs = ? AND state IN (?, ?, ?) LIMIT 1"),
        inputs.toHex(), nameOf(CheckState::Waiting), nameOf(CheckState::Running), nameOf(CheckState::Disputed));
    if (!rows)
        return rows.error();
    auto found = fetch(*rows);
    if (!found)
        return found.error();
    return *found;
}

Result<QList<CheckRecord>> BrokerStore::checkRecords(const QString& jobId, int limit)
{
    auto rows = query(*m_db,
        QStringLiteral("SELECT %1 FROM checks WHERE ? = '' OR job = ? ORDER BY created_at DESC, seq DESC LIMIT ?")
            .arg(checks::Columns),
        jobId, jobId, std::int64_t(limit));
    if (!rows)
        return rows.error();
    return collect(*rows, readCheckRecord);
}

// --- leases --------------------------------------------------------------------------------------

Result<std::optional<std::int64_t>> BrokerStore::takeLease(const QString& scope, const LeaseRow& wanted, std::int64_t now)
{
    // Under the writer lock (a transaction of its own unless the caller's; not fenced: a take is
    // how this broker learns its leases): a broker's fence check and its commit see the same
    // leases. One statement: two brokers that try at once are ordered by the row's lock, and the
    // second sees the first's lease.
    auto own = unlessInTransaction(Fenced::No);
    if (!own)
        return own.error();
    auto rows = query(*m_db,
        QStringLiteral("INSERT INTO broker_leases (scope, holder, endpoint, expires_at) VALUES (?1, ?2, ?3, ?4) "
                       "ON CONFLICT (scope) DO UPDATE SET holder = excluded.holder, endpoint = excluded.endpoint, "
                       "expires_at = excluded.expires_at, generation = broker_leases.generation "
                       "+ CASE WHEN broker_leases.holder = excluded.holder THEN 0 ELSE 1 END "
                       "WHERE broker_leases.holder = excluded.holder OR broker_leases.expires_at < ?5 "
                       "RETURNING generation"),
        scope, wanted.holder, wanted.endpoint, wanted.expiresAt, now);
    if (!rows)
        return rows.error();
    auto found = fetch(*rows);
    if (!found)
        return found.error();
    const std::optional<std::int64_t> generation = *found ? std::optional<std::int64_t>(rows->columnInt(0)) : std::nullopt;
    rows->reset(); // the statement ends here
    if (*own) {
        if (auto committed = (*own)->commit(); !committed)
            return committed.error().toError();
    }
    if (wanted.holder == m_holder) {
        if (generation)
            m_held.insert(scope, *generation);
        else
            m_held.remove(scope);
    }
    return generation;
}

Status BrokerStore::releaseLease(const QString& scope, const QString& holder)
{
    auto status = execute(*m_db,
        QStringLiteral("UPDATE broker_leases SET holder = '', expires_at = 0 WHERE scope = ? AND holder = ?"), scope, holder);
    if (status && holder == m_holder)
        m_held.remove(scope);
    return status;
}

Status BrokerStore::dropLease(const QString& scope, const QString& holder, Now now)
{
    auto status = execute(*m_db, QStringLiteral("DELETE FROM broker_leases WHERE scope = ? AND holder = ?"), scope, holder);
    if (status && holder == m_holder) {
        if (now == Now::Yes && !m_db->inTransaction())
            m_held.remove(scope);
        else
            m_dropping.insert(scope);
    }
    return status;
}

Result<QHash<QString, std::int64_t>> BrokerStore::renewLeases(
    const QString& prefix, const QString& holder, std::int64_t expiresAt, Learn learn)
{
    auto rows = query(*m_db,
        QStringLiteral("UPDATE broker_leases SET expires_at = ? WHERE holder = ? AND scope LIKE ? RETURNING scope, generation"),
        expiresAt, holder, prefix + QLatin1Char('%')); // prefixes hold no wildcard
    if (!rows)
        return rows.error();
    auto renewed = collect(*rows, [](Statement& row) { return std::pair { row.columnText(0), row.columnInt(1) }; });
    if (!renewed)
        return renewed.error();
    QHash<QString, std::int64_t> held;
    for (const auto& [scope, generation] : *renewed)
        held.insert(scope, generation);
    if (holder == m_holder && learn == Learn::Yes) {
        for (auto it = m_held.begin(); it != m_held.end();)
            it = it.key().startsWith(prefix) && !held.contains(it.key()) ? m_held.erase(it) : std::next(it);
        m_held.insert(held);
    }
    return held;
}

Result<QString> BrokerStore::networkId(const QString& candidate)
{
    auto read = [this] {
        return first<QString>(query(*m_db, QStringLiteral("SELECT id FROM network ORDER BY id LIMIT 1")),
            [](Statement& row) { return row.columnText(0); });
    };
    auto known = read();
    if (!known)
        return known.error();
    if (*known)
        return **known;
    auto transaction = m_db->begin();
    if (!transaction)
        return transaction.error().toError();
    if (auto status
        = execute(*m_db, QStringLiteral("INSERT INTO network (id) SELECT ? WHERE NOT EXISTS (SELECT 1 FROM network)"), candidate);
        !status)
        return status.error();
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    known = read();
    if (!known)
        return known.error();
    if (!*known)
        return Error { QStringLiteral("network"), QStringLiteral("the network's id was not written") };
    return **known;
}

Result<QStringList> BrokerStore::unleasedJobs(std::int64_t now, int limit)
{
    return texts(query(*m_db,
        QStringLiteral("SELECT id FROM jobs WHERE state = ? AND NOT EXISTS (SELECT 1 FROM broker_leases l "
                       "WHERE l.scope = ? || jobs.id AND l.expires_at >= ?) ORDER BY md5(jobs.id || ?) LIMIT ?"),
        nameOf(JobState::Running), JobScopePrefix, now, m_holder, std::int64_t(limit)));
}

Result<std::optional<LeaseRow>> BrokerStore::lease(const QString& scope)
{
    return first<LeaseRow>(
        query(*m_db, QStringLiteral("SELECT holder, endpoint, expires_at, generation FROM broker_leases WHERE scope = ?"), scope),
        [](Statement& row) {
            return LeaseRow { row.columnText(0), row.columnText(1), row.columnInt(2), row.columnInt(3) };
        });
}

// --- blob readers --------------------------------------------------------------------------------

Status BrokerStore::allowRead(const Digest& blob, const QString& principal)
{
    return allowRead(QList<Digest> { blob }, principal);
}

Status BrokerStore::allowRead(const QList<Digest>& blobs, const QString& principal)
{
    if (blobs.isEmpty())
        return {};
    QStringList rows;
    for (qsizetype i = 0; i < blobs.size(); ++i)
        rows.append(QStringLiteral("(?, ?)"));
    auto statement = m_db->prepare(
        QStringLiteral("INSERT INTO blob_readers (blob, principal) VALUES %1 ON CONFLICT DO NOTHING").arg(rows.join(u", ")));
    if (!statement)
        return statement.error().toError();
    int index = 0;
    for (const auto& blob : blobs) {
        statement->bind(index + 1, blob.toHex()).bind(index + 2, principal);
        index += 2;
    }
    if (auto status = statement->run(); !status)
        return status.error().toError();
    return {};
}

Status BrokerStore::allowOwnerToRead(const Digest& blob, const QString& jobId)
{
    return execute(*m_db,
        QStringLiteral(
            "INSERT INTO blob_readers (blob, principal) SELECT ?, owner FROM jobs WHERE id = ? ON CONFLICT DO NOTHING"),
        blob.toHex(), jobId);
}

Result<bool> BrokerStore::mayRead(const QString& principal, const Digest& blob)
{
    auto row = first<bool>(
        query(*m_db, QStringLiteral("SELECT 1 FROM blob_readers WHERE blob = ? AND principal = ?"), blob.toHex(), principal),
        [](Statement&) { return true; });
    if (!row)
        return row.error();
    return row->has_value();
}

Result<QList<Digest>> BrokerStore::uploadsOfRound(const QString& jobId, std::int64_t round)
{
    const QString weights = QStringLiteral("weightsSha256");
    auto rows = query(*m_db,
        QStringLiteral("SELECT %1 FROM shard_results WHERE job = ?1 AND round = ?2 "
                       "UNION SELECT %2 FROM checks WHERE job = ?1 AND round = ?2 AND kind = 'sample' "
                       "UNION SELECT %3 FROM checks "
                       "WHERE job = ?1 AND round = ?2 AND kind = 'sample' AND verifier_result IS NOT NULL")
            .arg(m_db->jsonText(QStringLiteral("result"), weights), m_db->jsonText(QStringLiteral("accused_result"), weights),
                m_db->jsonText(QStringLiteral("verifier_result"), weights)),
        jobId, round);
    if (!rows)
        return rows.error();
    return collect(*rows, [](Statement& row) -> std::optional<Digest> {
        auto digest = Digest::fromHex(row.columnText(0));
        return digest ? std::optional<Digest>(*digest) : std::nullopt;
    });
}

Result<bool> BrokerStore::blobNamed(const Digest& blob)
{
    const QString hex = blob.toHex();
    const QString weights = QStringLiteral("weightsSha256");
    auto row = first<bool>(
        query(*m_db,
            QStringLiteral("SELECT 1 FROM rounds WHERE weights_blob = ?1 AND kept = 1 "
                           "UNION ALL SELECT 1 FROM jobs WHERE weights_blob = ?1 OR outer_state_blob = ?1 OR change_blob = ?1 "
                           "OR spec LIKE '%' || ?1 || '%' " // a hex digest holds no LIKE wildcard
                           // the same bytes uploaded for a round not yet aggregated (another job's
                           // identical shard), or for a check still open
                           "UNION ALL SELECT 1 FROM shard_results s JOIN jobs j ON j.id = s.job "
                           "WHERE s.round >= j.round AND %1 = ?1 "
                           "UNION ALL SELECT 1 FROM checks WHERE state IN ('waiting', 'running', 'disputed') "
                           "AND (start_blob = ?1 OR %2 = ?1 OR %3 = ?1) LIMIT 1")
                .arg(m_db->jsonText(QStringLiteral("s.result"), weights),
                    m_db->jsonText(QStringLiteral("accused_result"), weights),
                    m_db->jsonText(QStringLiteral("verifier_result"), weights)),
            hex),
        [](Statement&) { return true; });
    if (!row)
        return row.error();
    return row->has_value();
}

Result<std::optional<Digest>> BrokerStore::forgetRoundWeights(const QString& jobId, std::int64_t round)
{
    auto blob = first<Digest>(
        query(*m_db, QStringLiteral("SELECT weights_blob FROM rounds WHERE job = ? AND round = ? AND kept = 1"), jobId, round),
        [](Statement& row) -> std::optional<Digest> {
            auto digest = Digest::fromHex(row.columnText(0));
            return digest ? std::optional<Digest>(*digest) : std::nullopt;
        });
    if (!blob)
        return blob.error();
    if (!*blob)
        return std::optional<Digest> {};
    if (auto status = execute(*m_db, QStringLiteral("UPDATE rounds SET kept = 0 WHERE job = ? AND round = ?"), jobId, round);
        !status)
        return status.error();
    return *blob;
}

Status BrokerStore::recordUpload(const UploadRow& upload)
{
    return execute(*m_db,
        QStringLiteral("INSERT INTO uploads (blob, uploader, size, at) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT (blob, uploader) DO UPDATE SET size = excluded.size, at = excluded.at"),
        upload.blob.toHex(), upload.uploader, upload.size, upload.at);
}

Result<std::int64_t> BrokerStore::unnamedUploadBytes(const QString& uploader)
{
    auto row = first<std::int64_t>(
        query(*m_db, QStringLiteral("SELECT COALESCE(SUM(size), 0) FROM uploads WHERE uploader = ?"), uploader),
        [](Statement& statement) { return statement.columnInt(0); });
    if (!row)
        return row.error();
    return row->value_or(0);
}

Result<QList<BrokerStore::UploadRow>> BrokerStore::uploads()
{
    auto rows = query(*m_db, QStringLiteral("SELECT blob, uploader, size, at FROM uploads ORDER BY at"));
    if (!rows)
        return rows.error();
    return collect(*rows, [](Statement& row) -> std::optional<UploadRow> {
        auto digest = Digest::fromHex(row.columnText(0));
        if (!digest)
            return std::nullopt;
        return UploadRow { *digest, row.columnText(1), row.columnInt(2), row.columnInt(3) };
    });
}

Status BrokerStore::forgetUpload(const Digest& blob)
{
    return execute(*m_db, QStringLiteral("DELETE FROM uploads WHERE blob = ?"), blob.toHex());
}

Result<bool> BrokerStore::owns(const QString& principal, const QString& jobId)
{
    auto row = first<bool>(query(*m_db, QStringLiteral("SELECT 1 FROM jobs WHERE id = ? AND owner = ?"), jobId, principal),
        [](Statement&) { return true; });
    if (!row)
        return row.error();
    return row->has_value();
}

// --- unbonding -----------------------------------------------------------------------------------

Status BrokerStore::insertUnbonding(const QString& node, Credits amount, std::int64_t releaseAt)
{
    return execute(*m_db, QStringLiteral("INSERT INTO unbonding (node, amount, release_at) VALUES (?, ?, ?)"), node,
        amount.micro(), releaseAt);
}

Result<QList<UnbondingRow>> BrokerStore::dueUnbondings(std::int64_t now)
{
    auto rows = query(
        *m_db, QStringLiteral("SELECT id, node, amount FROM unbonding WHERE released = 0 AND release_at <= ? ORDER BY id"), now);
    if (!rows)
        return rows.error();
    return collect(*rows, [](Statement& row) {
        return UnbondingRow { row.columnInt(0), row.columnText(1), Credits::fromMicro(row.columnInt(2)) };
    });
}

Status BrokerStore::markReleased(std::int64_t id)
{
    return execute(*m_db, QStringLiteral("UPDATE unbonding SET released = 1 WHERE id = ?"), id);
}

} // namespace tessera::core::broker
