#pragma once

#include <compute/environment.h>
#include <core/broker/broker.h>
#include <core/error.h>

#include <QString>

#include <atomic>
#include <memory>
#include <thread>

namespace tessera::app {

// A broker inside the desktop app, for a user with no network configured: the same Broker and
// BrokerServer as tessera-broker, on 127.0.0.1 at a free port, on its own thread, with a faucet so
// that the local wallet has credits. The app talks to it over TCP like to any broker.
class EmbeddedBroker {
public:
    struct Options {
        QString dataDirectory;
        compute::ComputeEnvironment environment;
        core::broker::Broker::Options broker;
        int heartbeatMs = 1000;
    };

    EmbeddedBroker() = default;
    ~EmbeddedBroker();
    EmbeddedBroker(const EmbeddedBroker&) = delete;
    EmbeddedBroker& operator=(const EmbeddedBroker&) = delete;

    // Starts it and returns its address (tcp://127.0.0.1:PORT) once it listens.
    core::Result<QString> start(Options options);
    void stop();
    QString address() const { return m_address; }
    bool running() const { return m_thread.joinable(); }

private:
    std::thread m_thread;
    std::atomic<bool> m_stop { false };
    QString m_address;
};

} // namespace tessera::app
