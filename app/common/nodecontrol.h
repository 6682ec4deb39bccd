#pragma once

#include <compute/common/types.h>
#include <core/error.h>

#include <QString>

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
// Control/Enabled, Control/Bind, Control/Port, and the token in the data folder.
class NodeControl {
public:
    struct Identity {
        QString nodeId;
        QString name;
    };
    // Serves a compute thread's state, and pauses and resumes the thread (tessera-node). An error
    // says why not (the node runs on without it); null when Control/Enabled is false.
    static core::Result<std::unique_ptr<NodeControl>> start(const core::settings::Settings& settings,
        const QString& dataDirectory, compute::ComputeThread& thread, const Identity& identity);
    // Serves what its owner publishes, and hands it each action ("pause", "resume"), called on the
    // control thread (the desktop app, whose tray must agree).
    using Act = std::function<void(const QString& action)>;
    static core::Result<std::unique_ptr<NodeControl>> start(
        const core::settings::Settings& settings, const QString& dataDirectory, const Identity& identity, const Act& act);
    // The owner's state (thread-safe): pushed to the API's WebSockets when it changed.
    struct Published {
        QString state; // "working", "waiting", "paused", "snoozed", "offline", "off", "error"
        QString reason;
        bool paused = false;
        std::optional<compute::ShardProgress> shard;
    };
    void publish(const Published& published);
    ~NodeControl();
    NodeControl(const NodeControl&) = delete;
    NodeControl& operator=(const NodeControl&) = delete;

    quint16 port() const;

private:
    struct Private;
    explicit NodeControl(std::unique_ptr<Private> d);
    static core::Result<std::unique_ptr<NodeControl>> serve(
        const core::settings::Settings& settings, const QString& dataDirectory, const Identity& identity, const Act& act);
    std::unique_ptr<Private> d;
};

} // namespace tessera::app
