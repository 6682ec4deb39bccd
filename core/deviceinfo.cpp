#include "deviceinfo.h"

#include "jsonreader.h"

#include <QJsonArray>

namespace tessera::core {

Result<DeviceInfo> DeviceInfo::fromJson(const QJsonObject& json)
{
    JsonReader reader(json);
    reader.allowOnly({ QStringLiteral("kind"), QStringLiteral("index"), QStringLiteral("name"), QStringLiteral("vendor"),
        QStringLiteral("memoryBytes"), QStringLiteral("cores"), QStringLiteral("features"), QStringLiteral("computeCapability"),
        QStringLiteral("pciBusId"), QStringLiteral("driverVersion"), QStringLiteral("temperatureCelsius"),
        QStringLiteral("powerWatts"), QStringLiteral("usable"), QStringLiteral("unusableReason") });
    DeviceInfo device;
    device.kind = reader.named<Kind>(u"kind", QStringLiteral("a device kind"));
    device.index = static_cast<int>(reader.integer(u"index", 0, 1024));
    device.name = reader.string(u"name");
    device.vendor = reader.string(u"vendor", Presence::Optional);
    device.memoryBytes = reader.integer(u"memoryBytes", 0, std::int64_t(1) << 52, Presence::Optional);
    device.cores = static_cast<int>(reader.integer(u"cores", 0, 1 << 20, Presence::Optional));
    device.features = reader.stringList(u"features", Presence::Optional);
    device.computeCapability = reader.string(u"computeCapability", Presence::Optional);
    device.pciBusId = reader.string(u"pciBusId", Presence::Optional);
    device.driverVersion = reader.string(u"driverVersion", Presence::Optional);
    device.temperatureCelsius = int(reader.integer(u"temperatureCelsius", -1, 1000, Presence::Optional, -1));
    device.powerWatts = int(reader.integer(u"powerWatts", -1, 100000, Presence::Optional, -1));
    device.usable = reader.boolean(u"usable");
    device.unusableReason = reader.string(u"unusableReason", Presence::Optional);
    if (reader.ok() && !device.usable && device.unusableReason.isEmpty())
        reader.fail(u"unusableReason", QStringLiteral("an unusable device must say why"));
    if (!reader.ok())
        return reader.status().error();
    return device;
}

QJsonObject DeviceInfo::toJson() const
{
    QJsonObject json {
        { QStringLiteral("kind"), nameOf(kind) },
        { QStringLiteral("index"), index },
        { QStringLiteral("name"), name },
        { QStringLiteral("memoryBytes"), static_cast<qint64>(memoryBytes) },
        { QStringLiteral("cores"), cores },
        { QStringLiteral("features"), QJsonArray::fromStringList(features) },
        { QStringLiteral("usable"), usable },
    };
    auto insertIfSet = [&json](const char* key, const QString& value) {
        if (!value.isEmpty())
            json.insert(QLatin1String(key), value);
    };
    if (temperatureCelsius >= 0)
        json.insert(QStringLiteral("temperatureCelsius"), temperatureCelsius);
    if (powerWatts >= 0)
        json.insert(QStringLiteral("powerWatts"), powerWatts);
    insertIfSet("vendor", vendor);
    insertIfSet("computeCapability", computeCapability);
    insertIfSet("pciBusId", pciBusId);
    insertIfSet("driverVersion", driverVersion);
    insertIfSet("unusableReason", unusableReason);
    return json;
}

QString deviceIdOf(const DeviceInfo& device)
{
    return QStringLiteral("%1:%2").arg(nameOf(device.kind)).arg(device.index);
}

} // namespace tessera::core
