#include "machines.h"

#include <core/credits.h>
#include <core/privatefile.h>
#include <core/readfile.h>

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>

#include <algorithm>
#include <limits>

namespace tessera::app {

namespace {

constexpr int MaxMachines = 64;

// A node's word for its state, as a word: letters only, short (it is shown and counted).
QString stateWord(const QJsonObject& state)
{
    QString word = state.value(QStringLiteral("state")).toString().left(32);
    word.removeIf([](QChar c) { return !c.isLetter(); });
    return word;
}

// n + 1 for a 0-based round, shard or stage, whatever a node sends.
qint64 ordinal(const QJsonValue& value)
{
    const qint64 n = value.toInteger();
    return n >= 0 && n < std::numeric_limits<qint64>::max() ? n + 1 : 0;
}

QString shardOf(const QJsonObject& state)
{
    const auto shard = state.value(QStringLiteral("shard")).toObject();
    if (shard.isEmpty())
        return {};
    QString text = QStringLiteral("job %1, round %2, shard %3")
                       .arg(shard.value(QStringLiteral("job")).toString().left(24))
                       .arg(ordinal(shard.value(QStringLiteral("round"))))
                       .arg(ordinal(shard.value(QStringLiteral("shard"))));
    if (shard.contains(QStringLiteral("stages")))
        text += QStringLiteral(", stage %1 of %2")
                    .arg(ordinal(shard.value(QStringLiteral("stage"))))
                    .arg(shard.value(QStringLiteral("stages")).toInteger());
    return text
        + QStringLiteral(": step %1 of %2")
              .arg(shard.value(QStringLiteral("step")).toInteger())
              .arg(shard.value(QStringLiteral("steps")).toInteger());
}

// The hottest device that says its temperature.
QString temperatureOf(const QJsonObject& state)
{
    double hottest = -1.0;
    for (const auto& device : state.value(QStringLiteral("devices")).toArray()) {
        const auto value = device.toObject().value(QStringLiteral("temperatureC"));
        if (value.isDouble())
            hottest = std::max(hottest, value.toDouble());
    }
    return hottest < 0 ? QString() : QStringLiteral("%1 °C").arg(hottest, 0, 'f', 0);
}

core::Credits creditsOf(const QJsonObject& state, const QString& field)
{
    const auto parsed = core::Credits::parse(state.value(QStringLiteral("earnings")).toObject().value(field).toString());
    return parsed ? *parsed : core::Credits();
}

} // namespace

Machines::Machines(QString file, QObject* parent)
    : QObject(parent)
    , m_file(std::move(file))
{ }

std::unique_ptr<control::RemoteNode> Machines::watch(const control::ControlEndpoint& endpoint)
{
    auto remote = std::make_unique<control::RemoteNode>(endpoint);
    connect(remote.get(), &control::RemoteNode::changed, this, &Machines::changed);
    return remote;
}

core::Status Machines::load()
{
    if (!QFile::exists(m_file))
        return {};
    const auto bytes = core::readFile(m_file);
    const auto document = bytes ? QJsonDocument::fromJson(*bytes) : QJsonDocument();
    if (!document.isArray())
        return core::Error { m_file, QStringLiteral("is not a list of machines; the Machines tab starts empty") };
    QStringList refused;
    for (const auto& value : document.array()) {
        const QString pairing = value.toString();
        auto endpoint = control::parsePairing(pairing);
        if (!endpoint || int(m_nodes.size()) >= MaxMachines) {
            refused << pairing.section(u'#', 0, 0);
            continue;
        }
        m_nodes.push_back({ pairing, watch(*endpoint) });
    }
    watchLocal();
    if (!refused.isEmpty())
        return core::Error { m_file, QStringLiteral("left out: %1").arg(refused.join(QStringLiteral(", "))) };
    return {};
}

void Machines::setLocal(const control::ControlEndpoint& endpoint)
{
    m_local = endpoint;
    watchLocal();
}

void Machines::watchLocal()
{
    const bool others = std::any_of(m_nodes.begin(), m_nodes.end(), [](const Node& node) { return !node.pairing.isEmpty(); });
    const bool shown = !m_nodes.empty() && m_nodes.front().pairing.isEmpty();
    // This computer's row only beside others: alone it would keep a WebSocket to itself open, and
    // its API reading results every 2 s, in an app that should cost nothing at idle.
    if (others && !shown && m_local)
        m_nodes.insert(m_nodes.begin(), Node { QString(), watch(*m_local) });
    else if (!others && shown)
        m_nodes.erase(m_nodes.begin());
    Q_EMIT changed();
}

core::Status Machines::add(const QString& pairing)
{
    auto endpoint = control::parsePairing(pairing);
    if (!endpoint)
        return endpoint.error();
    for (const auto& node : m_nodes) {
        const auto& known = node.remote->endpoint();
        if (known.host == endpoint->host && known.port == endpoint->port)
            return core::Error { QStringLiteral("machine"),
                QStringLiteral("%1 is in the list already").arg(control::hostPort(known)) };
    }
    if (int(m_nodes.size()) >= MaxMachines)
        return core::Error { QStringLiteral("machine"), QStringLiteral("at most %1 machines").arg(MaxMachines) };
    m_nodes.push_back({ pairing.trimmed(), watch(*endpoint) });
    watchLocal();
    return save();
}

core::Status Machines::remove(int row)
{
    if (row < 0 || row >= count() || m_nodes[std::size_t(row)].pairing.isEmpty())
        return core::Error { QStringLiteral("machine"), QStringLiteral("this computer stays in the list") };
    m_nodes.erase(m_nodes.begin() + row);
    watchLocal();
    return save();
}

void Machines::act(int row, const QString& action)
{
    if (row >= 0 && row < count())
        m_nodes[std::size_t(row)].remote->act(action);
}

core::Status Machines::save() const
{
    QJsonArray list;
    for (const auto& node : m_nodes) {
        if (!node.pairing.isEmpty())
            list.append(node.pairing);
    }
    return core::writePrivateFile(m_file, QJsonDocument(list).toJson(), QStringLiteral("the list of machines"));
}

QList<ui::MachineRow> Machines::rows() const
{
    QList<ui::MachineRow> rows;
    for (const auto& node : m_nodes) {
        const auto& state = node.remote->state();
        ui::MachineRow row;
        row.address = node.pairing.isEmpty() ? tr("this computer") : control::hostPort(node.remote->endpoint());
        row.name = state.value(QStringLiteral("name")).toString().left(64);
        if (row.name.isEmpty())
            row.name = row.address;
        row.state = node.remote->connected() ? stateWord(state) : tr("unreachable");
        row.detail = node.remote->problem().isEmpty() ? state.value(QStringLiteral("reason")).toString().left(300)
                                                      : node.remote->problem().left(300);
        row.shard = node.remote->connected() ? shardOf(state) : QString();
        row.temperature = node.remote->connected() ? temperatureOf(state) : QString();
        row.today = creditsOf(state, QStringLiteral("today")).toString();
        row.week = creditsOf(state, QStringLiteral("week")).toString();
        row.removable = !node.pairing.isEmpty();
        rows.append(row);
    }
    return rows;
}

QString Machines::totals() const
{
    QMap<QString, int> states;
    core::Credits today, week;
    for (const auto& node : m_nodes) {
        const auto& state = node.remote->state();
        states[node.remote->connected() ? stateWord(state) : tr("unreachable")] += 1;
        today = today.checkedAdd(creditsOf(state, QStringLiteral("today"))).value_or(today);
        week = week.checkedAdd(creditsOf(state, QStringLiteral("week"))).value_or(week);
    }
    QStringList counts;
    for (auto it = states.cbegin(); it != states.cend(); ++it)
        counts << QStringLiteral("%1 %2").arg(it.value()).arg(it.key().isEmpty() ? tr("starting") : it.key());
    return (count() == 1 ? tr("1 machine") : tr("%1 machines").arg(count()))
        + tr(": %1; %2 credits today, %3 in 7 days").arg(counts.join(QStringLiteral(", ")), today.toString(), week.toString());
}

} // namespace tessera::app
