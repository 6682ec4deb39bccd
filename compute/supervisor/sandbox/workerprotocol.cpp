#include "workerprotocol.h"

#include <QJsonDocument>
#include <QStringList>

#include <QList>

namespace tessera::compute::sandbox::protocol {

namespace {

// A whole number that the line spells as one (no sign games, no trailing text).
template<typename Text> std::optional<std::int64_t> wholeOf(const Text& text)
{
    bool ok = false;
    const auto value = text.toLongLong(&ok);
    return ok ? std::optional<std::int64_t>(value) : std::nullopt;
}

} // namespace

QString requests::step(std::int64_t steps)
{
    return QStringLiteral("step %1").arg(steps);
}

std::optional<std::int64_t> requests::stepsOf(const QString& request)
{
    const auto fields = request.split(u' ');
    if (fields.size() != 2 || fields[0] != u"step")
        return std::nullopt;
    const auto steps = wholeOf(fields[1]);
    return steps && *steps >= 0 ? steps : std::nullopt;
}

QString answers::ok(std::int64_t completed)
{
    return QStringLiteral("ok %1").arg(completed);
}

QString answers::error(const QString& message)
{
    return QStringLiteral("error ") + message.simplified();
}

std::optional<QString> answers::errorOf(const QString& answer)
{
    if (!answer.startsWith(QStringLiteral("error ")))
        return std::nullopt;
    return answer.mid(6);
}

QString answers::stepped(const Stepped& stepped)
{
    return QStringLiteral("stepped %1 %2 %3").arg(stepped.completed).arg(stepped.loss, 0, 'g', 9).arg(stepped.busyNs);
}

std::optional<answers::Stepped> answers::steppedOf(const QString& answer)
{
    const auto fields = answer.split(u' ');
    if (fields.size() != 4 || fields[0] != u"stepped")
        return std::nullopt;
    const auto completed = wholeOf(fields[1]), busyNs = wholeOf(fields[3]);
    bool ok = false;
    const double loss = fields[2].toDouble(&ok);
    if (!completed || !busyNs || !ok)
        return std::nullopt;
    return Stepped { *completed, loss, *busyNs };
}

QByteArray lines::progress(const Progress& progress)
{
    return QByteArrayLiteral("progress ") + QByteArray::number(progress.step) + ' ' + QByteArray::number(progress.steps) + ' '
        + QByteArray::number(progress.loss, 'g', 9) + ' ' + QByteArray::number(progress.busyMs);
}

std::optional<lines::Progress> lines::progressOf(const QByteArray& line)
{
    const auto fields = line.split(' ');
    if (fields.size() != 5 || fields[0] != "progress")
        return std::nullopt;
    const auto step = wholeOf(fields[1]), steps = wholeOf(fields[2]), busyMs = wholeOf(fields[4]);
    bool ok = false;
    const double loss = fields[3].toDouble(&ok);
    if (!step || !steps || !busyMs || !ok)
        return std::nullopt;
    return Progress { *step, *steps, loss, *busyMs };
}

QByteArray lines::benchmark(const BenchmarkProgress& progress)
{
    return QByteArrayLiteral("benchmark ") + progress.name.toUtf8() + ' ' + QByteArray::number(progress.repetition);
}

std::optional<lines::BenchmarkProgress> lines::benchmarkOf(const QByteArray& line)
{
    const auto fields = line.split(' ');
    if (fields.size() != 3 || fields[0] != "benchmark")
        return std::nullopt;
    const auto repetition = wholeOf(fields[2]);
    if (!repetition)
        return std::nullopt;
    return BenchmarkProgress { QString::fromUtf8(fields[1]), int(*repetition) };
}

namespace requests {

QString ask(const QJsonObject& question)
{
    return QStringLiteral("ask ") + QString::fromUtf8(QJsonDocument(question).toJson(QJsonDocument::Compact));
}

std::optional<QJsonObject> questionOf(const QString& request)
{
    if (!request.startsWith(u"ask "))
        return std::nullopt;
    const auto document = QJsonDocument::fromJson(request.mid(4).toUtf8());
    return document.isObject() ? std::optional<QJsonObject>(document.object()) : std::nullopt;
}

} // namespace requests

namespace answers {

QString tokens(std::int64_t from, const QList<std::int64_t>& tokens)
{
    QStringList list;
    for (const auto token : tokens)
        list.append(QString::number(token));
    return QStringLiteral("tokens %1 %2").arg(from).arg(list.join(u','));
}

std::optional<std::pair<std::int64_t, QList<std::int64_t>>> tokensOf(const QString& answer)
{
    const auto parts = answer.split(u' ');
    if (parts.size() != 3 || parts[0] != u"tokens")
        return std::nullopt;
    bool ok = false;
    const auto from = parts[1].toLongLong(&ok);
    if (!ok)
        return std::nullopt;
    QList<std::int64_t> list;
    for (const auto& token : parts[2].split(u',')) {
        list.append(token.toLongLong(&ok));
        if (!ok)
            return std::nullopt;
    }
    return std::pair { from, list };
}

QString answered(const QByteArray& line)
{
    return QStringLiteral("answered ") + QString::fromUtf8(line);
}

std::optional<QByteArray> answeredOf(const QString& answer)
{
    if (!answer.startsWith(u"answered "))
        return std::nullopt;
    return answer.mid(9).toUtf8();
}

} // namespace answers

} // namespace tessera::compute::sandbox::protocol

namespace tessera::compute::sandbox::protocol {

namespace {

QByteArray addressOf(const links::Address& address)
{
    return QByteArray::number(address.peer) + ' ' + core::nameOf(address.kind).toLatin1() + ' ' + QByteArray::number(address.step)
        + ' ' + QByteArray::number(address.micro);
}

// PEER KIND STEP MICRO from fields[1..4]: whole numbers, none negative, and a kind by its name.
std::optional<links::Address> addressOf(const QList<QByteArray>& fields)
{
    const auto peer = wholeOf(fields[1]), step = wholeOf(fields[3]), micro = wholeOf(fields[4]);
    const auto kind = core::tensorKindNamed(QString::fromLatin1(fields[2]));
    if (!peer || !step || !micro || !kind || *peer < 0 || *step < 0 || *micro < 0)
        return std::nullopt;
    return links::Address { *peer, *kind, *step, *micro };
}

// The first `count` space-separated fields of `line` and where the rest starts (-1: fewer fields).
std::pair<QList<QByteArray>, qsizetype> leadingFields(const QByteArray& line, int count)
{
    QList<QByteArray> fields;
    qsizetype at = 0;
    while (int(fields.size()) < count) {
        const qsizetype space = line.indexOf(' ', at);
        if (space < 0)
            return { fields, -1 };
        fields.append(line.mid(at, space - at));
        at = space + 1;
    }
    return { fields, at };
}

// Standard base64 of line[from..], read in place.
std::optional<QByteArray> base64Of(const QByteArray& line, qsizetype from)
{
    const auto tail = QByteArray::fromRawData(line.constData() + from, line.size() - from);
    auto decoded = QByteArray::fromBase64Encoding(tail, QByteArray::AbortOnBase64DecodingErrors);
    if (!decoded)
        return std::nullopt;
    return QByteArray(*decoded); // detached from `line`
}

} // namespace

QByteArray links::send(const Address& to, const QByteArray& bytes)
{
    return QByteArrayLiteral("send ") + addressOf(to) + ' ' + bytes.toBase64();
}

std::optional<std::pair<links::Address, QByteArray>> links::sendOf(const QByteArray& line)
{
    const auto [fields, rest] = leadingFields(line, 5);
    if (rest < 0 || fields[0] != "send" || line.indexOf(' ', rest) >= 0)
        return std::nullopt;
    const auto address = addressOf(fields);
    auto bytes = address ? base64Of(line, rest) : std::nullopt;
    if (!bytes)
        return std::nullopt;
    return std::pair { *address, std::move(*bytes) };
}

QByteArray links::receive(const Address& from)
{
    return QByteArrayLiteral("receive ") + addressOf(from);
}

std::optional<links::Address> links::receiveOf(const QByteArray& line)
{
    const auto fields = line.split(' ');
    if (fields.size() != 5 || fields[0] != "receive")
        return std::nullopt;
    return addressOf(fields);
}

bool links::isLinkRequest(const QByteArray& line)
{
    return line.startsWith("send ") || line.startsWith("receive ");
}

QByteArray links::tensor(const QByteArray& bytes)
{
    return QByteArrayLiteral("tensor ") + bytes.toBase64();
}

std::optional<QByteArray> links::tensorOf(const QByteArray& line)
{
    if (!line.startsWith("tensor "))
        return std::nullopt;
    return base64Of(line, 7);
}

QString links::failed(const QString& message)
{
    return QStringLiteral("link-error ") + message.simplified();
}

std::optional<QString> links::failedOf(const QString& line)
{
    if (!line.startsWith(QStringLiteral("link-error ")))
        return std::nullopt;
    return line.mid(11);
}

} // namespace tessera::compute::sandbox::protocol
