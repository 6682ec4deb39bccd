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
    JsonReader reader(json);
    reader.allowOnly({ QStringLiteral("nodeId"), QStringLiteral("name"), QStringLiteral("softwareVersion"),
        QStringLiteral("runtimeProfile"), QStringLiteral("devices"), QStringLiteral("benchmarkSamplesPerSecond"),
        QStringLiteral("maxThreads"), QStringLiteral("maxMemoryMiB"), QStringLiteral("signingKey") });
    NodeInfo node;
    node.nodeId = reader.text(u"nodeId", MaxIdLength);
    node.name = reader.text(u"name", 100, Presence::Optional);
    node.softwareVersion = reader.text(u"softwareVersion", MaxVersionLength);
    node.runtimeProfile = reader.text(u"runtimeProfile", MaxProfileLength);
    node.benchmarkSamplesPerSecond = reader.number(u"benchmarkSamplesPerSecond", 0.0, 1e12, Presence::Optional);
    node.maxThreads = static_cast<int>(reader.integer(u"maxThreads", 1, 4096));
    node.maxMemoryMiB = reader.integer(u"maxMemoryMiB", 0, std::int64_t(1) << 40, Presence::Optional);
    node.signingKey = reader.text(u"signingKey", MaxKeyLength, Presence::Optional);
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
    return QJsonObject {
        { QStringLiteral("nodeId"), nodeId },
        { QStringLiteral("name"), name },
        { QStringLiteral("softwareVersion"), softwareVersion },
        { QStringLiteral("runtimeProfile"), runtimeProfile },
        { QStringLiteral("devices"), deviceArray },
        { QStringLiteral("benchmarkSamplesPerSecond"), benchmarkSamplesPerSecond },
        { QStringLiteral("maxThreads"), maxThreads },
        { QStringLiteral("maxMemoryMiB"), qint64(maxMemoryMiB) },
        { QStringLiteral("signingKey"), signingKey },
    };
}

} // namespace tessera::core
