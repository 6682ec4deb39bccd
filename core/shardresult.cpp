#include "shardresult.h"

#include "jsonreader.h"
#include "nodeinfo.h"
#include "shardtask.h"

#include <QJsonArray>

namespace tessera::core {

Digest Commitment::chainRootOf(const QList<Digest>& chain)
{
    Sha256 hasher;
    for (const auto& digest : chain)
        hasher.addData(digest.toRaw());
    return hasher.result();
}

Commitment ShardResult::commitment() const
{
    return { finalHash, Commitment::chainRootOf(checkpointHashes) };
}

QJsonObject ShardResult::commitmentDocument(const QString& assignment) const
{
    const auto hashes = commitment();
    QJsonObject document {
        { QStringLiteral("kind"), QLatin1String(CommitmentKind) },
        { QStringLiteral("assignment"), assignment },
        { QStringLiteral("jobId"), jobId },
        { QStringLiteral("round"), static_cast<qint64>(round) },
        { QStringLiteral("shard"), static_cast<qint64>(shard) },
        { QStringLiteral("finalHash"), hashes.finalHash.toHex() },
        { QStringLiteral("chainRoot"), hashes.chainRoot.toHex() },
    };
    if (!tensorsRoot.isNull()) // a stage task's; absent for every other, as before
        document.insert(QStringLiteral("tensorsRoot"), tensorsRoot.toHex());
    return document;
}

Result<ShardResult> ShardResult::fromJson(const QJsonObject& json)
{
    JsonReader reader(json);
    reader.allowOnly({ QStringLiteral("jobId"), QStringLiteral("round"), QStringLiteral("shard"), QStringLiteral("outcome"),
        QStringLiteral("failure"), QStringLiteral("finalHash"), QStringLiteral("checkpointHashes"),
        QStringLiteral("weightsSha256"), QStringLiteral("losses"), QStringLiteral("samplesProcessed"),
        QStringLiteral("wallTimeMs"), QStringLiteral("runtimeProfile"), QStringLiteral("tensorsRoot") });
    constexpr std::int64_t MaxIndex = std::int64_t(1) << 40;
    ShardResult result;
    result.jobId = reader.string(u"jobId");
    result.round = reader.integer(u"round", 0, MaxIndex);
    result.shard = reader.integer(u"shard", 0, MaxIndex);
    result.outcome = reader.named<Outcome>(u"outcome", QStringLiteral("an outcome"));

    if (result.outcome != Outcome::Completed) {
        result.failure = reader.text(u"failure", MaxFailureLength);
        if (reader.ok() && result.failure.isEmpty())
            reader.fail(u"failure", QStringLiteral("a failed or returned result must say why"));
    } else {
        result.finalHash = reader.digest(u"finalHash");
        result.checkpointHashes = reader.digestList(u"checkpointHashes", MaxCheckpoints);
        result.weightsSha256 = reader.digest(u"weightsSha256");
        result.tensorsRoot = reader.digest(u"tensorsRoot", Presence::Optional);
        if (reader.ok() && result.checkpointHashes.isEmpty())
            reader.fail(u"checkpointHashes", QStringLiteral("needs at least the hash at step 0"));
    }
    result.losses = reader.numberList(u"losses", MaxLosses, Presence::Optional);
    result.samplesProcessed = reader.integer(u"samplesProcessed", 0, std::int64_t(1) << 50, Presence::Optional);
    result.wallTimeMs = reader.integer(u"wallTimeMs", 0, std::int64_t(1) << 50, Presence::Optional);
    result.runtimeProfile = reader.string(u"runtimeProfile", Presence::Optional);
    if (!reader.ok())
        return reader.status().error();
    return result;
}

QJsonObject ShardResult::toJson() const
{
    QJsonObject json {
        { QStringLiteral("jobId"), jobId },
        { QStringLiteral("round"), static_cast<qint64>(round) },
        { QStringLiteral("shard"), static_cast<qint64>(shard) },
        { QStringLiteral("outcome"), nameOf(outcome) },
        { QStringLiteral("samplesProcessed"), static_cast<qint64>(samplesProcessed) },
        { QStringLiteral("wallTimeMs"), static_cast<qint64>(wallTimeMs) },
        { QStringLiteral("runtimeProfile"), runtimeProfile },
    };
    if (outcome != Outcome::Completed) {
        json.insert(QStringLiteral("failure"), failure.left(MaxFailureLength)); // the reader's limit
    } else {
        json.insert(QStringLiteral("finalHash"), finalHash.toHex());
        QJsonArray chain;
        for (const auto& digest : checkpointHashes)
            chain.append(digest.toHex());
        json.insert(QStringLiteral("checkpointHashes"), chain);
        json.insert(QStringLiteral("weightsSha256"), weightsSha256.toHex());
        if (!tensorsRoot.isNull())
            json.insert(QStringLiteral("tensorsRoot"), tensorsRoot.toHex());
    }
    QJsonArray lossArray;
    for (double loss : losses)
        lossArray.append(loss);
    json.insert(QStringLiteral("losses"), lossArray);
    return json;
}

ShardResult ShardResult::failedOf(const ShardTask& task, const QString& why)
{
    ShardResult result;
    result.jobId = task.jobId;
    result.round = task.round;
    result.shard = task.shard;
    result.outcome = Outcome::Failed;
    result.failure = why;
    if (task.portable)
        result.runtimeProfile = PortableProfile;
    return result;
}

bool ShardResult::failedInSandbox() const
{
    return outcome == Outcome::Failed && isSandboxFailure(failure);
}

bool ShardResult::isSandboxFailure(const QString& failure)
{
    for (const auto* reason : { "time limit:", "out of memory", "forbidden call:", "crash:" })
        if (failure.startsWith(QLatin1String(reason)))
            return true;
    return false;
}

} // namespace tessera::core
