#include "stagetensors.h"

#include "shardtask.h"

#include <algorithm>

namespace tessera::core {

QString nameOf(TensorKind kind)
{
    switch (kind) {
    case TensorKind::Activation:
        return QStringLiteral("activation");
    case TensorKind::Gradient:
        return QStringLiteral("gradient");
    case TensorKind::Squares:
        return QStringLiteral("squares");
    }
    return {};
}

std::int64_t maxTensorBytes(const ShardTask& task, TensorKind kind)
{
    if (kind == TensorKind::Squares)
        return 64 * 1024;
    const auto micro = task.batchSize / std::max<std::int64_t>(task.microBatches, 1);
    return micro * task.model.context * task.model.width * std::int64_t(sizeof(float));
}

std::optional<TensorKind> tensorKindNamed(const QString& name)
{
    for (const auto kind : { TensorKind::Activation, TensorKind::Gradient, TensorKind::Squares }) {
        if (name == nameOf(kind))
            return kind;
    }
    return std::nullopt;
}

Digest stageTensorsRoot(const QList<StageTensor>& tensors)
{
    QList<QByteArray> lines;
    for (const auto& tensor : tensors) {
        lines.append(QByteArray(tensor.sent ? "sent " : "received ") + QByteArray::number(static_cast<qint64>(tensor.peer)) + ' '
            + nameOf(tensor.kind).toLatin1() + ' ' + QByteArray::number(static_cast<qint64>(tensor.step)) + ' '
            + QByteArray::number(static_cast<qint64>(tensor.micro)) + ' ' + tensor.digest.toHex().toLatin1() + '\n');
    }
    std::sort(lines.begin(), lines.end()); // whatever order they were traded in: the broker relays them in its own
    return Digest::ofBytes(lines.join());
}

QByteArray StageInputs::record(std::int64_t from, TensorKind kind, std::int64_t step, std::int64_t micro, const QByteArray& bytes)
{
    return QByteArray::number(static_cast<qint64>(from)) + ' ' + nameOf(kind).toLatin1() + ' '
        + QByteArray::number(static_cast<qint64>(step)) + ' ' + QByteArray::number(static_cast<qint64>(micro)) + ' '
        + QByteArray::number(bytes.size()) + '\n' + bytes;
}

Result<StageInputs> StageInputs::parse(const QByteArray& file)
{
    auto bad = [](const QString& why) { return Error { QStringLiteral("stageInputs"), why }; };
    const QByteArray magic(Magic);
    if (!file.startsWith(magic))
        return bad(QStringLiteral("not a stage's inputs (no \"tessera-stage-inputs 1\" line)"));
    StageInputs inputs;
    inputs.m_file = file;
    qsizetype at = magic.size();
    while (at < file.size()) {
        const auto end = file.indexOf('\n', at);
        if (end < 0 || end - at > 200)
            return bad(QStringLiteral("a damaged line at byte %1").arg(at));
        const auto fields = file.mid(at, end - at).split(' ');
        bool ok[4] = {};
        std::int64_t numbers[4] = {};
        const std::size_t positions[4] = { 0, 2, 3, 4 };
        for (std::size_t i = 0; i < 4 && fields.size() == 5; ++i)
            numbers[i] = fields[qsizetype(positions[i])].toLongLong(&ok[i]);
        const auto kind = fields.size() == 5 ? tensorKindNamed(QString::fromLatin1(fields[1])) : std::nullopt;
        if (!kind || !ok[0] || !ok[1] || !ok[2] || !ok[3] || numbers[0] < 0 || numbers[1] < 0 || numbers[2] < 0 || numbers[3] < 0)
            return bad(QStringLiteral("a damaged line at byte %1").arg(at));
        const auto size = numbers[3];
        if (size > file.size() - (end + 1))
            return bad(QStringLiteral("the tensor at byte %1 is cut short").arg(at));
        const Key key { numbers[0], int(*kind), numbers[1], numbers[2] };
        if (inputs.m_tensors.contains(key))
            return bad(QStringLiteral("a tensor twice, at byte %1").arg(at));
        inputs.m_tensors.emplace(key, std::pair { end + 1, qsizetype(size) });
        at = end + 1 + qsizetype(size);
    }
    return inputs;
}

std::optional<QByteArray> StageInputs::find(std::int64_t from, TensorKind kind, std::int64_t step, std::int64_t micro) const
{
    const auto it = m_tensors.find({ from, int(kind), step, micro });
    if (it == m_tensors.end())
        return std::nullopt;
    return m_file.mid(it->second.first, it->second.second);
}

} // namespace tessera::core
