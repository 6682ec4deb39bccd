#include "resultlog.h"

#include <QDateTime>
#include <QJsonArray>
#include <QJsonDocument>

namespace tessera::core {

namespace {

QString entry(NodeResultState state, std::int64_t at)
{
    return QString::fromUtf8(QJsonDocument(
        QJsonObject { { QStringLiteral("state"), nameOf(state) }, { QStringLiteral("at"), static_cast<qint64>(at) } })
                                 .toJson(QJsonDocument::Compact));
}

} // namespace

ResultLog::ResultLog(std::unique_ptr<storage::Database> database)
    : m_db(std::move(database))
{ }

Result<std::unique_ptr<ResultLog>> ResultLog::open(const QString& path)
{
    auto database = storage::openMigrated(path, QStringLiteral(":/migrations/node"));
    if (!database)
        return database.error();
    return std::unique_ptr<ResultLog>(new ResultLog(std::move(*database)));
}

namespace {

QList<Digest> digestsOf(const QString& json)
{
    QList<Digest> digests;
    for (const auto& value : QJsonDocument::fromJson(json.toUtf8()).array()) {
        if (auto digest = Digest::fromHex(value.toString()))
            digests.append(*digest);
    }
    return digests;
}

// The blobs a row of "SELECT checkpoints, inputs" keeps pinned: its states and its inputs.
QList<Digest> keptBlobs(storage::Statement& row)
{
    return digestsOf(row.columnText(0)) + digestsOf(row.columnText(1));
}

// The one row of `sql` (one assignment), read by `read`; nullopt when there is none.
template<typename Read>
auto oneRow(storage::Database& db, const QString& sql, const QString& assignment, Read read)
    -> Result<std::optional<decltype(read(std::declval<storage::Statement&>()))>>
{
    using Value = decltype(read(std::declval<storage::Statement&>()));
    auto row = storage::query(db, sql, assignment);
    if (!row)
        return row.error();
    auto found = storage::fetch(*row);
    if (!found)
        return found.error();
    if (!*found)
        return std::optional<Value> {};
    return std::optional<Value>(read(*row));
}

QString hexArray(const QList<Digest>& digests)
{
    QJsonArray array;
    for (const auto& digest : digests)
        array.append(digest.isNull() ? QString() : digest.toHex());
    return QString::fromUtf8(QJsonDocument(array).toJson(QJsonDocument::Compact));
}

} // namespace

Status ResultLog::computed(const QString& assignment, const QString& broker, const ShardResult& result, const Kept& kept)
{
    const auto now = QDateTime::currentMSecsSinceEpoch();
    const NodeResultState state = result.outcome == ShardResult::Outcome::Completed ? NodeResultState::Computed
        : result.outcome == ShardResult::Outcome::Failed                            ? NodeResultState::Failed
                                                                                    : NodeResultState::Returned;
    return storage::execute(*m_db,
        QStringLiteral(
            "INSERT INTO results (assignment, broker, job, round, shard, state, final_hash, detail, history, updated_at, "
            "checkpoints, task, inputs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, json_array(json(?)), ?, ?, ?, ?) "
            "ON CONFLICT(assignment) DO NOTHING"),
        assignment, broker, result.jobId, result.round, result.shard, nameOf(state),
        result.outcome == ShardResult::Outcome::Completed ? result.finalHash.toHex() : QString(), result.failure,
        entry(state, now), static_cast<std::int64_t>(now), hexArray(kept.checkpoints),
        kept.task.isEmpty() ? QString() : QString::fromUtf8(QJsonDocument(kept.task).toJson(QJsonDocument::Compact)),
        hexArray(kept.inputs));
}

Result<std::optional<Digest>> ResultLog::checkpoint(const QString& assignment, std::int64_t k)
{
    auto found = kept(assignment);
    if (!found)
        return found.error();
    if (!*found || k < 1 || k > (*found)->checkpoints.size() || (*found)->checkpoints[k - 1].isNull())
        return std::optional<Digest> {};
    return std::optional<Digest>((*found)->checkpoints[k - 1]);
}

// A result the broker has not settled within a week never will be (a sample waits at most
// Broker/SelfVerifyAfterSeconds, a dispute Broker/DisputeTimeoutSeconds): its states may go.
constexpr std::int64_t UnsettledForMs = 7LL * 24 * 3600 * 1000;

namespace {

// "'computed', 'committed', ...": the states a result may still be disputed in, for SQL.
QString unsettledNames()
{
    QStringList names;
    for (const auto& name : namesOf<NodeResultState>()) {
        if (unsettled(*fromName<NodeResultState>(name)))
            names.append(u'\'' + name + u'\'');
    }
    return names.join(QStringLiteral(", "));
}

// The state of a row; the schema's CHECK admits only names of the enum, so any other is a
// database some other program wrote: read as refused rather than trusted.
NodeResultState stateNamed(const QString& name)
{
    return fromName<NodeResultState>(name).value_or(NodeResultState::Refused);
}

} // namespace

Result<std::optional<NodeResultState>> ResultLog::state(const QString& assignment)
{
    return oneRow(*m_db, QStringLiteral("SELECT state FROM results WHERE assignment = ?"), assignment,
        [](storage::Statement& row) { return stateNamed(row.columnText(0)); });
}

Result<std::optional<ResultLog::Kept>> ResultLog::kept(const QString& assignment)
{
    return oneRow(*m_db, QStringLiteral("SELECT checkpoints, task, inputs FROM results WHERE assignment = ?"), assignment,
        [](storage::Statement& row) {
            Kept kept;
            for (const auto& value : QJsonDocument::fromJson(row.columnText(0).toUtf8()).array()) {
                const auto digest = Digest::fromHex(value.toString());
                kept.checkpoints.append(digest ? *digest : Digest {});
            }
            kept.task = QJsonDocument::fromJson(row.columnText(1).toUtf8()).object();
            kept.inputs = digestsOf(row.columnText(2));
            return kept;
        });
}

Result<QList<Digest>> ResultLog::checkpoints(const QString& assignment)
{
    auto rows = storage::query(*m_db, QStringLiteral("SELECT checkpoints, inputs FROM results WHERE assignment = ?"), assignment);
    if (!rows)
        return rows.error();
    auto lists = storage::collect(*rows, keptBlobs);
    if (!lists)
        return lists.error();
    return lists->isEmpty() ? QList<Digest> {} : lists->first();
}

Status ResultLog::moved(const QString& assignment, const QString& broker)
{
    return storage::execute(*m_db, QStringLiteral("UPDATE results SET broker = ? WHERE assignment = ?"), broker, assignment);
}

Result<QList<Digest>> ResultLog::unsettledCheckpoints(const QString& broker)
{
    auto rows = storage::query(*m_db,
        QStringLiteral("SELECT checkpoints, inputs FROM results WHERE broker = ? AND state IN (%1) AND updated_at >= ?")
            .arg(unsettledNames()),
        broker, std::int64_t(QDateTime::currentMSecsSinceEpoch() - UnsettledForMs));
    if (!rows)
        return rows.error();
    auto lists = storage::collect(*rows, keptBlobs);
    if (!lists)
        return lists.error();
    QList<Digest> all;
    for (const auto& list : *lists)
        all.append(list);
    return all;
}

Status ResultLog::advance(const QString& assignment, NodeResultState state, const QString& paid, const QString& detail)
{
    const auto now = QDateTime::currentMSecsSinceEpoch();
    return storage::execute(*m_db,
        QStringLiteral(
            "UPDATE results SET state = ?, paid = CASE WHEN ? = '' THEN paid ELSE ? END, "
            "detail = CASE WHEN ? = '' THEN detail ELSE ? END, history = json_insert(history, '$[#]', json(?)), updated_at = ? "
            "WHERE assignment = ?"),
        nameOf(state), paid, paid, detail, detail, entry(state, now), static_cast<std::int64_t>(now), assignment);
}

QJsonObject ResultEntry::toJson() const
{
    QJsonArray steps;
    for (const auto& step : history)
        steps.append(QJsonObject {
            { QStringLiteral("state"), nameOf(step.state) }, { QStringLiteral("at"), static_cast<qint64>(step.at) } });
    return QJsonObject {
        { QStringLiteral("assignment"), assignment },
        { QStringLiteral("broker"), broker },
        { QStringLiteral("jobId"), jobId },
        { QStringLiteral("round"), static_cast<qint64>(round) },
        { QStringLiteral("shard"), static_cast<qint64>(shard) },
        { QStringLiteral("state"), nameOf(state) },
        { QStringLiteral("finalHash"), finalHash },
        { QStringLiteral("paid"), paid },
        { QStringLiteral("detail"), detail },
        { QStringLiteral("history"), steps },
    };
}

Result<QList<ResultEntry>> ResultLog::list(int limit)
{
    auto rows = storage::query(*m_db,
        QStringLiteral("SELECT assignment, broker, job, round, shard, state, final_hash, paid, detail, history FROM results "
                       "ORDER BY updated_at DESC LIMIT ?"),
        static_cast<std::int64_t>(limit));
    if (!rows)
        return rows.error();
    return storage::collect(*rows, [](storage::Statement& row) {
        ResultEntry entry { row.columnText(0), row.columnText(1), row.columnText(2), row.columnInt(3), row.columnInt(4),
            stateNamed(row.columnText(5)), row.columnText(6), row.columnText(7), row.columnText(8), {} };
        for (const auto& value : QJsonDocument::fromJson(row.columnText(9).toUtf8()).array()) {
            const auto step = value.toObject();
            entry.history.append(
                { stateNamed(step.value(QStringLiteral("state")).toString()), step.value(QStringLiteral("at")).toInteger() });
        }
        return entry;
    });
}

} // namespace tessera::core
