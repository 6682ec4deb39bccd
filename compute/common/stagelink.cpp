#include "stagelink.h"

namespace tessera::compute {

const char* kindName(StageLink::Kind kind)
{
    switch (kind) {
    case StageLink::Kind::Activation:
        return "activation";
    case StageLink::Kind::Gradient:
        return "gradient";
    case StageLink::Kind::Squares:
        return "squares";
    }
    return "?";
}

core::Digest stageTensorsRoot(const QList<StageTensor>& tensors)
{
    QByteArray lines;
    for (const auto& tensor : tensors) {
        lines += tensor.sent ? "sent " : "received ";
        lines += QByteArray::number(static_cast<qint64>(tensor.peer)) + ' ' + kindName(tensor.kind) + ' '
            + QByteArray::number(static_cast<qint64>(tensor.step)) + ' ' + QByteArray::number(static_cast<qint64>(tensor.micro))
            + ' ' + tensor.digest.toHex().toLatin1() + '\n';
    }
    return core::Digest::ofBytes(lines);
}

} // namespace tessera::compute
