#include "inferencespec.h"

#include <QJsonArray>

#include <limits>

namespace tessera::core {

namespace {

std::int64_t defaultBatch(InferenceSpec::Task task)
{
    switch (task) {
    case InferenceSpec::Task::Classify:
        return 100;
    case InferenceSpec::Task::Score:
        return 10;
    case InferenceSpec::Task::Generate:
    case InferenceSpec::Task::Serve:
        break;
    }
    return 1;
}

void readPrompts(JsonReader& reader, InferenceSpec& spec)
{
    if (spec.task != InferenceSpec::Task::Generate) {
        for (const auto* key : { u"prompts", u"maxTokens", u"temperature", u"seed", u"stop" }) {
            if (reader.has(key) && reader.ok())
                reader.fail(key, QStringLiteral("only a generate job has it"));
        }
        return;
    }
    auto prompts = reader.object(u"prompts");
    prompts.allowOnly({ QStringLiteral("text"), QStringLiteral("count"), QStringLiteral("file"), QStringLiteral("sha256") });
    const bool inFile = prompts.has(u"file") || prompts.has(u"sha256");
    if (inFile && prompts.has(u"text") && prompts.ok())
        prompts.fail(u"text", QStringLiteral("give the prompts as a file or as one text, not both"));
    if (inFile) {
        spec.promptsFile = prompts.string(u"file", Presence::Optional);
        spec.promptsSha256 = prompts.digest(u"sha256", Presence::Optional);
        // Counted by tessera-job when it uploads the file; the node checks it.
        spec.promptCount = prompts.integer(
            u"count", 1, InferenceSpec::MaxPrompts, spec.promptsFile.isEmpty() ? Presence::Required : Presence::Optional, 0);
    } else {
        spec.promptText = prompts.text(u"text", InferenceSpec::MaxPromptBytes).toUtf8();
        spec.promptCount = prompts.integer(u"count", 1, InferenceSpec::MaxPrompts, Presence::Optional, 1);
    }
    spec.maxTokens = reader.integer(u"maxTokens", 1, InferenceSpec::MaxTokens, Presence::Optional, 100);
    spec.temperature = reader.number(u"temperature", 0.0, 100.0, Presence::Optional, 0.8);
    spec.seed = reader.integer(u"seed", 0, std::int64_t(1) << 53, Presence::Optional, 0);
    for (const auto& stop : reader.stringList(u"stop", Presence::Optional)) {
        const auto bytes = stop.toUtf8();
        if (bytes.isEmpty() || bytes.size() > InferenceSpec::MaxStopBytes) {
            reader.fail(u"stop", QStringLiteral("each stop sequence is 1 to %1 bytes").arg(InferenceSpec::MaxStopBytes));
            break;
        }
        spec.stop.append(bytes);
    }
    if (spec.stop.size() > InferenceSpec::MaxStops && reader.ok())
        reader.fail(u"stop", QStringLiteral("at most %1 stop sequences").arg(InferenceSpec::MaxStops));
}

InferenceSpec::Determinism readDeterminism(JsonReader& reader)
{
    return reader.named(u"determinism", QStringLiteral("a determinism"), Presence::Optional, InferenceSpec::Determinism::Fast);
}

InferenceSpec readServeSpec(JsonReader& reader)
{
    reader.allowOnly({ QStringLiteral("task"), QStringLiteral("replicas"), QStringLiteral("seconds"), QStringLiteral("maxTokens"),
        QStringLiteral("threads"), QStringLiteral("checkShare"), QStringLiteral("determinism") });
    InferenceSpec spec;
    spec.task = InferenceSpec::Task::Serve;
    spec.batchSize = 1;
    spec.samplesPerShard = 1;
    spec.replicas = reader.integer(u"replicas", 1, InferenceSpec::MaxReplicas, Presence::Optional, 2);
    spec.seconds = reader.integer(u"seconds", 10, InferenceSpec::MaxServeSeconds, Presence::Optional, 3600);
    spec.maxTokens = reader.integer(u"maxTokens", 1, InferenceSpec::MaxTokens, Presence::Optional, 100);
    spec.threads = reader.integer(u"threads", 1, 256, Presence::Optional, 1);
    spec.checkShare = reader.number(u"checkShare", 0.0, 1.0, Presence::Optional, 0.05);
    spec.determinism = readDeterminism(reader);
    return spec;
}

} // namespace

InferenceSpec readInferenceSpec(JsonReader reader)
{
    if (reader.string(u"task", Presence::Optional) == u"serve")
        return readServeSpec(reader);
    reader.allowOnly({ QStringLiteral("task"), QStringLiteral("split"), QStringLiteral("batchSize"),
        QStringLiteral("samplesPerShard"), QStringLiteral("threads"), QStringLiteral("prompts"), QStringLiteral("maxTokens"),
        QStringLiteral("temperature"), QStringLiteral("seed"), QStringLiteral("stop"), QStringLiteral("determinism") });
    InferenceSpec spec;
    spec.task = reader.named(u"task", QStringLiteral("an inference task"), Presence::Required, InferenceSpec::Task::Classify);
    const bool generate = spec.task == InferenceSpec::Task::Generate;
    if (generate && reader.has(u"split") && reader.ok())
        reader.fail(u"split", QStringLiteral("a generate job reads prompts, not a split of the dataset"));
    spec.split = reader.named(u"split", QStringLiteral("a split"), Presence::Optional, InferenceSpec::Split::Test);
    const auto batch = defaultBatch(spec.task);
    spec.batchSize = reader.integer(u"batchSize", 1, generate ? 1 : InferenceSpec::MaxBatch, Presence::Optional, batch);
    spec.samplesPerShard = reader.integer(
        u"samplesPerShard", 1, InferenceSpec::MaxSamplesPerShard, Presence::Optional, generate ? 50 : 20 * spec.batchSize);
    if (reader.ok() && spec.samplesPerShard % spec.batchSize != 0)
        reader.fail(u"samplesPerShard",
            QStringLiteral("%1 is not a multiple of the batch size %2").arg(spec.samplesPerShard).arg(spec.batchSize));
    if (reader.ok() && spec.samplesPerShard / spec.batchSize > InferenceSpec::MaxStepsPerShard)
        reader.fail(u"samplesPerShard",
            QStringLiteral("%1 inputs are %2 batches of %3, more than a shard's %4")
                .arg(spec.samplesPerShard)
                .arg(spec.samplesPerShard / spec.batchSize)
                .arg(spec.batchSize)
                .arg(InferenceSpec::MaxStepsPerShard));
    spec.threads = reader.integer(u"threads", 1, 256, Presence::Optional, 1);
    spec.determinism = readDeterminism(reader);
    readPrompts(reader, spec);
    return spec;
}

QJsonObject inferenceSpecToJson(const InferenceSpec& spec)
{
    QJsonObject json;
    if (spec.portable()) // absent means fast: what nodes from before portable inference read
        json.insert(QStringLiteral("determinism"), nameOf(spec.determinism));
    if (spec.serves()) {
        json.insert(QStringLiteral("task"), nameOf(spec.task));
        json.insert(QStringLiteral("replicas"), qint64(spec.replicas));
        json.insert(QStringLiteral("seconds"), qint64(spec.seconds));
        json.insert(QStringLiteral("maxTokens"), qint64(spec.maxTokens));
        json.insert(QStringLiteral("threads"), qint64(spec.threads));
        json.insert(QStringLiteral("checkShare"), spec.checkShare);
        return json;
    }
    json.insert(QStringLiteral("task"), nameOf(spec.task));
    json.insert(QStringLiteral("batchSize"), qint64(spec.batchSize));
    json.insert(QStringLiteral("samplesPerShard"), qint64(spec.samplesPerShard));
    json.insert(QStringLiteral("threads"), qint64(spec.threads));
    if (spec.task != InferenceSpec::Task::Generate) {
        json.insert(QStringLiteral("split"), nameOf(spec.split));
        return json;
    }
    QJsonObject prompts { { QStringLiteral("count"), qint64(spec.promptCount) } };
    if (!spec.promptsSha256.isNull())
        prompts.insert(QStringLiteral("sha256"), spec.promptsSha256.toHex());
    if (!spec.promptsFile.isEmpty())
        prompts.insert(QStringLiteral("file"), spec.promptsFile);
    if (!spec.promptsInFile())
        prompts.insert(QStringLiteral("text"), QString::fromUtf8(spec.promptText));
    QJsonArray stop;
    for (const auto& bytes : spec.stop)
        stop.append(QString::fromUtf8(bytes));
    json.insert(QStringLiteral("prompts"), prompts);
    json.insert(QStringLiteral("maxTokens"), qint64(spec.maxTokens));
    json.insert(QStringLiteral("temperature"), spec.temperature);
    json.insert(QStringLiteral("seed"), qint64(spec.seed));
    json.insert(QStringLiteral("stop"), stop);
    return json;
}

} // namespace tessera::core
