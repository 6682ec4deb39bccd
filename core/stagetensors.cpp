#include "stagetensors.h"

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

} // namespace tessera::core
