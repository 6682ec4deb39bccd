#include "idle.h"

#include <QDBusConnection>
#include <QDBusInterface>
#include <QDBusReply>
#include <QDir>
#include <QFile>

namespace tessera::app {

namespace {

QString readLine(const QString& path)
{
    QFile file(path);
    return file.open(QIODevice::ReadOnly) ? QString::fromUtf8(file.readLine()).trimmed() : QString();
}

} // namespace

std::optional<std::int64_t> userIdleSeconds()
{
    auto bus = QDBusConnection::sessionBus();
    if (!bus.isConnected())
        return std::nullopt;
    {
        QDBusInterface mutter(QStringLiteral("org.gnome.Mutter.IdleMonitor"),
            QStringLiteral("/org/gnome/Mutter/IdleMonitor/Core"), QStringLiteral("org.gnome.Mutter.IdleMonitor"), bus);
        mutter.setTimeout(300);
        if (mutter.isValid()) {
            QDBusReply<quint64> reply = mutter.call(QStringLiteral("GetIdletime"));
            if (reply.isValid())
                return std::int64_t(reply.value() / 1000);
        }
    }
    QDBusInterface screensaver(QStringLiteral("org.freedesktop.ScreenSaver"), QStringLiteral("/org/freedesktop/ScreenSaver"),
        QStringLiteral("org.freedesktop.ScreenSaver"), bus);
    screensaver.setTimeout(300);
    if (screensaver.isValid()) {
        QDBusReply<uint> reply = screensaver.call(QStringLiteral("GetSessionIdleTime"));
        if (reply.isValid())
            return std::int64_t(reply.value() / 1000);
    }
    return std::nullopt;
}

bool onBattery()
{
    const QDir supplies(QStringLiteral("/sys/class/power_supply"));
    bool battery = false, online = false;
    for (const auto& name : supplies.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        const QString type = readLine(supplies.filePath(name + QStringLiteral("/type")));
        if (type == u"Battery" && readLine(supplies.filePath(name + QStringLiteral("/status"))) == u"Discharging")
            battery = true;
        if (type == u"Mains" && readLine(supplies.filePath(name + QStringLiteral("/online"))) == u"1")
            online = true;
    }
    return battery && !online;
}

} // namespace tessera::app
