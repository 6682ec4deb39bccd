#include "broker.h"

#include "../decomposition.h"
#include "../jsonreader.h"

#include <QDateTime>
#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLoggingCategory>
#include <QRandomGenerator>
#include <QTimeZone>

#include <algorithm>

Q_LOGGING_CATEGORY(lcBrokerCore, "tessera.broker.core")

namespace tessera::core::broker {

using storage::Database;
using storage::execute;
using storage::query;
using storage::Statement;

namespace {

QString toJsonText(const QJsonObject& object)
{
    return QString::fromUtf8(QJsonDocument(object).toJson(QJsonDocument::Compact));
}

QJsonObject fromJsonText(const QString& text)
{
    return QJsonDocument::fromJson(text.toUtf8()).object();
}

QString newId()
{
    const auto a = QRandomGenerator::system()->generate64();
    return QStringLiteral("%1").arg(a, 16, 16, QLatin1Char('0'));
}

} // namespace

QList<Digest> blobsNamedBy(const JobSpec& spec)
{
    QList<Digest> blobs;
    if (spec.model.source == ModelSpec::Source::TorchScript)
        blobs.append(spec.model.scriptSha256);
    if (spec.dataset.source == DatasetSpec::Source::Tensors) {
        blobs.append(spec.dataset.trainSha256);
        if (!spec.dataset.testSha256.isNull())
            blobs.append(spec.dataset.testSha256);
    }
    return blobs;
}

Broker::Broker(
    std::unique_ptr<Database> database, std::unique_ptr<BlobStore> blobs, TrainingMath& math, const Clock& clock, Options options)
    : m_db(std::move(database))
    , m_blobs(std::move(blobs))
    , m_math(math)
    , m_clock(clock)
    , m_options(options)
    , m_openedAtMs(clock.nowMs())
{
    m_ledger = std::make_unique<ledger::Ledger>(*m_db);
}

Result<std::unique_ptr<Broker>> Broker::open(
    const QString& dataDirectory, TrainingMath& math, const Clock& clock, Options options)
{
    if (!QDir().mkpath(dataDirectory))
        return Error { QStringLiteral("data"), QStringLiteral("cannot create %1").arg(dataDirectory) };
    // NORMAL in WAL mode survives any crash of the broker (kill -9 included) without loss; a power
    // cut may lose the last commits, which only re-runs shards. FULL would cost an fsync for every
    // assignment handed out.
    auto database = storage::openMigrated(QDir(dataDirectory).filePath(QStringLiteral("broker.sqlite")),
        QStringLiteral(":/migrations/broker"), storage::DatabaseOptions { 5000, storage::DatabaseOptions::Synchronous::Normal });
    if (!database)
        return database.error();
    auto blobs = BlobStore::open(QDir(dataDirectory).filePath(QStringLiteral("blobs")));
    if (!blobs)
        return blobs.error();
    auto signing = SigningKeys::loadOrCreate(QDir(dataDirectory).filePath(QStringLiteral("broker.sign")));
    if (!signing)
        return signing.error();
    std::unique_ptr<Broker> broker(new Broker(std::move(*database), std::move(*blobs), math, clock, options));
    broker->m_signing = *signing;
    if (options.randomSeed != 0)
        broker->m_random.seed(quint32(options.randomSeed ^ (options.randomSeed >> 32)));
    else
        broker->m_random.seed(QRandomGenerator::system()->generate());
    if (auto status = broker->recover(); !status)
        return status.error();
    return broker;
}

Status Broker::recover()
{
    // Whatever was in flight when the broker stopped is handed out again; a node that still
    // answers one of these is still heard (the first valid result of a shard wins).
    if (auto status = execute(*m_db, QStringLiteral("UPDATE assignments SET state = 'expired' WHERE state = 'active'")); !status)
        return status;
    // Re-executions in flight start over; disputes ask for their checkpoint again, with a new deadline.
    if (auto status = requeueChecks({}, {}); !status)
        return status;
    auto disputed = query(*m_db,
        QStringLiteral("SELECT id, asked, checkpoint, COALESCE(accused, ''), COALESCE(accused_assignment, ''), "
                       "COALESCE(verifier, ''), COALESCE(verifier_assignment, '') FROM verifications WHERE state = 'disputed'"));
    if (!disputed)
        return disputed.error();
    for (;;) {
        auto next = storage::fetch(*disputed);
        if (!next)
            return next.error();
        if (!*next)
            break;
        const auto asked = QJsonDocument::fromJson(disputed->columnText(1).toUtf8()).array();
        for (const auto& node : asked) {
            const QString assignment
                = node.toString() == disputed->columnText(3) ? disputed->columnText(4) : disputed->columnText(6);
            notify(Notice::Kind::CheckpointRequest, node.toString(),
                { { QStringLiteral("verification"), disputed->columnText(0) }, { QStringLiteral("assignment"), assignment },
                    { QStringLiteral("checkpoint"), static_cast<qint64>(disputed->columnInt(2) - 1) } });
        }
    }
    if (auto status = execute(*m_db, QStringLiteral("UPDATE verifications SET deadline = ? WHERE state = 'disputed'"),
            m_clock.nowMs() + m_options.disputeTimeoutMs);
        !status)
        return status;
    return loadRunning();
}

double Broker::expectedSamplesPerSecond(const NodeInfo& node)
{
    // A node that has not benchmarked is assumed slow, so that its deadline is generous.
    return node.benchmarkSamplesPerSecond > 0 ? node.benchmarkSamplesPerSecond : 1000.0;
}

Result<JobSpec> Broker::specOf(const QString& jobId)
{
    auto statement = query(*m_db, QStringLiteral("SELECT spec FROM jobs WHERE id = ?"), jobId);
    if (!statement)
        return statement.error();
    auto row = statement->step();
    if (!row)
        return row.error().toError();
    if (!*row)
        return Error { QStringLiteral("jobId"), QStringLiteral("no job %1").arg(jobId) };
    return JobSpec::fromJson(fromJsonText(statement->columnText(0)));
}

Result<Quote> Broker::quoteFor(const JobSpec& spec)
{
    if (auto status = spec.validate(); !status)
        return status.error();
    auto initial = m_math.initialWeights(spec);
    if (!initial)
        return initial.error();
    return quote(spec, initial->parameters, m_options.pricePerUnit);
}

Result<QString> Broker::submit(const JobSpec& spec, const QString& owner)
{
    if (auto status = spec.validate(); !status)
        return status.error();
    if (spec.model.source == ModelSpec::Source::TorchScript && !m_blobs->contains(spec.model.scriptSha256))
        return Error { QStringLiteral("model.torchscript.sha256"),
            QStringLiteral("upload the TorchScript file before submitting") };
    if (spec.dataset.source == DatasetSpec::Source::Tensors) {
        if (!m_blobs->contains(spec.dataset.trainSha256))
            return Error { QStringLiteral("dataset.tensors.trainSha256"),
                QStringLiteral("upload the training tensors before submitting") };
        if (!spec.dataset.testSha256.isNull() && !m_blobs->contains(spec.dataset.testSha256))
            return Error { QStringLiteral("dataset.tensors.testSha256"),
                QStringLiteral("upload the test tensors before submitting") };
    }
    auto running = query(*m_db, QStringLiteral("SELECT COUNT(*) FROM jobs WHERE owner = ? AND state = 'running'"), owner);
    if (!running)
        return running.error();
    if (auto row = storage::fetch(*running); row && *row && running->columnInt(0) >= m_options.maxRunningJobsPerOwner)
        return Error { QStringLiteral("job"),
            QStringLiteral("%1 already has %2 running jobs, the most one owner may have here (Broker/MaxJobsPerOwner)")
                .arg(owner, QString::number(running->columnInt(0))) };
    auto initial = m_math.initialWeights(spec);
    if (!initial)
        return initial.error();
    auto price = quote(spec, initial->parameters, m_options.pricePerUnit);
    if (!price)
        return price.error();
    if (spec.budget < price->training)
        return Error { QStringLiteral("budget"),
            QStringLiteral("%1 credits do not pay for the training, which costs %2 (%3 with the expected verification); "
                           "tessera-job submit --estimate shows the quote")
                .arg(spec.budget.toString(), price->training.toString(), price->total.toString()) };
    auto blob = m_blobs->put(initial->bytes);
    if (!blob)
        return blob.error();
    const QString id = newId();
    const auto now = m_clock.nowMs();
    auto transaction = m_db->begin();
    if (!transaction)
        return transaction.error().toError();
    auto status = execute(*m_db,
        QStringLiteral(
            "INSERT INTO jobs (id, spec, state, round, weights_hash, weights_blob, created_at, owner, price_per_shard) "
            "VALUES (?, ?, 'running', 0, ?, ?, ?, ?, ?)"),
        id, toJsonText(spec.toJson()), initial->canonicalHash.toHex(), blob->toHex(), now, owner, price->pricePerShard.micro());
    if (!status)
        return status.error();
    for (const auto& named : blobsNamedBy(spec) + QList<Digest> { *blob }) {
        if (auto granted = allowRead(named, owner); !granted)
            return granted.error();
    }
    const QString ownerAccount = ledger::accounts::balance(owner);
    if (m_options.faucet) {
        auto held = m_ledger->balance(ownerAccount);
        if (!held)
            return held.error();
        if (*held < spec.budget) {
            auto minted
                = m_ledger->mint(ownerAccount, *spec.budget.checkedSubtract(*held), QStringLiteral("faucet:job:") + id, now);
            if (!minted)
                return minted.error();
        }
    }
    auto escrowed = m_ledger->transfer(ownerAccount, ledger::accounts::escrow(id), spec.budget, QStringLiteral("escrow:") + id,
        QStringLiteral("budget of job %1").arg(id), now);
    if (!escrowed)
        return Error { QStringLiteral("budget"),
            QStringLiteral("the budget cannot be escrowed: %1").arg(escrowed.error().message) };
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();

    RoundState state;
    state.jobId = id;
    state.spec = spec;
    state.weightsHash = initial->canonicalHash;
    state.weightsBlob = *blob;
    state.done.assign(std::size_t(spec.training.shardsPerRound), false);
    m_running.push_back(std::move(state));
    return id;
}

Result<QJsonObject> Broker::account(const QString& id)
{
    auto held = m_ledger->balance(ledger::accounts::balance(id));
    if (!held)
        return held.error();
    auto staked = m_ledger->balance(ledger::accounts::stake(id));
    if (!staked)
        return staked.error();
    return QJsonObject { { QStringLiteral("account"), id }, { QStringLiteral("balance"), held->toString() },
        { QStringLiteral("stake"), staked->toString() } };
}

Status Broker::allowRead(const Digest& blob, const QString& principal)
{
    if (principal.isEmpty())
        return {};
    return execute(
        *m_db, QStringLiteral("INSERT OR IGNORE INTO blob_readers (blob, principal) VALUES (?, ?)"), blob.toHex(), principal);
}

Result<bool> Broker::mayRead(const QString& principal, const Digest& blob)
{
    auto row
        = query(*m_db, QStringLiteral("SELECT 1 FROM blob_readers WHERE blob = ? AND principal = ?"), blob.toHex(), principal);
    if (!row)
        return row.error();
    auto found = fetch(*row);
    if (!found)
        return found.error();
    return *found;
}

Result<bool> Broker::isPartyTo(const QString& principal, const QString& cause)
{
    auto transfer = m_ledger->transferByCause(cause);
    if (!transfer)
        return transfer.error();
    if (!transfer->has_value())
        return false;
    for (const auto& account : { (*transfer)->debit, (*transfer)->credit }) {
        for (const auto& own : { ledger::accounts::balance(principal), ledger::accounts::stake(principal),
                 ledger::accounts::unbonding(principal) }) {
            if (account == own)
                return true;
        }
        if (account.startsWith(QStringLiteral("escrow:"))) {
            auto owner = query(*m_db, QStringLiteral("SELECT 1 FROM jobs WHERE id = ? AND owner = ?"), account.mid(7), principal);
            if (!owner)
                return owner.error();
            auto found = fetch(*owner);
            if (!found)
                return found.error();
            if (*found)
                return true;
        }
    }
    return false;
}

Result<QJsonObject> Broker::receipt(const QString& cause)
{
    auto transfer = m_ledger->transferByCause(cause);
    if (!transfer)
        return transfer.error();
    if (!transfer->has_value())
        return Error { QStringLiteral("cause"), QStringLiteral("no transfer has the cause '%1'").arg(cause) };
    const auto& t = **transfer;
    return signDocument(
        QJsonObject {
            { QStringLiteral("kind"), QStringLiteral("tessera-receipt") },
            { QStringLiteral("version"), 1 },
            { QStringLiteral("transfer"), static_cast<qint64>(t.id) },
            { QStringLiteral("debit"), t.debit },
            { QStringLiteral("credit"), t.credit },
            { QStringLiteral("amount"), t.amount.toString() },
            { QStringLiteral("cause"), t.cause },
            { QStringLiteral("memo"), t.memo },
            { QStringLiteral("at"), QDateTime::fromMSecsSinceEpoch(t.at, QTimeZone::utc()).toString(Qt::ISODateWithMs) },
        },
        m_signing);
}

Result<QList<QJsonObject>> Broker::nodes()
{
    auto rows = query(*m_db,
        QStringLiteral("SELECT id, info, first_seen, last_seen, shards_done, shards_failed, verified, disputes_lost, timeouts, "
                       "slashed, streak FROM nodes ORDER BY first_seen, id"));
    if (!rows)
        return rows.error();
    QList<QJsonObject> list;
    for (;;) {
        auto next = rows->step();
        if (!next)
            return next.error().toError();
        if (!*next)
            break;
        const auto info = fromJsonText(rows->columnText(1));
        const QString id = rows->columnText(0);
        list.append(QJsonObject {
            { QStringLiteral("nodeId"), id },
            { QStringLiteral("name"), info.value(QStringLiteral("name")) },
            { QStringLiteral("runtimeProfile"), info.value(QStringLiteral("runtimeProfile")) },
            { QStringLiteral("benchmarkSamplesPerSecond"), info.value(QStringLiteral("benchmarkSamplesPerSecond")) },
            { QStringLiteral("online"), m_nodes.contains(id) },
            { QStringLiteral("firstSeen"),
                QDateTime::fromMSecsSinceEpoch(rows->columnInt(2), QTimeZone::utc()).toString(Qt::ISODate) },
            { QStringLiteral("lastSeen"),
                QDateTime::fromMSecsSinceEpoch(rows->columnInt(3), QTimeZone::utc()).toString(Qt::ISODate) },
            { QStringLiteral("shardsDone"), static_cast<qint64>(rows->columnInt(4)) },
            { QStringLiteral("shardsFailed"), static_cast<qint64>(rows->columnInt(5)) },
            { QStringLiteral("verified"), static_cast<qint64>(rows->columnInt(6)) },
            { QStringLiteral("disputesLost"), static_cast<qint64>(rows->columnInt(7)) },
            { QStringLiteral("timeouts"), static_cast<qint64>(rows->columnInt(8)) },
            { QStringLiteral("slashed"), Credits::fromMicro(rows->columnInt(9)).toString() },
            { QStringLiteral("streak"), static_cast<qint64>(rows->columnInt(10)) },
            { QStringLiteral("stake"), m_ledger->balance(ledger::accounts::stake(id)).value_or(Credits {}).toString() },
            { QStringLiteral("balance"), m_ledger->balance(ledger::accounts::balance(id)).value_or(Credits {}).toString() },
        });
    }
    return list;
}

double Broker::schedulingScore(const QString& nodeId)
{
    const auto node = m_nodes.constFind(nodeId);
    const double throughput = node == m_nodes.constEnd() ? 0.0 : expectedSamplesPerSecond(*node);
    auto record = query(
        *m_db, QStringLiteral("SELECT shards_done, shards_failed, disputes_lost, timeouts FROM nodes WHERE id = ?"), nodeId);
    if (!record)
        return throughput;
    auto row = record->step();
    if (!row || !*row)
        return throughput;
    const double done = double(record->columnInt(0));
    // A lost dispute weighs like ten failures, a timeout in a dispute like one.
    const double failed = double(record->columnInt(1)) + 10.0 * double(record->columnInt(2)) + double(record->columnInt(3));
    return throughput * (done + 1.0) / (done + failed + 1.0);
}

Status Broker::refund(const QString& jobId)
{
    auto job = query(*m_db, QStringLiteral("SELECT owner FROM jobs WHERE id = ?"), jobId);
    if (!job)
        return job.error();
    if (auto row = job->step(); !row || !*row)
        return Error { QStringLiteral("jobId"), QStringLiteral("no job %1").arg(jobId) };
    const QString owner = job->columnText(0);
    if (auto settled = settleJobChecks(jobId); !settled)
        return settled;
    auto left = m_ledger->balance(ledger::accounts::escrow(jobId));
    if (!left)
        return left.error();
    if (left->micro() <= 0)
        return {};
    auto moved = m_ledger->transfer(ledger::accounts::escrow(jobId), ledger::accounts::balance(owner), *left,
        QStringLiteral("refund:") + jobId, QStringLiteral("unspent budget of job %1").arg(jobId), m_clock.nowMs());
    if (!moved)
        return moved.error();
    return {};
}

Result<JobStatus> Broker::status(const QString& jobId)
{
    auto job = query(*m_db,
        QStringLiteral(
            "SELECT spec, state, round, weights_hash, weights_blob, failure, owner, price_per_shard FROM jobs WHERE id = ?"),
        jobId);
    if (!job)
        return job.error();
    auto row = job->step();
    if (!row)
        return row.error().toError();
    if (!*row)
        return Error { QStringLiteral("jobId"), QStringLiteral("no job %1").arg(jobId) };
    const auto spec = JobSpec::fromJson(fromJsonText(job->columnText(0)));
    JobStatus status;
    status.id = jobId;
    status.name = spec ? spec->name : QString();
    status.rounds = spec ? spec->training.rounds : 0;
    status.state = jobStateFromName(job->columnText(1)).value_or(JobState::Failed);
    status.round = job->columnInt(2);
    status.weightsHash = Digest::fromHex(job->columnText(3)).ok() ? *Digest::fromHex(job->columnText(3)) : Digest {};
    status.weightsBlob = Digest::fromHex(job->columnText(4)).ok() ? *Digest::fromHex(job->columnText(4)) : Digest {};
    status.failure = job->columnIsNull(5) ? QString() : job->columnText(5);
    status.owner = job->columnText(6);
    status.pricePerShard = Credits::fromMicro(job->columnInt(7));
    if (auto escrow = m_ledger->balance(ledger::accounts::escrow(jobId)))
        status.escrow = *escrow;

    auto rounds = query(*m_db,
        QStringLiteral("SELECT round, test_loss, test_accuracy, train_loss, weights_hash, weights_blob FROM rounds WHERE job = ? "
                       "ORDER BY round"),
        jobId);
    if (!rounds)
        return rounds.error();
    for (;;) {
        auto next = rounds->step();
        if (!next)
            return next.error().toError();
        if (!*next)
            break;
        RoundRecord record;
        record.round = rounds->columnInt(0);
        record.testLoss = rounds->columnDouble(1);
        record.testAccuracy = rounds->columnDouble(2);
        record.trainLoss = rounds->columnDouble(3);
        record.weightsHash = *Digest::fromHex(rounds->columnText(4));
        record.weightsBlob = *Digest::fromHex(rounds->columnText(5));
        status.history.append(record);
    }
    return status;
}

Result<QList<JobStatus>> Broker::list()
{
    auto ids = query(*m_db, QStringLiteral("SELECT id FROM jobs ORDER BY created_at, id"));
    if (!ids)
        return ids.error();
    QStringList all;
    for (;;) {
        auto next = ids->step();
        if (!next)
            return next.error().toError();
        if (!*next)
            break;
        all.append(ids->columnText(0));
    }
    QList<JobStatus> jobs;
    for (const auto& id : all) {
        auto job = status(id);
        if (!job)
            return job.error();
        jobs.append(*job);
    }
    return jobs;
}

Status Broker::cancel(const QString& jobId)
{
    auto job = status(jobId);
    if (!job)
        return job.error();
    if (job->state != JobState::Running)
        return Error { QStringLiteral("jobId"), QStringLiteral("the job is already %1").arg(jobStateName(job->state)) };
    auto transaction = m_db->begin();
    if (!transaction)
        return transaction.error().toError();
    if (auto cancelled = execute(*m_db, QStringLiteral("UPDATE jobs SET state = 'cancelled' WHERE id = ?"), jobId); !cancelled)
        return cancelled;
    if (auto refunded = refund(jobId); !refunded)
        return refunded;
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    std::erase_if(m_running, [&](const RoundState& state) { return state.jobId == jobId; });
    return {};
}

Status Broker::registerNode(const NodeInfo& node)
{
    const auto now = m_clock.nowMs();
    auto status = execute(*m_db,
        QStringLiteral("INSERT INTO nodes (id, info, first_seen, last_seen) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT(id) DO UPDATE SET info = excluded.info, last_seen = excluded.last_seen"),
        node.nodeId, toJsonText(node.toJson()), now, now);
    if (!status)
        return status;
    if (m_options.faucet && m_options.minStake.micro() > 0) {
        // On a local or demo broker, new nodes get their stake bonded for them.
        auto staked = m_ledger->balance(ledger::accounts::stake(node.nodeId));
        if (!staked)
            return staked.error();
        if (*staked < m_options.minStake) {
            auto minted = m_ledger->mint(ledger::accounts::stake(node.nodeId), *m_options.minStake.checkedSubtract(*staked),
                QStringLiteral("faucet:stake:%1:%2").arg(node.nodeId, QString::number(now)), now);
            if (!minted)
                return minted.error();
        }
    }
    m_nodes.insert(node.nodeId, node);
    return {};
}

void Broker::nodeLost(const QString& nodeId)
{
    m_nodes.remove(nodeId);
    (void)execute(*m_db, QStringLiteral("UPDATE assignments SET state = 'expired' WHERE node = ? AND state = 'active'"), nodeId);
    (void)requeueChecks(QStringLiteral("verifier"), nodeId);
    for (auto& state : m_running) {
        QStringList theirs;
        for (auto it = state.active.constBegin(); it != state.active.constEnd(); ++it) {
            if (it->node == nodeId)
                theirs.append(it.key());
        }
        for (const auto& id : theirs)
            release(state, id);
    }
}

bool Broker::hasWork()
{
    return !m_running.empty();
}

Result<std::optional<Assignment>> Broker::assign(const QString& nodeId)
{
    const auto nodeIt = m_nodes.constFind(nodeId);
    if (nodeIt == m_nodes.constEnd())
        return Error { QStringLiteral("node"), QStringLiteral("the node has not registered") };
    const NodeInfo& node = *nodeIt;
    const auto now = m_clock.nowMs();
    if (m_options.minStake.micro() > 0) {
        auto staked = m_ledger->balance(ledger::accounts::stake(nodeId));
        if (!staked)
            return staked.error();
        if (*staked < m_options.minStake)
            return Error { QStringLiteral("stake"),
                QStringLiteral("the node has %1 credits bonded; taking work needs %2")
                    .arg(staked->toString(), m_options.minStake.toString()) };
    }

    // Re-executions first: a round waits for the checks of its sampled shards.
    auto check = assignCheck(node);
    if (!check)
        return check.error();
    if (check->has_value())
        return check;

    for (auto& state : m_running) {
        if (state.spec.training.threads > node.maxThreads)
            continue;
        const std::int64_t shards = std::int64_t(state.done.size());
        auto heldBy = [&](std::int64_t shard, bool inTimeOnly) {
            for (const auto& active : std::as_const(state.active)) {
                if (active.shard == shard && (!inTimeOnly || active.deadline >= now))
                    return active.node;
            }
            return QString();
        };
        std::optional<std::int64_t> chosen;
        // First the shards whose every assignment failed or was lost, then the ones never handed
        // out, then (only when every shard is out) the one whose deadline passed longest ago.
        while (!chosen && !state.reissue.empty()) {
            const auto shard = state.reissue.front();
            state.reissue.pop_front();
            if (!state.done[std::size_t(shard)] && heldBy(shard, false).isEmpty())
                chosen = shard;
        }
        while (!chosen && state.cursor < shards) {
            const auto shard = state.cursor++;
            if (!state.done[std::size_t(shard)])
                chosen = shard;
        }
        if (!chosen) {
            std::int64_t oldest = now;
            for (const auto& active : std::as_const(state.active)) {
                if (active.deadline < oldest && !state.done[std::size_t(active.shard)] && active.node != nodeId
                    && heldBy(active.shard, true).isEmpty()) {
                    bool mine = false;
                    for (const auto& other : std::as_const(state.active))
                        mine = mine || (other.shard == active.shard && other.node == nodeId);
                    if (!mine) {
                        oldest = active.deadline;
                        chosen = active.shard;
                    }
                }
            }
        }
        if (!chosen)
            continue;

        ShardTask task = decomposeShard(state.jobId, state.spec, state.round, *chosen, state.weightsHash);
        const double seconds = double(task.localSteps * task.batchSize) / expectedSamplesPerSecond(node) * double(task.threads);
        const auto deadline
            = now + std::max<std::int64_t>(m_options.minDeadlineMs, std::int64_t(seconds * 1000.0 * m_options.deadlineSlack));
        Assignment assignment { newId(), std::move(task), state.weightsBlob, deadline };
        auto status = execute(*m_db,
            QStringLiteral("INSERT INTO assignments (id, job, round, shard, node, issued_at, deadline, state) VALUES (?, ?, ?, "
                           "?, ?, ?, ?, 'active')"),
            assignment.id, state.jobId, state.round, *chosen, nodeId, now, deadline);
        if (!status)
            return status.error();
        for (const auto& needed : blobsNamedBy(state.spec) + QList<Digest> { state.weightsBlob }) {
            if (auto granted = allowRead(needed, nodeId); !granted)
                return granted.error();
        }
        state.active.insert(assignment.id, { *chosen, nodeId, deadline });
        return std::optional<Assignment>(assignment);
    }
    return std::optional<Assignment> {};
}

Broker::RoundState* Broker::runningState(const QString& jobId)
{
    for (auto& state : m_running) {
        if (state.jobId == jobId)
            return &state;
    }
    return nullptr;
}

void Broker::release(RoundState& state, const QString& assignmentId)
{
    const auto it = state.active.find(assignmentId);
    if (it == state.active.end())
        return;
    const auto shard = it->shard;
    state.active.erase(it);
    if (state.done[std::size_t(shard)])
        return;
    for (const auto& active : std::as_const(state.active)) {
        if (active.shard == shard)
            return; // someone else still has it
    }
    state.reissue.push_back(shard);
}

Status Broker::loadRunning()
{
    m_running.clear();
    auto jobs = query(*m_db,
        QStringLiteral(
            "SELECT id, spec, round, weights_hash, weights_blob FROM jobs WHERE state = 'running' ORDER BY created_at, id"));
    if (!jobs)
        return jobs.error();
    for (;;) {
        auto next = jobs->step();
        if (!next)
            return next.error().toError();
        if (!*next)
            break;
        auto spec = JobSpec::fromJson(fromJsonText(jobs->columnText(1)));
        if (!spec)
            continue;
        RoundState state;
        state.jobId = jobs->columnText(0);
        state.spec = *spec;
        state.round = jobs->columnInt(2);
        state.weightsHash = *Digest::fromHex(jobs->columnText(3));
        state.weightsBlob = *Digest::fromHex(jobs->columnText(4));
        state.done.assign(std::size_t(spec->training.shardsPerRound), false);
        m_running.push_back(std::move(state));
    }
    for (auto& state : m_running) {
        auto done = query(
            *m_db, QStringLiteral("SELECT shard FROM shard_results WHERE job = ? AND round = ?"), state.jobId, state.round);
        if (!done)
            return done.error();
        for (;;) {
            auto next = done->step();
            if (!next)
                return next.error().toError();
            if (!*next)
                break;
            const auto shard = done->columnInt(0);
            if (shard >= 0 && shard < std::int64_t(state.done.size()))
                state.done[std::size_t(shard)] = true;
        }
    }
    return {};
}

Status Broker::commit(const QString& nodeId, const QJsonObject& signedCommitment)
{
    const auto node = m_nodes.constFind(nodeId);
    if (node == m_nodes.constEnd())
        return Error { QStringLiteral("node"), QStringLiteral("the node has not registered") };
    if (signedCommitment.value(QStringLiteral("signer")).toString() != node->signingKey || node->signingKey.isEmpty())
        return Error { QStringLiteral("commitment.signer"),
            QStringLiteral("the commitment is not signed with the node's registered key") };
    if (auto status = verifyDocument(signedCommitment); !status)
        return Error { QStringLiteral("commitment.") + status.error().field, status.error().message };
    JsonReader reader(signedCommitment, QStringLiteral("commitment"));
    // The kind keeps a signature made for one purpose (a stake request, a receipt) from counting as
    // another.
    if (reader.string(u"kind") != QLatin1String(ShardResult::CommitmentKind))
        return Error { QStringLiteral("commitment.kind"),
            QStringLiteral("must be %1").arg(QLatin1String(ShardResult::CommitmentKind)) };
    const QString assignment = reader.string(u"assignment");
    const auto finalHash = reader.digest(u"finalHash");
    const auto chainRoot = reader.digest(u"chainRoot");
    if (!reader.ok())
        return reader.status().error();
    auto owner = query(*m_db, QStringLiteral("SELECT node, job, round, shard FROM assignments WHERE id = ?"), assignment);
    if (!owner)
        return owner.error();
    if (auto row = owner->step(); !row || !*row || owner->columnText(0) != nodeId)
        return Error { QStringLiteral("commitment.assignment"), QStringLiteral("no such assignment for this node") };
    // A signed commitment to another job, round or shard than the one handed out (a stale round's
    // result passed off as new) is a lie the node put its name to.
    if (signedCommitment.value(QStringLiteral("jobId")).toString() != owner->columnText(1)
        || signedCommitment.value(QStringLiteral("round")).toInteger(-1) != owner->columnInt(2)
        || signedCommitment.value(QStringLiteral("shard")).toInteger(-1) != owner->columnInt(3)) {
        const Error error { QStringLiteral("commitment"),
            QStringLiteral("the commitment is for round %1, shard %2, but the assignment is round %3, shard %4")
                .arg(signedCommitment.value(QStringLiteral("round")).toInteger(-1))
                .arg(signedCommitment.value(QStringLiteral("shard")).toInteger(-1))
                .arg(owner->columnInt(2))
                .arg(owner->columnInt(3)) };
        if (auto status = recordResultError(nodeId, assignment, error); !status)
            qCWarning(lcBrokerCore).noquote() << status.error().toString();
        return error;
    }
    // The first commitment binds: a node cannot change its answer after seeing anything.
    return execute(*m_db,
        QStringLiteral(
            "INSERT INTO commitments (assignment, node, final_hash, chain_root, document, at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(assignment) DO NOTHING"),
        assignment, nodeId, finalHash.toHex(), chainRoot.toHex(), toJsonText(signedCommitment), m_clock.nowMs());
}

Result<Verdict> Broker::acceptResult(const QString& nodeId, const QString& assignmentId, const ShardResult& result)
{
    auto found = query(*m_db,
        QStringLiteral("SELECT job, round, shard, node, state, kind, COALESCE(verification, '') FROM assignments WHERE id = ?"),
        assignmentId);
    if (!found)
        return found.error();
    auto row = found->step();
    if (!row)
        return row.error().toError();
    if (!*row)
        return Error { QStringLiteral("assignment"), QStringLiteral("no assignment %1").arg(assignmentId) };
    const QString jobId = found->columnText(0);
    const auto round = found->columnInt(1);
    const auto shard = found->columnInt(2);
    const QString owner = found->columnText(3);
    const QString state = found->columnText(4);
    if (owner != nodeId)
        return Error { QStringLiteral("assignment"), QStringLiteral("the assignment belongs to another node") };
    if (result.jobId != jobId || result.round != round || result.shard != shard)
        return Error { QStringLiteral("result"), QStringLiteral("the result is for another shard than its assignment") };
    if (state == u"answered" || state == u"failed")
        return Verdict::Stale;
    if (found->columnText(5) != u"train")
        return acceptCheck(nodeId, assignmentId, found->columnText(6), result);

    auto job = query(*m_db, QStringLiteral("SELECT state, round, weights_hash FROM jobs WHERE id = ?"), jobId);
    if (!job)
        return job.error();
    auto jobRow = job->step();
    if (!jobRow)
        return jobRow.error().toError();
    if (!*jobRow || job->columnText(0) != u"running" || job->columnInt(1) != round)
        return Verdict::Stale;
    const auto startHash = *Digest::fromHex(job->columnText(2));
    auto already = query(
        *m_db, QStringLiteral("SELECT 1 FROM shard_results WHERE job = ? AND round = ? AND shard = ?"), jobId, round, shard);
    if (!already)
        return already.error();
    auto alreadyRow = already->step();
    if (!alreadyRow)
        return alreadyRow.error().toError();
    if (*alreadyRow) {
        (void)execute(*m_db, QStringLiteral("UPDATE assignments SET state = 'answered' WHERE id = ?"), assignmentId);
        if (auto* running = runningState(jobId))
            running->active.remove(assignmentId);
        return Verdict::Stale;
    }

    auto spec = specOf(jobId);
    if (!spec)
        return spec.error();

    if (result.outcome == ShardResult::Outcome::Returned) {
        // Given back (the node's disk is full, say): the shard goes to another node, and neither
        // the shard's failure count nor the node's record changes.
        (void)execute(*m_db, QStringLiteral("UPDATE assignments SET state = 'returned' WHERE id = ?"), assignmentId);
        if (auto* running = runningState(jobId))
            release(*running, assignmentId);
        return Verdict::Failed;
    }
    if (result.outcome == ShardResult::Outcome::Failed) {
        auto transaction = m_db->begin();
        if (!transaction)
            return transaction.error().toError();
        (void)execute(*m_db, QStringLiteral("UPDATE assignments SET state = 'failed' WHERE id = ?"), assignmentId);
        (void)execute(*m_db, QStringLiteral("UPDATE nodes SET shards_failed = shards_failed + 1 WHERE id = ?"), nodeId);
        if (auto status = transaction->commit(); !status)
            return status.error().toError();
        if (auto* running = runningState(jobId))
            release(*running, assignmentId);
        auto failures = query(*m_db,
            QStringLiteral("SELECT COUNT(*) FROM assignments WHERE job = ? AND round = ? AND shard = ? AND state = 'failed'"),
            jobId, round, shard);
        if (failures && failures->step().ok() && failures->columnInt(0) >= m_options.maxShardFailures)
            (void)failJob(jobId,
                QStringLiteral("round %1, shard %2 failed %3 times; last: %4")
                    .arg(round)
                    .arg(shard)
                    .arg(failures->columnInt(0))
                    .arg(result.failure));
        return Verdict::Failed;
    }

    const auto task = decomposeShard(jobId, *spec, round, shard, startHash);
    if (auto revealed = checkReveal(nodeId, assignmentId, task, result); !revealed)
        return revealed.error();
    auto sampled = drawSample(nodeId, *spec);
    if (!sampled)
        return sampled.error();

    const auto price = priceOf(jobId);
    const auto pay = *sampled ? Credits {} : price;
    auto escrow = m_ledger->balance(ledger::accounts::escrow(jobId));
    if (!escrow)
        return escrow.error();
    if (*escrow < price) {
        (void)failJob(jobId,
            QStringLiteral("the budget is spent (%1 credits left, a shard pays %2)").arg(escrow->toString(), price.toString()));
        return Verdict::Stale;
    }

    const auto now = m_clock.nowMs();
    auto* running = runningState(jobId);
    auto transaction = m_db->begin();
    if (!transaction)
        return transaction.error().toError();
    if (pay.micro() > 0) {
        auto paid = m_ledger->transfer(ledger::accounts::escrow(jobId), ledger::accounts::balance(nodeId), pay,
            QStringLiteral("pay:%1/%2/%3").arg(jobId).arg(round).arg(shard),
            QStringLiteral("shard %1 of round %2").arg(shard).arg(round), now);
        if (!paid)
            return paid.error();
    }
    for (const auto& status : {
             execute(*m_db,
                 QStringLiteral("INSERT INTO shard_results (job, round, shard, node, result, state, assignment) VALUES (?, ?, ?, "
                                "?, ?, ?, ?)"),
                 jobId, round, shard, nodeId, toJsonText(result.toJson()),
                 *sampled ? QStringLiteral("sampled") : QStringLiteral("accepted"), assignmentId),
             execute(*m_db, QStringLiteral("UPDATE assignments SET state = 'answered' WHERE id = ?"), assignmentId),
             execute(*m_db,
                 *sampled ? QStringLiteral("UPDATE nodes SET shards_done = shards_done + 1, last_seen = ? WHERE id = ?")
                          : QStringLiteral("UPDATE nodes SET shards_done = shards_done + 1, streak = streak + 1, last_seen = ? "
                                           "WHERE id = ?"),
                 now, nodeId),
             // A sampled result waits for another node to re-execute it (or the broker, in time).
             *sampled ? execute(*m_db,
                 QStringLiteral("INSERT INTO verifications (id, kind, job, round, shard, start_hash, start_blob, "
                                "accused, accused_assignment, accused_result, state, created_at) "
                                "VALUES (?, 'sample', ?, ?, ?, ?, ?, ?, ?, ?, 'waiting', ?)"),
                 QStringLiteral("v") + newId(), jobId, round, shard, startHash.toHex(),
                 running ? running->weightsBlob.toHex() : QString(), nodeId, assignmentId, toJsonText(result.toJson()), now)
                      : Status {},
         }) {
        if (!status)
            return status.error();
    }
    if (auto status = transaction->commit(); !status)
        return status.error().toError();
    if (running) {
        running->done[std::size_t(shard)] = true;
        running->active.remove(assignmentId);
    }
    if (*sampled)
        return Verdict::Held;
    if (auto status = finishRoundIfComplete(jobId, *spec, round); !status)
        return status.error();
    return Verdict::Accepted;
}

Status Broker::checkReveal(const QString& nodeId, const QString& assignmentId, const ShardTask& task, const ShardResult& result)
{
    auto committed
        = query(*m_db, QStringLiteral("SELECT final_hash, chain_root FROM commitments WHERE assignment = ?"), assignmentId);
    if (!committed)
        return committed.error();
    auto committedRow = storage::fetch(*committed);
    if (!committedRow)
        return committedRow.error();
    if (!*committedRow)
        return Error { QStringLiteral("commitment"), QStringLiteral("send the signed commitment (COMMIT) before the result") };
    // From here on the node has signed its answer: what contradicts the shard it was given is a lie.
    auto lie = [&](Error error) -> Status {
        if (auto status = recordResultError(nodeId, assignmentId, error); !status)
            qCWarning(lcBrokerCore).noquote() << status.error().toString();
        return error;
    };
    const auto commitment = result.commitment();
    if (committed->columnText(0) != commitment.finalHash.toHex() || committed->columnText(1) != commitment.chainRoot.toHex())
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
    auto weights = m_blobs->read(result.weightsSha256);
    if (!weights)
        return Error { QStringLiteral("weightsSha256"), QStringLiteral("upload the weights (PUT) before the result") };
    // The node committed to the weights' canonical hash, not to a file: weights the broker cannot
    // read (another container, a format it does not know) prove nothing. Refused, not slashed; the
    // node may upload them as a dict of tensors and send the result again.
    auto hash = m_math.canonicalHash(*weights);
    if (!hash)
        return Error { QStringLiteral("weightsSha256"),
            QStringLiteral("the broker cannot read the uploaded weights (%1); upload a dict of tensors and send the "
                           "result again")
                .arg(hash.error().message) };
    if (*hash != result.finalHash)
        return lie(
            Error { QStringLiteral("finalHash"), QStringLiteral("the uploaded weights do not hash to the result's finalHash") });
    return {};
}

Status Broker::finishRoundIfComplete(const QString& jobId, const JobSpec& spec, std::int64_t round)
{
    auto results = query(*m_db,
        QStringLiteral("SELECT shard, result, state FROM shard_results WHERE job = ? AND round = ? ORDER BY shard"), jobId,
        round);
    if (!results)
        return results.error();
    QList<ShardResult> accepted;
    for (;;) {
        auto next = results->step();
        if (!next)
            return next.error().toError();
        if (!*next)
            break;
        if (results->columnText(2) == u"sampled")
            return {}; // a sampled result is aggregated once its check confirms it
        auto result = ShardResult::fromJson(fromJsonText(results->columnText(1)));
        if (!result)
            return result.error();
        accepted.append(*result);
    }
    if (accepted.size() < spec.training.shardsPerRound)
        return {};

    auto job = query(*m_db, QStringLiteral("SELECT weights_blob, outer_state_blob FROM jobs WHERE id = ?"), jobId);
    if (!job)
        return job.error();
    if (auto row = job->step(); !row || !*row)
        return Error { QStringLiteral("job"), QStringLiteral("the job vanished") };
    auto global = m_blobs->read(*Digest::fromHex(job->columnText(0)));
    if (!global)
        return global.error();
    QByteArray outerState;
    if (!job->columnIsNull(1)) {
        auto outer = m_blobs->read(*Digest::fromHex(job->columnText(1)));
        if (!outer)
            return outer.error();
        outerState = *outer;
    }

    const auto tasks = decomposeRound(jobId, spec, round, {});
    QList<TrainingMath::Update> updates;
    double lossSum = 0.0;
    std::int64_t lossCount = 0;
    for (const auto& result : accepted) {
        auto weights = m_blobs->read(result.weightsSha256);
        if (!weights)
            return weights.error();
        const auto& task = tasks[result.shard];
        updates.append({ result.shard, task.sampleEnd - task.sampleBegin, *weights });
        for (double loss : result.losses)
            lossSum += loss;
        lossCount += result.losses.size();
    }
    auto aggregated = m_math.aggregate(spec.aggregation, *global, updates, outerState);
    if (!aggregated)
        return failJob(jobId, QStringLiteral("round %1 could not be aggregated: %2").arg(round).arg(aggregated.error().message));
    auto evaluation = m_math.evaluate(spec, aggregated->weights.bytes);
    if (!evaluation)
        return failJob(jobId, QStringLiteral("round %1 could not be evaluated: %2").arg(round).arg(evaluation.error().message));
    auto blob = m_blobs->put(aggregated->weights.bytes);
    if (!blob)
        return blob.error();
    QString outerBlob;
    if (!aggregated->outerState.isEmpty()) {
        auto stored = m_blobs->put(aggregated->outerState);
        if (!stored)
            return stored.error();
        outerBlob = stored->toHex();
    }

    const bool last = round + 1 >= spec.training.rounds;
    auto transaction = m_db->begin();
    if (!transaction)
        return transaction.error().toError();
    auto record = execute(*m_db,
        QStringLiteral(
            "INSERT INTO rounds (job, round, test_loss, test_accuracy, train_loss, weights_hash, weights_blob, finished_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
        jobId, round, evaluation->loss, evaluation->accuracy, lossCount ? lossSum / double(lossCount) : 0.0,
        aggregated->weights.canonicalHash.toHex(), blob->toHex(), m_clock.nowMs());
    if (!record)
        return record;
    // The new weights are the owner's to fetch.
    if (auto granted = execute(*m_db,
            QStringLiteral("INSERT OR IGNORE INTO blob_readers (blob, principal) SELECT ?, owner FROM jobs WHERE id = ?"),
            blob->toHex(), jobId);
        !granted)
        return granted;
    Status advance = outerBlob.isEmpty()
        ? execute(*m_db, QStringLiteral("UPDATE jobs SET round = ?, weights_hash = ?, weights_blob = ?, state = ? WHERE id = ?"),
            round + 1, aggregated->weights.canonicalHash.toHex(), blob->toHex(),
            last ? QStringLiteral("finished") : QStringLiteral("running"), jobId)
        : execute(*m_db,
            QStringLiteral(
                "UPDATE jobs SET round = ?, weights_hash = ?, weights_blob = ?, state = ?, outer_state_blob = ? WHERE id = ?"),
            round + 1, aggregated->weights.canonicalHash.toHex(), blob->toHex(),
            last ? QStringLiteral("finished") : QStringLiteral("running"), outerBlob, jobId);
    if (!advance)
        return advance;
    // Assignments of the finished round that are still out are moot now.
    if (auto status = execute(*m_db,
            QStringLiteral("UPDATE assignments SET state = 'expired' WHERE job = ? AND round = ? AND state = 'active'"), jobId,
            round);
        !status)
        return status;
    if (last) {
        if (auto refunded = refund(jobId); !refunded)
            return refunded;
    }
    if (auto status = transaction->commit(); !status)
        return status.error().toError();
    if (last) {
        std::erase_if(m_running, [&](const RoundState& state) { return state.jobId == jobId; });
    } else if (auto* running = runningState(jobId)) {
        running->round = round + 1;
        running->weightsHash = aggregated->weights.canonicalHash;
        running->weightsBlob = *blob;
        running->done.assign(running->done.size(), false);
        running->active.clear();
        running->cursor = 0;
        running->reissue.clear();
    }
    return {};
}

Status Broker::failJob(const QString& jobId, const QString& why)
{
    std::erase_if(m_running, [&](const RoundState& state) { return state.jobId == jobId; });
    if (auto status = execute(*m_db, QStringLiteral("UPDATE jobs SET state = 'failed', failure = ? WHERE id = ?"), why, jobId);
        !status)
        return status;
    return refund(jobId);
}

} // namespace tessera::core::broker
