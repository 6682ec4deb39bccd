#pragma once

#include <core/error.h>

#include <QString>

#include <memory>

namespace tessera::core::settings {
class Settings;
}
namespace tessera::compute {
class ComputeThread;
}

namespace tessera::app {

// A node's control API (docs/CONTROL.md, control::ControlServer) on a thread of its own, for a
// compute thread's state and its pause and resume: Control/Enabled, Control/Bind, Control/Port, and
// the token in the data folder.
class NodeControl {
public:
    struct Identity {
        QString nodeId;
        QString name;
    };
    // Serves it; an error says why not (the node runs on without it). Null when Control/Enabled is
    // false.
    static core::Result<std::unique_ptr<NodeControl>> start(const core::settings::Settings& settings,
        const QString& dataDirectory, compute::ComputeThread& thread, const Identity& identity);
    ~NodeControl();
    NodeControl(const NodeControl&) = delete;
    NodeControl& operator=(const NodeControl&) = delete;

    quint16 port() const;

private:
    struct Private;
    explicit NodeControl(std::unique_ptr<Private> d);
    std::unique_ptr<Private> d;
};

} // namespace tessera::app
