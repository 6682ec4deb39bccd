#pragma once

#include <compute/common/types.h>
#include <core/deviceinfo.h>
#include <core/error.h>

#include <QDateTime>
#include <QJsonObject>
#include <QString>
#include <QVariant>

#include <functional>
#include <memory>
#include <optional>

namespace tessera::core::settings {
class Settings;
}
namespace tessera::compute {
class ComputeThread;
} // namespace tessera::compute

namespace tessera::app {

// A node's control API (docs/CONTROL.md, control::ControlServer) on a thread of its own:
// Control/Enabled, Control/Bind, Control/Port, and the token in the data folder. Besides its owner's
// state it serves the node's devices, earnings, results and log (NodeReport).
class NodeControl {
public:
    struct Identity {
        QString nodeId;
        QString name;
        QList<core::DeviceInfo> devices;
    };
    // One request's action, its arguments checked (docs/CONTROL.md, "Actions").
    struct Action {
        QString name; // "pause", "resume", "snooze", "finish", "device", "limits"
        std::uint64_t sequence = 0; // counts the actions taken, from 1
        QDateTime until; // snooze
        QString device; // device: "cpu:0"
        bool paused = false; // device
        QList<std::pair<QString, QVariant>> limits; // limits: settings, each valid (core::settings::validate)
    };
    // The limits the API sets, as settings keys: the desktop app takes all; tessera-node the first three.
    static const QStringList& limitKeys(bool desktop);

    // Serves a compute thread's state, and pauses, snoozes and resumes the thread itself
    // (tessera-node). Limits are written to the settings file, then handed to applyLimit. An error
    // says why not (the node runs on without it); null when Control/Enabled is false.
    using ApplyLimit = std::function<void(const QString& key, const QVariant& value)>;
    static core::Result<std::unique_ptr<NodeControl>> start(const core::settings::Settings& settings,
        const QString& dataDirectory, compute::ComputeThread& thread, const Identity& identity, const ApplyLimit& applyLimit);
    // Serves what its owner publishes, and hands it each action, called on the control thread (the
    // desktop app, whose tray must agree).
    using Act = std::function<void(const Action& action)>;
    static core::Result<std::unique_ptr<NodeControl>> start(
        const core::settings::Settings& settings, const QString& dataDirectory, const Identity& identity, const Act& act);
    // The owner's state (thread-safe): pushed to the API's WebSockets when it changed.
    struct Published {
        QString state; // "working", "waiting", "paused", "snoozed", "offline", "off", "error"
        QString reason;
        bool paused = false;
        std::optional<compute::ShardProgress> shard;
        std::optional<QDateTime> snoozedUntil;
        bool finishThenPause = false;
        QStringList pausedDevices;
        QJsonObject limits; // limitKeys(true), as now set
        QJsonValue stake; // {"broker", "balance", "stake"} as the broker last said, or null
        std::uint64_t actionsTaken = 0; // the sequence of the last Action the owner carried out
    };
    void publish(const Published& published);
    ~NodeControl();
    NodeControl(const NodeControl&) = delete;
    NodeControl& operator=(const NodeControl&) = delete;

    quint16 port() const;
    // "http://127.0.0.1:7780/", or over TLS (beyond loopback) "https://ADDRESS:PORT/ (certificate
    // SHA-256 FINGERPRINT)": what the node says in its log.
    QString address() const;
    QByteArray fingerprint() const; // empty without TLS

private:
    struct Private;
    explicit NodeControl(std::unique_ptr<Private> d);
    // Carries out a checked action (an error is answered 400).
    using Carry = std::function<core::Status(Private&, const Action&)>;
    static core::Result<std::unique_ptr<NodeControl>> serve(const core::settings::Settings& settings,
        const QString& dataDirectory, const Identity& identity, const Carry& carry, bool desktop);
    std::unique_ptr<Private> d;
};

} // namespace tessera::app
