#include "nodeinfo.h"

#include "jsonreader.h"

#include <QJsonArray>

namespace tessera::core {

QString runtimeProfileFamily(const QString& profile)
{
    QStringList kept;
    for (const auto& part : profile.split(u';', Qt::SkipEmptyParts)) {
        if (!part.startsWith(u"threads="))
            kept.append(part);
    }
    return kept.join(u';');
}

bool reproduces(const QString& node, const QString& result)
{
    return result == PortableProfile || runtimeProfileFamily(node) == runtimeProfileFamily(result);
}

Result<NodeInfo> NodeInfo::fromJson(const QJsonObject& json)
{
    // Fields this broker does not know (a newer node's) are ignored and not kept: what a node can
    // run travels in capabilities, so nothing it says elsewhere changes what it is sent
    // (docs/PROTOCOL.md, "Capabilities").
    JsonReader reader(json);
    NodeInfo node;
    node.nodeId = reader.text(u"nodeId", MaxIdLength);
    node.name = reader.text(u"name", 100, Presence::Optional);
    node.softwareVersion = reader.text(u"softwareVersion", MaxVersionLength);
    node.runtimeProfile = reader.text(u"runtimeProfile", MaxProfileLength);
    // The portable profile is a result's: a node that claimed it would pass for every CPU.
    if (reader.ok() && runtimeProfileFamily(node.runtimeProfile) == PortableProfile)
        reader.fail(u"runtimeProfile", QStringLiteral("%1 is a portable result's profile, not a node's").arg(PortableProfile));
    node.benchmarkSamplesPerSecond = reader.number(u"benchmarkSamplesPerSecond", 0.0, 1e12, Presence::Optional);
    node.maxThreads = static_cast<int>(reader.integer(u"maxThreads", 1, 4096));
    node.maxMemoryMiB = reader.integer(u"maxMemoryMiB", 0, std::int64_t(1) << 40, Presence::Optional);
    node.signingKey = reader.text(u"signingKey", MaxKeyLength, Presence::Optional);
    // Capabilities the broker does not know are kept and never needed (a newer node's).
    node.capabilities = reader.stringList(u"capabilities", Presence::Optional);
    if (node.capabilities.size() > MaxCapabilities)
        reader.fail(QStringLiteral("capabilities"), QStringLiteral("at most %1 items").arg(MaxCapabilities));
    for (const auto& capability : std::as_const(node.capabilities)) {
        if (capability.isEmpty() || capability.size() > MaxCapabilityLength) {
            reader.fail(QStringLiteral("capabilities"), QStringLiteral("each is 1 to %1 characters").arg(MaxCapabilityLength));
            break;
        }
    }
    if (reader.has(u"swarm")) {
        auto swarmReader = reader.object(u"swarm");
        SwarmEndpoint endpoint;
        endpoint.key = swarmReader.text(u"key", SwarmEndpoint::MaxKeyLength);
        endpoint.port = int(swarmReader.integer(u"port", 0, 65535));
        endpoint.host = swarmReader.text(u"host", SwarmEndpoint::MaxHostLength, Presence::Optional);
        if (!endpoint.key.startsWith(u"-----BEGIN PUBLIC KEY-----"))
            swarmReader.fail(u"key", QStringLiteral("a PEM public key (-----BEGIN PUBLIC KEY-----)"));
        if (endpoint.host.contains(u':') || endpoint.host.contains(u' '))
            swarmReader.fail(u"host", QStringLiteral("an IPv4 address or a host name, without a port"));
        node.swarm = endpoint;
    }
    const auto deviceReaders = reader.objectList(u"devices", MaxDevices);
    for (qsizetype i = 0; i < deviceReaders.size() && reader.ok(); ++i) {
        auto device = DeviceInfo::fromJson(json.value(QStringLiteral("devices")).toArray().at(i).toObject());
        if (!device) {
            const auto& error = device.error();
            reader.fail(QStringLiteral("devices[%1].%2").arg(i).arg(error.field), error.message);
            break;
        }
        node.devices.append(*device);
    }
    if (!reader.ok())
        return reader.status().error();
    return node;
}

QJsonObject NodeInfo::toJson() const
{
    QJsonArray deviceArray;
    for (const auto& device : devices)
        deviceArray.append(device.toJson());
    QJsonObject json {
        { QStringLiteral("nodeId"), nodeId },
        { QStringLiteral("name"), name },
        { QStringLiteral("softwareVersion"), softwareVersion },
        { QStringLiteral("runtimeProfile"), runtimeProfile },
        { QStringLiteral("devices"), deviceArray },
        { QStringLiteral("benchmarkSamplesPerSecond"), benchmarkSamplesPerSecond },
        { QStringLiteral("maxThreads"), maxThreads },
        { QStringLiteral("maxMemoryMiB"), qint64(maxMemoryMiB) },
        { QStringLiteral("signingKey"), signingKey },
        { QStringLiteral("capabilities"), QJsonArray::fromStringList(capabilities) },
    };
    if (swarm) {
        QJsonObject endpoint { { QStringLiteral("key"), swarm->key }, { QStringLiteral("port"), swarm->port } };
        if (!swarm->host.isEmpty())
            endpoint.insert(QStringLiteral("host"), swarm->host);
        json.insert(QStringLiteral("swarm"), endpoint);
    }
    return json;
}

} // namespace tessera::core
