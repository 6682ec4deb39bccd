#include "outputs.h"

#include "../shardtask.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonParseError>

#include <charconv>
#include <cmath>

namespace tessera::core::inference {

QByteArray formatFloat(float value)
{
    // std::to_chars with a precision writes what printf("%.9g") writes, several times faster.
    char buffer[32];
    const auto written = std::to_chars(buffer, buffer + sizeof buffer, double(value), std::chars_format::general, 9);
    return QByteArray(buffer, written.ptr - buffer);
}

QByteArray classifyLine(
    std::int64_t index, std::int64_t chosen, const float* probabilities, std::int64_t classes, std::optional<std::int64_t> label)
{
    // Written into one buffer (this runs once per input of a shard).
    QByteArray line;
    line.reserve(48 + 16 * classes);
    line.append("{\"index\":").append(QByteArray::number(qint64(index)));
    line.append(",\"class\":").append(QByteArray::number(qint64(chosen))).append(",\"probabilities\":[");
    char buffer[32];
    for (std::int64_t c = 0; c < classes; ++c) {
        if (c > 0)
            line.append(',');
        const auto written
            = std::to_chars(buffer, buffer + sizeof buffer, double(probabilities[c]), std::chars_format::general, 9);
        line.append(buffer, written.ptr - buffer);
    }
    line.append(']');
    if (label)
        line.append(",\"label\":").append(QByteArray::number(qint64(*label)));
    return line.append('}');
}

QByteArray scoreLine(std::int64_t index, float loss, std::int64_t tokens)
{
    return "{\"index\":" + QByteArray::number(qint64(index)) + ",\"loss\":" + formatFloat(loss)
        + ",\"tokens\":" + QByteArray::number(qint64(tokens)) + '}';
}

QByteArray generateLine(std::int64_t index, const QList<std::int64_t>& tokens, bool stopped)
{
    QByteArray line = "{\"index\":" + QByteArray::number(qint64(index)) + ",\"tokens\":[";
    for (qsizetype i = 0; i < tokens.size(); ++i) {
        if (i > 0)
            line += ',';
        line += QByteArray::number(qint64(tokens[i]));
    }
    return line + "],\"finish\":\"" + (stopped ? "stop" : "length") + "\"}";
}

QByteArray blobOf(const QList<QByteArray>& lines)
{
    QByteArray blob;
    qsizetype size = 0;
    for (const auto& line : lines)
        size += line.size() + 1;
    blob.reserve(size);
    for (const auto& line : lines)
        blob += line + '\n';
    return blob;
}

Digest batchHash(const QList<QByteArray>& lines)
{
    QByteArray digests;
    digests.reserve(lines.size() * Digest::Size);
    for (const auto& line : lines)
        digests += Digest::ofBytes(line).toRaw();
    return Digest::ofBytes(digests);
}

QList<Digest> chainOf(const Digest& startWeights, const QList<QByteArray>& lines, std::int64_t batchSize)
{
    QList<Digest> chain { startWeights };
    for (qsizetype first = 0; first < lines.size(); first += batchSize)
        chain.append(batchHash(lines.mid(first, batchSize)));
    return chain;
}

Result<QList<QByteArray>> linesOf(const QByteArray& blob)
{
    if (!blob.isEmpty() && !blob.endsWith('\n'))
        return Error { QStringLiteral("lines"), QStringLiteral("the last line does not end with a newline") };
    QList<QByteArray> lines = blob.split('\n');
    lines.removeLast(); // after the last '\n' (or the empty blob's one empty piece)
    return lines;
}

namespace {

std::optional<QJsonObject> parsed(const QByteArray& line)
{
    QJsonParseError error;
    const auto document = QJsonDocument::fromJson(line, &error);
    if (error.error != QJsonParseError::NoError || !document.isObject())
        return std::nullopt;
    return document.object();
}

bool isInteger(const QJsonValue& value, double min, double max)
{
    if (!value.isDouble())
        return false;
    const double d = value.toDouble();
    return d == std::floor(d) && d >= min && d <= max;
}

QStringList keysOf(InferenceSpec::Task task)
{
    switch (task) {
    case InferenceSpec::Task::Classify:
        return { QStringLiteral("class"), QStringLiteral("index"), QStringLiteral("probabilities") };
    case InferenceSpec::Task::Score:
        return { QStringLiteral("index"), QStringLiteral("loss"), QStringLiteral("tokens") };
    case InferenceSpec::Task::Generate:
    case InferenceSpec::Task::Serve:
        break;
    }
    return { QStringLiteral("finish"), QStringLiteral("index"), QStringLiteral("tokens") };
}

// What is wrong with one line of a shard (empty: nothing). classes: the first line's, which the
// others must have too.
QString lineFault(const ShardTask& task, const QJsonObject& line, std::int64_t index, qsizetype& classes)
{
    const auto& spec = *task.inference;
    auto keys = line.keys();
    keys.removeAll(QStringLiteral("label"));
    if (keys != keysOf(spec.task) || (line.contains(u"label") && spec.task != InferenceSpec::Task::Classify))
        return QStringLiteral("its fields are not a %1 line's").arg(nameOf(spec.task));
    if (line.value(u"index").toDouble() != double(index) || !isInteger(line.value(u"index"), 0, 1e15))
        return QStringLiteral("it is not input %1's").arg(index);
    switch (spec.task) {
    case InferenceSpec::Task::Classify: {
        const auto p = line.value(u"probabilities").toArray();
        if (p.isEmpty() || (classes > 0 && p.size() != classes))
            return QStringLiteral("its probabilities are not one per class");
        classes = p.size();
        for (const auto& value : p) {
            if (!value.isDouble() || !(value.toDouble() >= 0.0 && value.toDouble() <= 1.0))
                return QStringLiteral("a probability is not a number from 0 to 1");
        }
        if (!isInteger(line.value(u"class"), 0, double(classes - 1)))
            return QStringLiteral("its class is not one of the %1").arg(classes);
        qsizetype largest = 0;
        for (qsizetype c = 1; c < p.size(); ++c)
            largest = p[c].toDouble() > p[largest].toDouble() ? c : largest;
        if (line.value(u"class").toInteger() != largest)
            return QStringLiteral("its class is not the first of the largest probability");
        if (line.contains(u"label") && !isInteger(line.value(u"label"), 0, 1e15))
            return QStringLiteral("its label is not a class");
        return {};
    }
    case InferenceSpec::Task::Score:
        if (!line.value(u"loss").isDouble() || !(line.value(u"loss").toDouble() >= 0.0)
            || !std::isfinite(line.value(u"loss").toDouble()))
            return QStringLiteral("its loss is not a finite number of at least 0");
        if (!isInteger(line.value(u"tokens"), 1, double(std::max<std::int64_t>(task.model.context, 1))))
            return QStringLiteral("its token count is not a window's");
        return {};
    case InferenceSpec::Task::Generate:
    case InferenceSpec::Task::Serve: // an answer is a generate line
        break;
    }
    const auto tokens = line.value(u"tokens").toArray();
    const auto finish = line.value(u"finish").toString();
    if (finish != u"stop" && finish != u"length")
        return QStringLiteral("its finish is neither stop nor length");
    if (finish == u"length" ? tokens.size() != spec.maxTokens : tokens.size() > spec.maxTokens - 1)
        return QStringLiteral("%1 tokens do not end with %2 at maxTokens %3").arg(tokens.size()).arg(finish).arg(spec.maxTokens);
    for (const auto& token : tokens) {
        if (!isInteger(token, 0, 255))
            return QStringLiteral("a token is not a byte");
    }
    return {};
}

} // namespace

Status checkLines(const ShardTask& task, const QList<QByteArray>& lines)
{
    qsizetype classes = 0;
    for (qsizetype k = 0; k < lines.size(); ++k) {
        const auto index = task.sampleBegin + k;
        const auto object = parsed(lines[k]);
        if (!object)
            return Error { FormField, QStringLiteral("the line of input %1 is not a JSON object").arg(index) };
        if (const auto fault = lineFault(task, *object, index, classes); !fault.isEmpty())
            return Error { FormField, QStringLiteral("the line of input %1: %2").arg(index).arg(fault) };
    }
    return {};
}

Status checkRevealed(const ShardTask& task, const QByteArray& blob, const QList<Digest>& chain)
{
    auto fail = [](const QString& why) { return Error { QStringLiteral("weightsSha256"), why }; };
    if (!task.inference)
        return fail(QStringLiteral("the task is not an inference task"));
    if (blob.size() > MaxShardBytes)
        return fail(QStringLiteral("%1 bytes of lines, more than a shard's %2").arg(blob.size()).arg(MaxShardBytes));
    auto lines = linesOf(blob);
    if (!lines)
        return fail(lines.error().message);
    const auto inputs = task.sampleEnd - task.sampleBegin;
    if (lines->size() != inputs)
        return fail(QStringLiteral("%1 lines for the task's %2 inputs").arg(lines->size()).arg(inputs));
    const auto made = chainOf(task.startWeights, *lines, task.batchSize);
    if (chain.size() != made.size())
        return fail(QStringLiteral("a chain of %1 hashes for %2 batches").arg(chain.size()).arg(made.size() - 1));
    for (qsizetype j = 1; j < made.size(); ++j) {
        if (made[j] != chain[j])
            return fail(QStringLiteral("the lines of batch %1 (inputs from %2) do not hash to the chain's entry")
                            .arg(j - 1)
                            .arg(task.sampleBegin + (j - 1) * task.batchSize));
    }
    return checkLines(task, *lines);
}

Result<Summary> summarize(InferenceSpec::Task task, const QByteArray& blob)
{
    auto lines = linesOf(blob);
    if (!lines)
        return lines.error();
    Summary summary;
    double lossSum = 0.0;
    for (const auto& line : *lines) {
        const auto object = parsed(line);
        if (!object)
            return Error { QStringLiteral("lines"), QStringLiteral("line %1 is not a JSON object").arg(summary.inputs) };
        ++summary.inputs;
        if (task == InferenceSpec::Task::Classify && object->contains(u"label")) {
            ++summary.labelled;
            summary.correct += object->value(u"class").toDouble() == object->value(u"label").toDouble();
        } else if (task == InferenceSpec::Task::Score) {
            lossSum += object->value(u"loss").toDouble();
        } else if (task == InferenceSpec::Task::Generate) {
            summary.tokens += object->value(u"tokens").toArray().size();
        }
    }
    summary.meanLoss = summary.inputs > 0 ? lossSum / double(summary.inputs) : 0.0;
    return summary;
}

bool agreeWithin(InferenceSpec::Task task, const QByteArray& a, const QByteArray& b, QString* why)
{
    auto say = [&](const QString& what) {
        if (why)
            *why = what;
        return false;
    };
    const auto x = parsed(a), y = parsed(b);
    if (!x || !y)
        return say(QStringLiteral("a line is not JSON"));
    if (task == InferenceSpec::Task::Generate)
        return x->value(u"tokens") == y->value(u"tokens") || say(QStringLiteral("the completions differ"));
    if (x->value(u"label") != y->value(u"label") || x->value(u"index") != y->value(u"index"))
        return say(QStringLiteral("the lines are not of one input"));
    if (task == InferenceSpec::Task::Score) {
        if (x->value(u"tokens") != y->value(u"tokens"))
            return say(QStringLiteral("the windows differ"));
        const double l = x->value(u"loss").toDouble(), m = y->value(u"loss").toDouble();
        return std::abs(l - m) <= 1e-3 * std::max(std::abs(l), std::abs(m)) || say(QStringLiteral("the losses differ"));
    }
    if (x->value(u"class") != y->value(u"class"))
        return say(QStringLiteral("the classes differ"));
    const auto p = x->value(u"probabilities").toArray(), q = y->value(u"probabilities").toArray();
    if (p.size() != q.size())
        return say(QStringLiteral("the class counts differ"));
    for (qsizetype c = 0; c < p.size(); ++c) {
        if (!(std::abs(p[c].toDouble() - q[c].toDouble()) <= 1e-3))
            return say(QStringLiteral("the probabilities of class %1 differ").arg(c));
    }
    return true;
}

std::int64_t firstDifferingToken(const QByteArray& a, const QByteArray& b)
{
    const auto x = parsed(a), y = parsed(b);
    if (!x || !y)
        return 0;
    const auto s = x->value(u"tokens").toArray(), t = y->value(u"tokens").toArray();
    for (qsizetype i = 0; i < std::min(s.size(), t.size()); ++i) {
        if (s[i] != t[i])
            return i;
    }
    return s.size() == t.size() ? -1 : std::min(s.size(), t.size());
}

QByteArray withText(const QByteArray& blob)
{
    auto lines = linesOf(blob);
    if (!lines)
        return blob;
    for (auto& line : *lines) {
        auto object = parsed(line);
        if (!object || !object->contains(u"finish"))
            continue;
        QByteArray bytes;
        for (const auto& token : object->value(u"tokens").toArray())
            bytes.append(char(token.toInt()));
        // Appended as the last key, so the rest of the line keeps its bytes.
        line.chop(1);
        line += ",\"text\":" + QJsonDocument(QJsonArray { QString::fromUtf8(bytes) }).toJson(QJsonDocument::Compact).mid(1);
        line.chop(1);
        line += '}';
    }
    return blobOf(*lines);
}

} // namespace tessera::core::inference
