#include "question.h"

#include "../shardtask.h"
#include "outputs.h"

#include <QJsonArray>
#include <QJsonDocument>

#include <algorithm>

namespace tessera::core::inference {

Result<Question> Question::read(const QJsonObject& json, std::int64_t mostTokens, const QString& field)
{
    JsonReader reader(json, field);
    reader.allowOnly({ QStringLiteral("prompt"), QStringLiteral("maxTokens"), QStringLiteral("temperature"),
        QStringLiteral("seed"), QStringLiteral("stop") });
    Question question;
    question.prompt = reader.text(u"prompt", MaxPromptBytes).toUtf8();
    if (reader.ok() && (question.prompt.isEmpty() || question.prompt.size() > MaxPromptBytes))
        reader.fail(u"prompt", QStringLiteral("a prompt is 1 to %1 bytes").arg(MaxPromptBytes));
    question.maxTokens = reader.integer(u"maxTokens", 1, std::max<std::int64_t>(mostTokens, 1), Presence::Optional,
        std::min<std::int64_t>(100, std::max<std::int64_t>(mostTokens, 1)));
    question.temperature = reader.number(u"temperature", 0.0, 100.0, Presence::Optional, 0.8);
    question.seed = reader.integer(u"seed", 0, std::int64_t(1) << 53, Presence::Optional, 0);
    for (const auto& stop : reader.stringList(u"stop", Presence::Optional)) {
        const auto bytes = stop.toUtf8();
        if (bytes.isEmpty() || bytes.size() > InferenceSpec::MaxStopBytes) {
            reader.fail(u"stop", QStringLiteral("each stop sequence is 1 to %1 bytes").arg(InferenceSpec::MaxStopBytes));
            break;
        }
        question.stop.append(bytes);
    }
    if (question.stop.size() > InferenceSpec::MaxStops && reader.ok())
        reader.fail(u"stop", QStringLiteral("at most %1 stop sequences").arg(InferenceSpec::MaxStops));
    if (!reader.ok())
        return reader.status().error();
    return question;
}

QJsonObject Question::toJson() const
{
    QJsonArray stops;
    for (const auto& bytes : stop)
        stops.append(QString::fromUtf8(bytes));
    return { { QStringLiteral("prompt"), QString::fromUtf8(prompt) }, { QStringLiteral("maxTokens"), qint64(maxTokens) },
        { QStringLiteral("temperature"), temperature }, { QStringLiteral("seed"), qint64(seed) },
        { QStringLiteral("stop"), stops } };
}

qsizetype Question::holdBack() const
{
    qsizetype longest = 0;
    for (const auto& bytes : stop)
        longest = std::max(longest, bytes.size());
    return std::max<qsizetype>(longest - 1, 0);
}

ShardTask answerTask(const ShardTask& replica, const Question& question)
{
    ShardTask task = replica;
    auto& spec = task.inference.emplace(replica.inference.value_or(InferenceSpec {}));
    spec.task = InferenceSpec::Task::Generate;
    spec.batchSize = 1;
    spec.samplesPerShard = 1;
    spec.promptText = question.prompt;
    spec.promptsSha256 = {};
    spec.promptsFile.clear();
    spec.promptCount = 1;
    spec.maxTokens = question.maxTokens;
    spec.temperature = question.temperature;
    spec.seed = question.seed;
    spec.stop = question.stop;
    task.sampleBegin = 0;
    task.sampleEnd = 1;
    task.localSteps = 1;
    task.batchSize = 1;
    task.checkpointInterval = 1;
    return task;
}

QJsonObject answerDocument(const QString& assignment, const QString& jobId, const QString& ticket, const QByteArray& line)
{
    return { { QStringLiteral("kind"), QLatin1String(AnswerKind) }, { QStringLiteral("assignment"), assignment },
        { QStringLiteral("jobId"), jobId }, { QStringLiteral("ticket"), ticket },
        { QStringLiteral("line"), Digest::ofBytes(line).toHex() } };
}

Result<Completion> completionOf(const QByteArray& line)
{
    QJsonParseError error;
    const auto document = QJsonDocument::fromJson(line, &error);
    const Error bad { QStringLiteral("line"), QStringLiteral("not a generate line") };
    if (error.error != QJsonParseError::NoError || !document.isObject())
        return bad;
    const auto object = document.object();
    const auto finish = object.value(u"finish").toString();
    if (!object.value(u"tokens").isArray() || (finish != u"stop" && finish != u"length"))
        return bad;
    Completion completion;
    completion.stopped = finish == u"stop";
    for (const auto& token : object.value(u"tokens").toArray()) {
        const auto value = token.toInteger(-1);
        if (!token.isDouble() || value < 0 || value > 255)
            return bad;
        completion.tokens.append(value);
    }
    return completion;
}

QString textOf(const QList<std::int64_t>& tokens)
{
    QByteArray bytes;
    for (const auto token : tokens)
        bytes.append(char(token));
    return QString::fromUtf8(bytes);
}

} // namespace tessera::core::inference
