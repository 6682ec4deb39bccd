#pragma once

#include <QJsonObject>
#include <QString>

#include <utility>
#include <vector>

namespace tessera::core::broker {

// Something the broker has to tell a node that did not ask: a dispute needs the training state at a
// checkpoint (CHECKPOINT), or the verdict on a result (VERDICT). docs/PROTOCOL.md.
struct Notice {
    // Stop: a stage task whose pipeline ended (docs/PROTOCOL.md, "Stage tasks"), sent as STOP.
    enum class Kind { CheckpointRequest, Verdict, Stop };
    Kind kind = Kind::Verdict;
    QString nodeId;
    QJsonObject body;
};

// What the broker's parts have to tell nodes, until the network loop takes it.
class Notices {
public:
    void add(Notice::Kind kind, const QString& nodeId, QJsonObject body)
    {
        if (!nodeId.isEmpty())
            m_notices.push_back({ kind, nodeId, std::move(body) });
    }
    std::vector<Notice> take() { return std::exchange(m_notices, {}); }

private:
    std::vector<Notice> m_notices;
};

} // namespace tessera::core::broker
