#include "records.h"

#include <QDateTime>
#include <QJsonArray>
#include <QTimeZone>

namespace tessera::core::broker {

namespace {

std::int64_t integer(const QJsonObject& json, const char* key, std::int64_t fallback = 0)
{
    return json.value(QLatin1String(key)).toInteger(fallback);
}

QString text(const QJsonObject& json, const char* key)
{
    return json.value(QLatin1String(key)).toString();
}

Credits credits(const QJsonObject& json, const char* key)
{
    return Credits::parse(text(json, key)).value_or(Credits {});
}

Digest digest(const QJsonObject& json, const char* key)
{
    return Digest::fromHex(text(json, key)).value_or(Digest {});
}

} // namespace

QJsonObject JobStatus::toJson() const
{
    QJsonArray rounds;
    for (const auto& r : history) {
        rounds.append(QJsonObject {
            { QStringLiteral("round"), static_cast<qint64>(r.round) },
            { QStringLiteral("testLoss"), r.testLoss },
            { QStringLiteral("testAccuracy"), r.testAccuracy },
            { QStringLiteral("trainLoss"), r.trainLoss },
            { QStringLiteral("weightsHash"), r.weightsHash.toHex() },
            { QStringLiteral("finishedAt"),
                QDateTime::fromMSecsSinceEpoch(r.finishedAt, QTimeZone::utc()).toString(Qt::ISODateWithMs) },
        });
    }
    QJsonObject json {
        { QStringLiteral("jobId"), id },
        { QStringLiteral("name"), name },
        { QStringLiteral("state"), nameOf(state) },
        { QStringLiteral("round"), static_cast<qint64>(round) },
        { QStringLiteral("rounds"), static_cast<qint64>(this->rounds) },
        { QStringLiteral("history"), rounds },
        { QStringLiteral("weightsHash"), weightsHash.toHex() },
        { QStringLiteral("weightsSha256"), weightsBlob.toHex() },
        { QStringLiteral("owner"), owner },
        { QStringLiteral("escrow"), escrow.toString() },
        { QStringLiteral("pricePerShard"), pricePerShard.toString() },
        { QStringLiteral("shards"), static_cast<qint64>(shards) },
        { QStringLiteral("shardsDone"), static_cast<qint64>(shardsDone) },
    };
    if (!inference.isEmpty())
        json.insert(QStringLiteral("inference"), inference);
    if (!serving.isEmpty())
        json.insert(QStringLiteral("serving"), serving);
    if (!pipelines.isEmpty())
        json.insert(QStringLiteral("pipelines"), pipelines);
    if (!failure.isEmpty())
        json.insert(QStringLiteral("failure"), failure);
    if (!spec.isEmpty())
        json.insert(QStringLiteral("spec"), spec);
    if (languageModel)
        json.insert(QStringLiteral("languageModel"), true);
    return json;
}

QJsonObject JobStatus::toPublicJson() const
{
    return QJsonObject {
        { QStringLiteral("jobId"), id },
        { QStringLiteral("state"), nameOf(state) },
        { QStringLiteral("round"), static_cast<qint64>(round) },
        { QStringLiteral("rounds"), static_cast<qint64>(rounds) },
        { QStringLiteral("shards"), static_cast<qint64>(shards) },
        { QStringLiteral("shardsDone"), static_cast<qint64>(shardsDone) },
    };
}

JobStatus JobStatus::fromJson(const QJsonObject& json)
{
    JobStatus job;
    job.id = text(json, "jobId");
    job.name = text(json, "name");
    job.state = fromName<JobState>(text(json, "state")).value_or(JobState::Running);
    job.round = integer(json, "round");
    job.rounds = integer(json, "rounds");
    job.shards = integer(json, "shards");
    job.shardsDone = integer(json, "shardsDone");
    job.inference = text(json, "inference");
    job.serving = json.value(QStringLiteral("serving")).toObject();
    job.pipelines = json.value(QStringLiteral("pipelines")).toArray();
    for (const auto& value : json.value(QStringLiteral("history")).toArray()) {
        const auto r = value.toObject();
        job.history.append({ integer(r, "round"), r.value(QStringLiteral("testLoss")).toDouble(),
            r.value(QStringLiteral("testAccuracy")).toDouble(), r.value(QStringLiteral("trainLoss")).toDouble(),
            digest(r, "weightsHash"), {}, QDateTime::fromString(text(r, "finishedAt"), Qt::ISODateWithMs).toMSecsSinceEpoch() });
    }
    job.weightsHash = digest(json, "weightsHash");
    job.weightsBlob = digest(json, "weightsSha256");
    job.failure = text(json, "failure");
    job.owner = text(json, "owner");
    job.escrow = credits(json, "escrow");
    job.pricePerShard = credits(json, "pricePerShard");
    job.spec = json.value(QStringLiteral("spec")).toObject();
    job.languageModel = json.value(QStringLiteral("languageModel")).toBool();
    job.full = json.contains(QStringLiteral("weightsSha256"));
    return job;
}

QJsonObject NodeRecord::toJson() const
{
    QJsonObject json {
        { QStringLiteral("nodeId"), nodeId },
        { QStringLiteral("name"), name },
        { QStringLiteral("runtimeProfile"), runtimeProfile },
        { QStringLiteral("benchmarkSamplesPerSecond"), benchmarkSamplesPerSecond },
        { QStringLiteral("online"), online },
        { QStringLiteral("firstSeen"), firstSeen },
        { QStringLiteral("lastSeen"), lastSeen },
        { QStringLiteral("shardsDone"), static_cast<qint64>(shardsDone) },
        { QStringLiteral("shardsFailed"), static_cast<qint64>(shardsFailed) },
        { QStringLiteral("verified"), static_cast<qint64>(verified) },
        { QStringLiteral("disputesLost"), static_cast<qint64>(disputesLost) },
        { QStringLiteral("timeouts"), static_cast<qint64>(timeouts) },
        { QStringLiteral("streak"), static_cast<qint64>(streak) },
        { QStringLiteral("slashed"), slashed.toString() },
        { QStringLiteral("stake"), stake.toString() },
    };
    if (balance)
        json.insert(QStringLiteral("balance"), balance->toString());
    return json;
}

NodeRecord NodeRecord::fromJson(const QJsonObject& json)
{
    NodeRecord node;
    node.nodeId = text(json, "nodeId");
    node.name = text(json, "name");
    node.runtimeProfile = text(json, "runtimeProfile");
    node.benchmarkSamplesPerSecond = json.value(QStringLiteral("benchmarkSamplesPerSecond")).toDouble();
    node.online = json.value(QStringLiteral("online")).toBool();
    node.firstSeen = text(json, "firstSeen");
    node.lastSeen = text(json, "lastSeen");
    node.shardsDone = integer(json, "shardsDone");
    node.shardsFailed = integer(json, "shardsFailed");
    node.verified = integer(json, "verified");
    node.disputesLost = integer(json, "disputesLost");
    node.timeouts = integer(json, "timeouts");
    node.streak = integer(json, "streak");
    node.slashed = credits(json, "slashed");
    node.stake = credits(json, "stake");
    if (json.contains(QStringLiteral("balance")))
        node.balance = credits(json, "balance");
    return node;
}

QJsonObject CheckRecord::toJson() const
{
    QJsonObject json {
        { QStringLiteral("id"), id },
        { QStringLiteral("kind"), kind },
        { QStringLiteral("jobId"), jobId },
        { QStringLiteral("round"), static_cast<qint64>(round) },
        { QStringLiteral("shard"), static_cast<qint64>(shard) },
        { QStringLiteral("checked"), checked },
        { QStringLiteral("verifier"), verifier },
        { QStringLiteral("state"), state },
        { QStringLiteral("outcome"), outcome },
        { QStringLiteral("detail"), detail },
    };
    if (checkpoint >= 0)
        json.insert(QStringLiteral("checkpoint"), static_cast<qint64>(checkpoint));
    return json;
}

CheckRecord CheckRecord::fromJson(const QJsonObject& json)
{
    CheckRecord check;
    check.id = text(json, "id");
    check.kind = text(json, "kind");
    check.jobId = text(json, "jobId");
    check.round = integer(json, "round");
    check.shard = integer(json, "shard");
    check.checked = text(json, "checked");
    check.verifier = text(json, "verifier");
    check.state = text(json, "state");
    check.checkpoint = integer(json, "checkpoint", -1);
    check.outcome = text(json, "outcome");
    check.detail = text(json, "detail");
    return check;
}

QJsonObject AccountRecord::toJson() const
{
    QJsonObject json { { QStringLiteral("account"), account }, { QStringLiteral("balance"), balance.toString() },
        { QStringLiteral("stake"), stake.toString() } };
    if (unbonding)
        json.insert(QStringLiteral("unbonding"), unbonding->toString());
    return json;
}

AccountRecord AccountRecord::fromJson(const QJsonObject& json)
{
    AccountRecord record { text(json, "account"), credits(json, "balance"), credits(json, "stake"), {} };
    if (json.contains(QStringLiteral("unbonding")))
        record.unbonding = credits(json, "unbonding");
    return record;
}

Result<TrainedModel> trainedModelOf(const JobStatus& status)
{
    const Error fail { QStringLiteral("model.fromJob"), {} };
    if (status.state != JobState::Finished || status.spec.isEmpty())
        return Error { fail.field,
            QStringLiteral("job %1 is %2: an inference job runs a finished job of yours").arg(status.id, nameOf(status.state)) };
    if (status.spec.value(QStringLiteral("kind")).toString() == u"inference")
        return Error { fail.field, QStringLiteral("job %1 ran inference; it trained nothing").arg(status.id) };
    TrainedModel trained { status.spec.value(QStringLiteral("model")).toObject(),
        status.spec.value(QStringLiteral("dataset")).toObject() };
    trained.model.insert(
        QStringLiteral("initialWeights"), QJsonObject { { QStringLiteral("sha256"), status.weightsBlob.toHex() } });
    return trained;
}

} // namespace tessera::core::broker
